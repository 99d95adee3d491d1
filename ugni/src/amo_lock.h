// The AMO lock table of a target region (layout and protocol in nicemu/abi/shm_layout.h):
// every NIC AMO on a target word holds the lock its address selects, so that AMOs executed
// by different initiators through process_vm_readv/writev are atomic with respect to each
// other (design decision 3).
//
// A holder that dies must not block the others forever. The owner value names the holder
// process (pid and a start-time tag that survives pid reuse); a waiter that sees the same
// owner for a whole sleep slice checks whether that process still exists and, if not,
// takes the lock over by CAS of exactly that value. A holder that is alive but does not
// release (stopped in a debugger, SIGSTOP) cannot be told from a slow one, so the wait is
// bounded: after `timeout_ns` without any release the AMO is not executed and completes
// with a recoverable transient error, which clients answer by reposting.
#pragma once
#include <cstdint>

#include "nicemu/abi/shm_layout.h"

namespace nicemu::ugni {

struct Region;

inline constexpr int64_t kAmoLockTimeoutNs = 2'000'000'000;  // 2 s without any release
inline constexpr int64_t kAmoLockSliceNs = 10'000'000;       // sleep slice between holder checks

// The lock of `addr` in `r`'s table; nullptr if the region has no valid table.
abi::AmoLock* amo_lock_for(const Region& r, uint64_t addr);

enum class AmoLockResult { kAcquired, kBrokeDeadHolder, kTimeout };

// Takes `l` for this process. kTimeout: not taken (see above).
AmoLockResult amo_lock_acquire(abi::AmoLock* l, int64_t timeout_ns = kAmoLockTimeoutNs);
void amo_lock_release(abi::AmoLock* l);

// This process's owner value ((start-time tag << 32) | pid), current across fork.
uint64_t amo_lock_self();
// Whether the process an owner value names still exists (not reaped, not a zombie, and not
// a later process that reuses its pid). Conservative: true when it cannot tell.
bool amo_lock_holder_alive(uint64_t owner);

}  // namespace nicemu::ugni
