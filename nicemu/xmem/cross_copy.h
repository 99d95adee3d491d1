// Bytes to or from another process's memory (process_vm_readv/writev): libugni's FMA,
// SMSG and same-host AMO paths and the daemon's BTE engine, collective engine and the
// operations of other hosts all copy with it.
#pragma once
#include <sys/types.h>

#include <cstdint>

#include "nicemu/abi/region_access.h"

namespace nicemu::xmem {

// Called once per process when the kernel refuses cross-memory attach (EPERM), so the
// caller says why in its own words (the library on stderr, the daemon in its log).
void on_refused(void (*hook)());

// [addr, addr + n) in `pid` to (write) or from `buf`, until done. A CQE status
// (abi/cq_entry.h): `gone` if the process no longer exists, kErrMemAccess if the pages are
// not mapped or access is refused.
uint64_t copy(bool write, pid_t pid, uint64_t addr, void* buf, uint64_t n, uint64_t gone);

// The pieces of one side, in order, to or from consecutive bytes of `buf`.
uint64_t copy_pieces(bool write, pid_t pid, const abi::Extents& pieces, void* buf, uint64_t gone);

}  // namespace nicemu::xmem
