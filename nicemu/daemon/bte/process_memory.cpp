// Cross-memory attach for the daemon (process_memory.h).
#include "nicemu/daemon/bte/process_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <mutex>

#include <spdlog/spdlog.h>

#include "nicemu/abi/cq_entry.h"

namespace nicemu::daemon {

namespace cqe = nicemu::abi::cqe;

uint64_t cross_copy(bool write, pid_t pid, uint64_t addr, char* buf, uint64_t n, uint64_t gone) {
  uint64_t done = 0;
  while (done < n) {
    iovec l{buf + done, n - done};
    iovec r{reinterpret_cast<void*>(addr + done), n - done};
    ssize_t k = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (k <= 0) {
      if (errno == ESRCH) return gone;
      if (errno == EPERM) {
        static std::once_flag once;
        std::call_once(once, [] {
          spdlog::error(
              "BTE: cross-memory attach refused (EPERM): the daemon must run as the clients' user or root, "
              "and kernel.yama.ptrace_scope / seccomp must allow process_vm_readv/writev");
        });
      }
      return cqe::kErrMemAccess;  // EFAULT: the pages are not mapped (any more)
    }
    done += static_cast<uint64_t>(k);
  }
  return cqe::kOk;
}

uint64_t cross_copy_pieces(bool write, pid_t pid, const abi::Extents& pieces, char* buf, uint64_t gone) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (uint64_t st = cross_copy(write, pid, pieces[i].va, buf, pieces[i].len, gone)) return st;
    buf += pieces[i].len;
  }
  return cqe::kOk;
}

}  // namespace nicemu::daemon
