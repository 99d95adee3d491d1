// libugni's side of the AMO lock table (nicemu/amo/amo_lock.h): the lock of a word in a
// peer's region, taken and released as this process.
#pragma once
#include <cstdint>

#include "nicemu/amo/amo_lock.h"

namespace nicemu::ugni {

struct Region;

inline constexpr int64_t kAmoLockTimeoutNs = amo::kLockTimeoutNs;
using AmoLockResult = amo::LockResult;

// The lock of `addr` in `r`'s table; nullptr if the region has no valid table.
abi::AmoLock* amo_lock_for(const Region& r, uint64_t addr);
// Takes `l` for this process. kTimeout: not taken.
AmoLockResult amo_lock_acquire(abi::AmoLock* l, int64_t timeout_ns = kAmoLockTimeoutNs);
void amo_lock_release(abi::AmoLock* l);
// This process's owner value, current across fork.
uint64_t amo_lock_self();
inline bool amo_lock_holder_alive(uint64_t owner) { return amo::lock_holder_alive(owner); }

}  // namespace nicemu::ugni
