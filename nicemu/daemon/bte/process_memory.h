// Cross-memory attach for the daemon: bytes to or from another process's memory with
// process_vm_readv/writev, for the BTE engine and the operations of other hosts.
#pragma once
#include <sys/types.h>

#include <cstdint>

#include "nicemu/abi/region_access.h"

namespace nicemu::daemon {

// [addr, addr + n) in `pid` to (write) or from `buf`, until done. A CQE status: `gone` if the
// process no longer exists, kErrMemAccess if the pages are not mapped (or access is refused).
uint64_t cross_copy(bool write, pid_t pid, uint64_t addr, char* buf, uint64_t n, uint64_t gone);

// The pieces of one side, in order, to or from consecutive bytes of `buf`.
uint64_t cross_copy_pieces(bool write, pid_t pid, const abi::Extents& pieces, char* buf, uint64_t gone);

}  // namespace nicemu::daemon
