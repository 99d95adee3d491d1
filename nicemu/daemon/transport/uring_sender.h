// Sending the fabric's UDP datagrams through io_uring: one IORING_OP_SENDMSG per message of
// a batch (the same msghdrs sendmmsg would take, UDP GSO control messages included), all
// submitted with one system call. Every send carries MSG_DONTWAIT, so the kernel completes
// each at once — sent, or refused with EAGAIN for a full socket buffer, never parked — and
// the batch's buffers are free again when send() returns, as with sendmmsg.
#pragma once
#include <sys/socket.h>

#include <cstddef>
#include <string>

struct io_uring;

namespace nicemu::daemon {

class UringSender {
 public:
  UringSender() = default;
  ~UringSender();
  UringSender(const UringSender&) = delete;
  UringSender& operator=(const UringSender&) = delete;

  // A ring for batches of up to `batch` messages on `sock`; false with the reason in `why`.
  bool init(int sock, unsigned batch, std::string& why);
  // Sends msgs[0, n) (n <= batch); result[i] is the bytes msgs[i] sent or -errno. Returns
  // false if the ring failed as a whole (the caller falls back to sendmmsg).
  bool send(mmsghdr* msgs, size_t n, int* result);

 private:
  io_uring* ring_ = nullptr;
  bool ring_ok_ = false;
  int sock_ = -1;
  unsigned batch_ = 0;
};

}  // namespace nicemu::daemon
