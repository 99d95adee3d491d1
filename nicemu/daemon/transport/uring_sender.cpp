#include "nicemu/daemon/transport/uring_sender.h"

#include <liburing.h>

#include <cerrno>
#include <cstring>

namespace nicemu::daemon {

UringSender::~UringSender() {
  if (ring_ok_) io_uring_queue_exit(ring_);
  delete ring_;
}

bool UringSender::init(int sock, unsigned batch, std::string& why) {
  sock_ = sock;
  batch_ = batch;
  ring_ = new io_uring{};
  const int rc = io_uring_queue_init(batch, ring_, 0);
  if (rc < 0) {
    why = std::string("io_uring_queue_init: ") + std::strerror(-rc);
    return false;
  }
  ring_ok_ = true;
  return true;
}

bool UringSender::send(mmsghdr* msgs, size_t n, int* result) {
  if (n == 0) return true;
  if (n > batch_) return false;
  for (size_t i = 0; i < n; ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_);
    if (!sqe) return false;  // cannot happen: the ring holds a whole batch and is drained below
    io_uring_prep_sendmsg(sqe, sock_, &msgs[i].msg_hdr, MSG_DONTWAIT);
    io_uring_sqe_set_data64(sqe, i);
    result[i] = -EINPROGRESS;
  }
  // Submit and wait for every completion in one call. With MSG_DONTWAIT none is deferred,
  // so this does not block on the network.
  if (io_uring_submit_and_wait(ring_, static_cast<unsigned>(n)) < 0) return false;
  size_t got = 0;
  io_uring_cqe* cqe;
  while (got < n && io_uring_peek_cqe(ring_, &cqe) == 0) {
    const uint64_t i = io_uring_cqe_get_data64(cqe);
    if (i < n) result[i] = cqe->res;
    io_uring_cqe_seen(ring_, cqe);
    ++got;
  }
  return got == n;
}

}  // namespace nicemu::daemon
