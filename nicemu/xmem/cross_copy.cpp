#include "nicemu/xmem/cross_copy.h"

#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <mutex>

#include "nicemu/abi/cq_entry.h"

namespace nicemu::xmem {

namespace {
std::atomic<void (*)()> g_refused{nullptr};
std::atomic<uint64_t> g_refusals{0};

void report_refused() {
  g_refusals.fetch_add(1, std::memory_order_relaxed);
  static std::once_flag once;
  std::call_once(once, [] {
    if (auto* hook = g_refused.load()) hook();
  });
}
}  // namespace

void on_refused(void (*hook)()) { g_refused.store(hook); }

uint64_t refusals() { return g_refusals.load(std::memory_order_relaxed); }

Reach probe(pid_t pid) {
  char b;
  iovec l{&b, 1};
  iovec r{nullptr, 1};
  if (process_vm_readv(pid, &l, 1, &r, 1, 0) >= 0) return Reach::kAllowed;  // a page at 0 (vm.mmap_min_addr 0)
  if (errno == ESRCH) return Reach::kGone;
  return refused(errno) ? Reach::kRefused : Reach::kAllowed;
}

uint64_t copy(bool write, pid_t pid, uint64_t addr, void* buf, uint64_t n, uint64_t gone) {
  char* b = static_cast<char*>(buf);
  uint64_t done = 0;
  while (done < n) {
    iovec l{b + done, n - done};
    iovec r{reinterpret_cast<void*>(addr + done), n - done};
    ssize_t k = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (k <= 0) {
      if (errno == ESRCH) return gone;
      if (refused(errno)) report_refused();
      return abi::cqe::kErrMemAccess;  // EFAULT: the pages are not mapped (any more)
    }
    done += static_cast<uint64_t>(k);
  }
  return abi::cqe::kOk;
}

uint64_t copy_pieces(bool write, pid_t pid, const abi::Extents& pieces, void* buf, uint64_t gone) {
  char* b = static_cast<char*>(buf);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (uint64_t st = copy(write, pid, pieces[i].va, b, pieces[i].len, gone)) return st;
    b += pieces[i].len;
  }
  return abi::cqe::kOk;
}

}  // namespace nicemu::xmem
