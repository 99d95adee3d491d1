#include "uffd_source.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "invalidation_ring.h"

namespace nicemu::udreg {

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kWindow = 2ull << 20;
constexpr uint64_t kFeatures =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_PAGEFAULT_FLAG_WP;

std::atomic<int> g_fd{-1};
std::atomic<bool> g_active{false};

int open_uffd(std::string* why) {
  const int flags = O_CLOEXEC | O_NONBLOCK;
  int fd = int(syscall(SYS_userfaultfd, flags));
  if (fd >= 0) return fd;
  int first = errno;
  // vm.unprivileged_userfaultfd=0 still allows faults from user mode only, which is all
  // that events need.
  if (first == EPERM) {
    fd = int(syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY));
    if (fd >= 0) return fd;
  }
  // Linux 6.1: /dev/userfaultfd, governed by its file permissions instead of the sysctl.
  int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev >= 0) {
    fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
    close(dev);
    if (fd >= 0) return fd;
  }
  *why = std::string("userfaultfd() failed: ") + strerror(first) +
         (first == EPERM   ? " (vm.unprivileged_userfaultfd=0 and no CAP_SYS_PTRACE, no access to /dev/userfaultfd)"
          : first == ENOSYS ? " (not built into the kernel, or filtered by seccomp as in container defaults)"
                            : "");
  return -1;
}

bool register_range(int fd, uint64_t start, uint64_t end) {
  uffdio_register r{};
  r.range.start = start;
  r.range.len = end - start;
  r.mode = UFFDIO_REGISTER_MODE_WP;
  return ioctl(fd, UFFDIO_REGISTER, &r) == 0;
}

// Write-protect faults cannot happen (no page is ever write-protected); should one arrive
// anyway, lifting the protection lets the faulting thread go on.
void resolve_fault(int fd, const uffd_msg& m) {
  uffdio_writeprotect wp{};
  wp.range.start = m.arg.pagefault.address & ~(kPage - 1);
  wp.range.len = kPage;
  wp.mode = 0;
  ioctl(fd, UFFDIO_WRITEPROTECT, &wp);
}

// The monitor thread. It must not allocate or take any lock a thread blocked in munmap could
// hold (that thread may be inside free() with a malloc arena locked): poll, read, push.
void* monitor_main(void*) {
  int fd = g_fd.load(std::memory_order_acquire);
  InvalidationRing& ring = invalidation_ring();
  uffd_msg msgs[16];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) break;
    // Closed before read() lets the unmapping thread go: see invalidation_ring.h.
    ring.gate_close();
    for (;;) {
      ssize_t n = read(fd, msgs, sizeof msgs);
      if (n <= 0) break;
      for (size_t i = 0; i < size_t(n) / sizeof(uffd_msg); ++i) {
        const uffd_msg& m = msgs[i];
        switch (m.event) {
          case UFFD_EVENT_UNMAP:
          case UFFD_EVENT_REMOVE:
            report_unmapped(m.arg.remove.start, m.arg.remove.end);
            break;
          case UFFD_EVENT_REMAP:
            report_unmapped(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len);
            break;
          case UFFD_EVENT_PAGEFAULT:
            resolve_fault(fd, m);
            break;
          default:
            break;
        }
      }
    }
    ring.gate_open();
  }
  // Without a reader, unmapping threads would block for ever: closing the descriptor drops
  // every registration. Entries it watched can no longer be trusted.
  g_active.store(false, std::memory_order_release);
  g_fd.store(-1, std::memory_order_release);
  close(fd);
  ring.bump_epoch();
  return nullptr;
}

}  // namespace

bool uffd_start(std::string* why) {
  if (g_active.load(std::memory_order_acquire)) return true;
  int fd = open_uffd(why);
  if (fd < 0) return false;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kFeatures;
  if (ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & kFeatures) != kFeatures) {
    *why = std::string("userfaultfd lacks the unmap/remove/remap events or write-protect mode: ") + strerror(errno);
    close(fd);
    return false;
  }
  // Anonymous memory must be registrable in write-protect mode (Linux 5.7).
  void* probe = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bool ok = probe != MAP_FAILED && register_range(fd, uint64_t(probe), uint64_t(probe) + kPage);
  int err = errno;
  if (ok) {
    uffdio_range r{uint64_t(probe), kPage};
    ioctl(fd, UFFDIO_UNREGISTER, &r);
  }
  if (probe != MAP_FAILED) munmap(probe, kPage);
  if (!ok) {
    *why = std::string("userfaultfd refuses write-protect registration of anonymous memory: ") + strerror(err);
    close(fd);
    return false;
  }
  g_fd.store(fd, std::memory_order_release);

  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);  // room for sanitizer builds; the loop needs little
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // the thread inherits a mask blocking everything
  pthread_t t;
  int rc = pthread_create(&t, &attr, monitor_main, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    *why = std::string("cannot start the userfaultfd monitor thread: ") + strerror(rc);
    g_fd.store(-1, std::memory_order_release);
    close(fd);
    return false;
  }
  pthread_setname_np(t, "udreg-uffd");
  g_active.store(true, std::memory_order_release);
  return true;
}

bool uffd_active() { return g_active.load(std::memory_order_acquire); }

bool uffd_watch(uint64_t start, uint64_t end) {
  if (!uffd_active()) return false;
  int fd = g_fd.load(std::memory_order_acquire);
  uint64_t a = start & ~(kPage - 1);
  uint64_t b = (end + kPage - 1) & ~(kPage - 1);
  uint64_t wa = a & ~(kWindow - 1);
  uint64_t wb = (b + kWindow - 1) & ~(kWindow - 1);
  // The window fails when it reaches into file mappings, read-only shared mappings or
  // another userfaultfd's memory; then the pages alone.
  if (!register_range(fd, wa, wb) && !register_range(fd, a, b)) return false;
  // The kernel registers the mappings it finds and skips holes without saying so: memory
  // mapped into a hole later would not be watched. Unmapped pages make msync fail (with
  // MS_ASYNC it does nothing else on Linux), so a range that is not entirely mapped now is
  // not watched. (Memory unmapped and mapped again by another thread between the two calls,
  // while it is being registered, is an application race this cannot see; the hooks do.)
  return msync(reinterpret_cast<void*>(a), b - a, MS_ASYNC) == 0;
}

void uffd_forget_after_fork() {
  int fd = g_fd.exchange(-1);
  g_active.store(false, std::memory_order_release);
  if (fd >= 0) close(fd);
}

}  // namespace nicemu::udreg
