// Receiving the fabric's UDP datagrams through io_uring: one multishot recvmsg with a ring
// of provided buffers (Linux 6.0+), completions signalled on an eventfd that the daemon's
// Asio loop watches. One submission serves every datagram until the kernel ends it; each
// buffer goes back to the ring as soon as its packet is handled, so nothing is allocated or
// copied per packet. init() fails (and the transport falls back to recvmmsg) where io_uring,
// provided-buffer rings or multishot recvmsg are missing or forbidden (seccomp, sysctl).
#pragma once
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

struct io_uring;
struct io_uring_buf_ring;

namespace nicemu::daemon {

class UringReceiver {
 public:
  // f(datagram, length, source, truncated, segment) for each datagram received; `segment`
  // is the UDP GRO segment size when the kernel coalesced several datagrams of one sender
  // into this one (each `segment` bytes, the last possibly shorter), else 0.
  using Packet = std::function<void(const uint8_t*, size_t, const sockaddr_in&, bool, size_t)>;

  UringReceiver() = default;
  ~UringReceiver();
  UringReceiver(const UringReceiver&) = delete;
  UringReceiver& operator=(const UringReceiver&) = delete;

  // Sets up the ring, its buffers and the first multishot receive on `sock`; false with
  // the reason in `why` if this kernel cannot.
  // `max_datagram`: the largest datagram to receive whole (64 KiB with UDP GRO on).
  bool init(int sock, size_t max_datagram, std::string& why);
  int event_fd() const { return efd_; }
  // Handles every completion available now; returns the number of datagrams.
  size_t drain(const Packet& f);
  // Whether the ring runs completions cooperatively (IORING_SETUP_COOP_TASKRUN).
  bool cooperative() const { return coop_; }

 private:
  bool arm();
  io_uring* ring_ = nullptr;
  io_uring_buf_ring* br_ = nullptr;
  uint8_t* bufs_ = nullptr;
  size_t buf_size_ = 0, br_bytes_ = 0;
  int sock_ = -1, efd_ = -1;
  bool ring_ok_ = false;
  bool coop_ = false;
};

}  // namespace nicemu::daemon
