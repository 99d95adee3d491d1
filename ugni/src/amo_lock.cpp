// libugni's side of the AMO lock table (the protocol is nicemu/amo/amo_lock.cpp).
#include "amo_lock.h"

#include "internal.h"

namespace nicemu::ugni {

abi::AmoLock* amo_lock_for(const Region& r, uint64_t addr) {
  return amo::lock_for(r.base, abi::kRoSize, r.size, r.header()->amo_lock_count, r.header()->amo_lock_offset, addr);
}

uint64_t amo_lock_self() { return amo::lock_self(self_pid()); }

AmoLockResult amo_lock_acquire(abi::AmoLock* l, int64_t timeout_ns) {
  return amo::lock_acquire(l, amo_lock_self(), spin_ns(), timeout_ns);
}

void amo_lock_release(abi::AmoLock* l) { amo::lock_release(l, amo_lock_self()); }

}  // namespace nicemu::ugni
