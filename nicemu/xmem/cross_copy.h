// Bytes to or from another process's memory (process_vm_readv/writev): libugni's FMA,
// SMSG and same-host AMO paths and the daemon's BTE engine, collective engine and the
// operations of other hosts all copy with it.
#pragma once
#include <sys/types.h>

#include <cerrno>
#include <cstdint>

#include "nicemu/abi/region_access.h"

namespace nicemu::xmem {

// Called once per process when the kernel refuses a cross-memory copy (refused() below),
// so the caller says why in its own words (the library on stderr, the daemon in its log).
void on_refused(void (*hook)());
// Copies the kernel refused in this process so far (the daemon's counter page shows them).
uint64_t refusals();

// Whether errno `e` of process_vm_readv/writev means "not allowed" rather than "no such
// pages" or "no such process": EPERM (another user without CAP_SYS_PTRACE, Yama
// ptrace_scope 2/3, an LSM, a seccomp filter returning EPERM), EACCES (a filter or LSM
// returning it), ENOSYS (a seccomp filter's default errno, or a kernel built without
// CONFIG_CROSS_MEMORY_ATTACH).
constexpr bool refused(int e) { return e == EPERM || e == EACCES || e == ENOSYS; }

// Whether this process may copy to and from `pid`: one process_vm_readv of one byte at
// address 0, which the kernel checks for permission before it looks at the address (EFAULT
// then means allowed). Used once per peer, never per transfer.
enum class Reach { kAllowed, kRefused, kGone };
Reach probe(pid_t pid);

// [addr, addr + n) in `pid` to (write) or from `buf`, until done. A CQE status
// (abi/cq_entry.h): `gone` if the process no longer exists, kErrMemAccess if the pages are
// not mapped or access is refused.
uint64_t copy(bool write, pid_t pid, uint64_t addr, void* buf, uint64_t n, uint64_t gone);

// The pieces of one side, in order, to or from consecutive bytes of `buf`.
uint64_t copy_pieces(bool write, pid_t pid, const abi::Extents& pieces, void* buf, uint64_t gone);

}  // namespace nicemu::xmem
