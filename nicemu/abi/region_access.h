// Reading a mapped CDM region (shm_layout.h) the way every remote party must: registrations
// copied out under their seqlock, CQ ring views built from the read-only descriptors and
// bounds-checked against the region, and the one access check of design decision 4.
// Shared by libugni (same-host FMA/SMSG requesters) and the daemon (BTE engine), so both
// accept and refuse exactly the same accesses. Header-only.
#pragma once
#include <atomic>
#include <cstdint>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/cq_ring.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/shm_layout.h"

namespace nicemu::abi {

// True if [offset, offset + bytes) lies in the read-write heap of a region of `size` bytes.
constexpr bool region_in_heap(uint64_t size, uint64_t offset, uint64_t bytes) {
  return offset >= kRoSize && bytes <= size && offset <= size - bytes;
}

// Copies registration `slot` out under its seqlock; false if it kept changing.
inline bool region_read_reg(const char* base, uint32_t slot, RegEntry& out) {
  if (slot >= kRegSlots) return false;
  const auto* e = reinterpret_cast<const RegEntry*>(base + kRegTableOffset) + slot;
  for (int tries = 0; tries < 64; ++tries) {
    uint32_t s1 = e->seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    out.state = e->state;
    out.gen = e->gen;
    out.flags = e->flags;
    out.address = e->address;
    out.length = e->length;
    out.dst_cq = e->dst_cq;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e->seq.load(std::memory_order_relaxed) == s1) return true;
  }
  return false;
}

// A ring view of CQ `slot`; an invalid view if the CQ is not live or its descriptor points
// outside the heap.
inline CqRingView region_cq_view(char* base, uint64_t size, uint32_t slot) {
  CqRingView v;
  if (slot >= kCqSlots) return v;
  const auto* d = reinterpret_cast<const CqDesc*>(base + kCqTableOffset) + slot;
  if (d->state.load(std::memory_order_acquire) != kCqLive) return v;
  uint32_t cap = d->capacity;
  if (cap == 0 || (cap & (cap - 1)) != 0) return v;
  if (!region_in_heap(size, d->ctl_offset, sizeof(CqRingCtl)) ||
      !region_in_heap(size, d->entries_offset, uint64_t{cap} * 8))
    return v;
  v.ctl = reinterpret_cast<CqRingCtl*>(base + d->ctl_offset);
  v.entries = reinterpret_cast<std::atomic<uint64_t>*>(base + d->entries_offset);
  v.mask = cap - 1;
  return v;
}

// Validates an access of [addr, addr + len) through handle (q1, q2) against the region's
// registration table. Returns a CQE status (0 = allowed) and, if asked, the registration's
// CQ for remote events.
inline uint64_t region_check_access(const char* base, uint64_t q1, uint64_t q2, uint64_t addr, uint64_t len,
                                    bool write, uint32_t* dst_cq) {
  auto f = mdh::decode(q1, q2);
  if (!f) return cqe::kErrProtection;
  RegEntry e;
  if (!region_read_reg(base, f->slot, e) || e.state != kRegLive || e.gen != f->gen ||
      (e.address & ~(kPageSize - 1)) != f->va)
    return cqe::kErrProtection;
  if (addr < e.address || len > e.length || addr - e.address > e.length - len) return cqe::kErrBounds;
  if (write && (e.flags & gni::kMemReadOnly)) return cqe::kErrReadOnly;
  if (dst_cq) *dst_cq = e.dst_cq;
  return cqe::kOk;
}

}  // namespace nicemu::abi
