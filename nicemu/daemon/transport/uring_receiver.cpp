#include "nicemu/daemon/transport/uring_receiver.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <netinet/udp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nicemu::daemon {

namespace {
constexpr unsigned kBuffers = 128;  // datagrams the kernel can hold for us between drains
constexpr unsigned kGroup = 1;      // provided-buffer group id
msghdr g_shape{};                   // only namelen/controllen matter to the helpers
}  // namespace

UringReceiver::~UringReceiver() {
  if (ring_ok_ && sock_ >= 0) {
    // Cancel the multishot receive and wait until the kernel confirms: the request holds
    // the socket, and a ring torn down with it still pending keeps the UDP port bound for
    // a while after we exit, so a restarted daemon could not bind it.
    if (io_uring_sqe* sqe = io_uring_get_sqe(ring_)) {
      io_uring_prep_cancel_fd(sqe, sock_, 0);
      io_uring_submit(ring_);
      for (int i = 0; i < 64; ++i) {
        io_uring_cqe* cqe = nullptr;
        __kernel_timespec ts{0, 50'000'000};
        if (io_uring_wait_cqe_timeout(ring_, &cqe, &ts) != 0 || !cqe) break;
        bool ended = cqe->res == -ECANCELED || (cqe->res < 0 && !(cqe->flags & IORING_CQE_F_MORE));
        io_uring_cqe_seen(ring_, cqe);
        if (ended) break;
      }
    }
  }
  if (ring_ok_) {
    if (br_) io_uring_unregister_buf_ring(ring_, kGroup);
    io_uring_queue_exit(ring_);
  }
  delete ring_;
  if (br_) munmap(br_, br_bytes_);
  delete[] bufs_;
  if (efd_ >= 0) ::close(efd_);
}

bool UringReceiver::init(int sock, size_t max_datagram, std::string& why) {
  sock_ = sock;
  ring_ = new io_uring{};
  // Cooperative task running (Linux 5.19+): a datagram for us, while the daemon runs, is
  // received at its next system call instead of by interrupting it with an IPI, which the
  // sending CPU pays for (half of the send path's wake-up cost in a bulk stream). A
  // sleeping daemon is woken as before. TASKRUN_FLAG tells drain() that work waits.
  int rc = io_uring_queue_init(64, ring_, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
  coop_ = rc >= 0;
  if (rc == -EINVAL) rc = io_uring_queue_init(64, ring_, 0);
  if (rc < 0) {
    why = std::string("io_uring_queue_init: ") + std::strerror(-rc);
    return false;
  }
  ring_ok_ = true;
  // Provided buffers: recvmsg_out header, the source address, room for a UDP_GRO control
  // message, then the datagram; one byte more than the largest, so an oversized datagram
  // shows as truncated.
  // Rounded to a cache line: the kernel writes an io_uring_recvmsg_out at the start of
  // each buffer, which must be aligned (UBSan caught 1433-byte strides).
  buf_size_ = (sizeof(io_uring_recvmsg_out) + sizeof(sockaddr_in) + CMSG_SPACE(sizeof(int)) + max_datagram + 1 + 63) /
              64 * 64;
  // Touched now (value-initialized): the kernel fills the buffers in turn, each as far as
  // its datagrams reach, so untouched buffers made the daemon's RSS creep up for hours
  // (8 MiB with GRO) and hid any real leak in a soak (issue 36).
  bufs_ = new uint8_t[buf_size_ * kBuffers]();
  br_bytes_ = sizeof(io_uring_buf) * kBuffers;
  void* mem = mmap(nullptr, br_bytes_, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (mem == MAP_FAILED) {
    why = std::string("mmap: ") + std::strerror(errno);
    return false;
  }
  br_ = static_cast<io_uring_buf_ring*>(mem);
  io_uring_buf_ring_init(br_);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(br_);
  reg.ring_entries = kBuffers;
  reg.bgid = kGroup;
  rc = io_uring_register_buf_ring(ring_, &reg, 0);
  if (rc < 0) {
    munmap(br_, br_bytes_);
    br_ = nullptr;
    why = std::string("provided-buffer ring: ") + std::strerror(-rc);
    return false;
  }
  for (unsigned i = 0; i < kBuffers; ++i)
    io_uring_buf_ring_add(br_, bufs_ + i * buf_size_, static_cast<unsigned>(buf_size_), static_cast<unsigned short>(i),
                          io_uring_buf_ring_mask(kBuffers), static_cast<int>(i));
  io_uring_buf_ring_advance(br_, kBuffers);
  efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0 || io_uring_register_eventfd(ring_, efd_) < 0) {
    why = "eventfd registration failed";
    return false;
  }
  g_shape.msg_namelen = sizeof(sockaddr_in);
  g_shape.msg_controllen = CMSG_SPACE(sizeof(int));
  if (!arm()) {
    why = "cannot submit a multishot recvmsg";
    return false;
  }
  // The first completion tells whether the kernel knows multishot recvmsg: probe it now.
  io_uring_cqe* cqe = nullptr;
  __kernel_timespec ts{0, 20'000'000};
  if (io_uring_wait_cqe_timeout(ring_, &cqe, &ts) == 0 && cqe && cqe->res < 0 && !(cqe->flags & IORING_CQE_F_MORE)) {
    why = std::string("multishot recvmsg: ") + std::strerror(-cqe->res);
    io_uring_cqe_seen(ring_, cqe);
    return false;
  }
  return true;
}

bool UringReceiver::arm() {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_);
  if (!sqe) return false;
  io_uring_prep_recvmsg_multishot(sqe, sock_, &g_shape, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kGroup;
  return io_uring_submit(ring_) >= 0;
}

size_t UringReceiver::drain(const Packet& f) {
  // One read empties the eventfd (a counter, not a semaphore).
  uint64_t signals;
  [[maybe_unused]] ssize_t got = ::read(efd_, &signals, sizeof signals);
  size_t n = 0;
  bool rearm = false;
  io_uring_cqe* cqe;
  for (int entered = 0;;) {
    while (io_uring_peek_cqe(ring_, &cqe) == 0) {
      if (!(cqe->flags & IORING_CQE_F_MORE)) rearm = true;  // the kernel ended this receive
      if (cqe->res >= 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
        unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        if (bid < kBuffers) {
          uint8_t* buf = bufs_ + bid * buf_size_;
          io_uring_recvmsg_out* o = io_uring_recvmsg_validate(buf, cqe->res, &g_shape);
          if (o && o->namelen >= sizeof(sockaddr_in)) {
            sockaddr_in from;
            std::memcpy(&from, io_uring_recvmsg_name(o), sizeof from);
            const auto* p = static_cast<const uint8_t*>(io_uring_recvmsg_payload(o, &g_shape));
            size_t len = io_uring_recvmsg_payload_length(o, cqe->res, &g_shape);
            size_t segment = 0;
            for (cmsghdr* c = io_uring_recvmsg_cmsg_firsthdr(o, &g_shape); c;
                 c = io_uring_recvmsg_cmsg_nexthdr(o, &g_shape, c))
              if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
                int v = 0;
                std::memcpy(&v, CMSG_DATA(c), sizeof v);
                if (v > 0) segment = static_cast<size_t>(v);
              }
            f(p, len, from, (o->flags & MSG_TRUNC) != 0, segment);
            ++n;
          }
          // Back to the kernel at once: the callback copied what it keeps.
          io_uring_buf_ring_add(br_, buf, static_cast<unsigned>(buf_size_), static_cast<unsigned short>(bid),
                                io_uring_buf_ring_mask(kBuffers), 0);
          io_uring_buf_ring_advance(br_, 1);
        }
      }
      io_uring_cqe_seen(ring_, cqe);
    }
    // With cooperative task running, receives the kernel has queued for us complete only
    // when we enter it: do so while it says work waits (bounded: datagrams keep coming).
    if (!coop_ || ++entered > 3 || !(IO_URING_READ_ONCE(*ring_->sq.kflags) & IORING_SQ_TASKRUN)) break;
    io_uring_get_events(ring_);
  }
  if (rearm) arm();
  return n;
}

}  // namespace nicemu::daemon
