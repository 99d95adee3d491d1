// The AMO lock table of a target region (layout in nicemu/abi/shm_layout.h): every NIC AMO
// on a target word holds the lock its address selects, so that AMOs executed by different
// initiators through process_vm_readv/writev (libugni on this host, a daemon for initiators
// on other hosts) are atomic with respect to each other (design decision 3).
//
// A holder that dies must not block the others forever. The owner value names the holder
// process (pid and a start-time tag that survives pid reuse); a waiter that sees the same
// owner for a whole sleep slice checks whether that process still exists and, if not,
// takes the lock over by CAS of exactly that value. A holder that is alive but does not
// release (stopped in a debugger, SIGSTOP) cannot be told from a slow one, so the wait is
// bounded: after `timeout_ns` without any release the AMO is not executed and completes
// with a recoverable transient error, which clients answer by reposting.
#pragma once
#include <sys/types.h>

#include <cstdint>

#include "nicemu/abi/shm_layout.h"

namespace nicemu::amo {

inline constexpr int64_t kLockTimeoutNs = 2'000'000'000;  // 2 s without any release
inline constexpr int64_t kLockSliceNs = 10'000'000;       // sleep slice between holder checks
// The longest a daemon waits for a target's lock before the AMO completes with a recoverable
// error: a stopped process holding its own lock must not stall every job's traffic the
// daemon serves (the remote responder's loop, the BTE engine's channels).
inline constexpr int64_t kDaemonLockWaitNs = 200'000'000;

// The lock of `addr` in a region mapped at `base` (`region_size` bytes, heap from
// `heap_offset`) whose header announces `count` locks at `offset`; nullptr if that table
// is not valid.
abi::AmoLock* lock_for(char* base, uint64_t heap_offset, uint64_t region_size, uint32_t count, uint64_t offset,
                       uint64_t addr);

enum class LockResult { kAcquired, kBrokeDeadHolder, kTimeout };

// Takes `l` for the owner value `me` (lock_self), spinning `spin_ns` before sleeping.
// kTimeout: not taken (see above). Any wake-up counts as a release there, so a holder that
// keeps waking the waiters without releasing would keep them waiting for ever; a caller
// that must not wait long whatever the lock's owner writes (the daemon's loop, serving
// every job) also bounds the whole wait with `max_total_ns` (< 0: no bound).
LockResult lock_acquire(abi::AmoLock* l, uint64_t me, uint64_t spin_ns, int64_t timeout_ns = kLockTimeoutNs,
                        int64_t max_total_ns = -1);
void lock_release(abi::AmoLock* l, uint64_t me);

// The owner value of process `pid` ((start-time tag << 32) | pid); cached for the last pid.
uint64_t lock_self(pid_t pid);
// Whether the process an owner value names still exists (not reaped, not a zombie, and not
// a later process that reuses its pid). Conservative: true when it cannot tell.
bool lock_holder_alive(uint64_t owner);

}  // namespace nicemu::amo
