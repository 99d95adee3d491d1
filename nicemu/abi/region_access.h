// Reading a mapped CDM region (shm_layout.h) the way every remote party must: registrations
// copied out under their seqlock, CQ ring views built from the read-only descriptors and
// bounds-checked against the region, and the one access check of design decision 4.
// Shared by libugni (same-host FMA/SMSG requesters) and the daemon (BTE engine), so both
// accept and refuse exactly the same accesses. Header-only.
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

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

inline const RegEntry* region_reg_entry(const char* base, uint32_t slot) {
  return reinterpret_cast<const RegEntry*>(base + kRegTableOffset) + slot;
}

// Copies entry `e` out under its seqlock; false if it kept changing. `seq_out` receives the
// sequence the copy is valid for (to extend the read over its segments).
inline bool region_read_entry(const RegEntry& e, RegEntry& out, uint32_t* seq_out = nullptr) {
  for (int tries = 0; tries < 64; ++tries) {
    uint32_t s1 = e.seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    out.state = e.state;
    out.gen = e.gen;
    out.flags = e.flags;
    out.address = e.address;
    out.length = e.length;
    out.dst_cq = e.dst_cq;
    out.seg_count = e.seg_count;
    out.seg_first = e.seg_first;
    out.domain = e.domain;
    out.vmdh = e.vmdh;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) == s1) {
      if (seq_out) *seq_out = s1;
      return true;
    }
  }
  return false;
}

// Registration `slot` of a mapped region.
inline bool region_read_reg(const char* base, uint32_t slot, RegEntry& out, uint32_t* seq_out = nullptr) {
  if (slot >= kRegSlots) return false;
  return region_read_entry(*region_reg_entry(base, slot), out, seq_out);
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

// Whether entry `e` was registered under the MDH handle `f` carries: the memory domain, or
// for a vMDH handle the vMDH index. Nothing else (state, page, slot).
inline bool region_entry_owner(const mdh::Fields& f, const RegEntry& e) {
  return (f.flags & mdh::kFlagVmdh) ? e.vmdh == f.domain + 1 : e.domain == f.domain;
}

// Whether entry `e` holds the registration handle `f` names, live or reserved: its owner
// and first page. What deregistering (or filling in) through `f` acts on.
inline bool region_entry_holds(const mdh::Fields& f, const RegEntry& e) {
  return e.state != kRegFree && region_entry_owner(f, e) && (e.address & ~(kPageSize - 1)) == f.va;
}

// Whether entry `e` is the registration handle `f` names (ignoring the slot): its owner
// (region_entry_owner) and, but for a vMDH handle, its first page; live (a reserved
// registration is not, until its pages are filled in).
inline bool region_entry_named(const mdh::Fields& f, const RegEntry& e) {
  if (e.state != kRegLive || !region_entry_owner(f, e)) return false;
  return (f.flags & mdh::kFlagVmdh) || (e.address & ~(kPageSize - 1)) == f.va;
}

// Where remote address `addr` through handle `f` lands in entry `e`'s address space (an
// offset for a multi-segment registration): itself, or for a vMDH handle the entry's first
// page + (addr - the handle's VA), see mem_handle.h.
inline uint64_t region_entry_address(const mdh::Fields& f, const RegEntry& e, uint64_t addr) {
  if (!(f.flags & mdh::kFlagVmdh)) return addr;
  return (e.address & ~(kPageSize - 1)) + (addr - f.va);
}

// The access check on a copied entry: the handle names it (slot, memory domain, first page
// and page count; a client-built handle may leave the count unbounded; a vMDH handle names
// it by index), the range lies inside it, a write does not target read-only memory. A CQE
// status. `addr` is already translated (region_entry_address). A slot registered again for
// exactly the same pages by the same domain accepts the old handle, as the hardware's MDD
// does: it is the same memory of the same owner.
inline uint64_t region_check_entry(const mdh::Fields& f, const RegEntry& e, uint64_t addr, uint64_t len, bool write) {
  if (!region_entry_named(f, e)) return cqe::kErrProtection;
  if (!(f.flags & mdh::kFlagVmdh) && f.npages != mdh::kPagesUnbounded &&
      f.npages != mdh::registration_fields(e.address, e.length, 0, 0, false).npages)
    return cqe::kErrProtection;
  if (addr < e.address || len > e.length || addr - e.address > e.length - len) return cqe::kErrBounds;
  if (write && (e.flags & gni::kMemReadOnly)) return cqe::kErrReadOnly;
  return cqe::kOk;
}

// A handle the client built itself (libfabric's gni provider turns a 64-bit key of VA page
// and MDH back into a handle with GNI_MEMHNDL_SET_*) has no registration slot: its slot bits
// are 0 and its page count "unbounded". Such a handle names memory by (memory domain, first
// page), as the hardware's MDD does, so the target looks the registration up by address.
// Each thread remembers where it found the last few (a hint only: the entry is checked again
// on every use), so a program posting through one key scans the table once.
struct VaHint {
  const char* base;
  uint64_t va;
  uint32_t domain;
  uint32_t slot;
};
inline VaHint& region_va_hint(const char* base, uint64_t va, uint32_t domain) {
  thread_local VaHint hints[64] = {};
  uint64_t h = (reinterpret_cast<uintptr_t>(base) >> 12) ^ (va >> 12) ^ (uint64_t{domain} << 20);
  h ^= h >> 17;
  return hints[(h * 0x9E3779B97F4A7C15ull) >> 58];
}

// Finds the registration handle `f` names for [addr, addr + len): its own slot, or for a
// client-built handle (unbounded page count) any live registration of the same domain and
// first page that allows the access, or for a vMDH handle the registration of its index.
// `whole`: no bytes, at the registration's own start (the check of a CQ write). A CQE
// status; on success `e` is the entry, `slot` its index, `at` where `addr` lands
// (region_entry_address) and `seq` the sequence the copy is valid for, when asked.
inline uint64_t region_resolve(const char* base, const mdh::Fields& f, uint64_t addr, uint64_t len, bool write,
                               RegEntry& e, uint32_t& slot, uint32_t* seq = nullptr, bool whole = false,
                               uint64_t* at = nullptr) {
  const bool vmdh = f.flags & mdh::kFlagVmdh;
  auto check = [&] {
    if (whole) return region_check_entry(f, e, e.address, 0, false);
    const uint64_t a = region_entry_address(f, e, addr);
    if (at) *at = a;
    return region_check_entry(f, e, a, len, write);
  };
  uint64_t st = cqe::kErrProtection;
  if (region_read_reg(base, f.slot, e, seq)) {
    st = check();
    if (st == cqe::kOk) {
      slot = f.slot;
      return st;
    }
  }
  if (!vmdh && f.npages != mdh::kPagesUnbounded) return st;
  if (vmdh && st != cqe::kErrProtection) return st;  // the slot it names is its registration
  const uint64_t hint_va = vmdh ? ~uint64_t{0} : f.va;
  VaHint& hint = region_va_hint(base, hint_va, f.domain);
  if (hint.base == base && hint.va == hint_va && hint.domain == f.domain && hint.slot != f.slot &&
      region_read_reg(base, hint.slot, e, seq) && check() == cqe::kOk) {
    slot = hint.slot;
    return cqe::kOk;
  }
  // The table, entry by entry: a cheap look at state, domain and address (or vMDH index)
  // first (racy, so only a filter), then the seqlocked copy and the full check.
  for (uint32_t i = 0; i < kRegSlots; ++i) {
    const RegEntry* r = region_reg_entry(base, i);
    if (i == f.slot || r->state != kRegLive) continue;
    if (vmdh ? r->vmdh != f.domain + 1 : (r->domain != f.domain || (r->address & ~(kPageSize - 1)) != f.va)) continue;
    if (!region_read_reg(base, i, e, seq)) continue;
    uint64_t c = check();
    if (c == cqe::kOk) {
      slot = i;
      hint = VaHint{base, hint_va, f.domain, i};
      return c;
    }
    if (st == cqe::kErrProtection) st = c;  // a matching registration's reason (bounds, read-only)
  }
  return st;
}

// Validates an access of [addr, addr + len) through handle (q1, q2) against the region's
// registration table. Returns a CQE status (0 = allowed) and, if asked, the registration's
// CQ for remote events. For a multi-segment registration `addr` is an offset; use
// region_translate to learn where the bytes are.
inline uint64_t region_check_access(const char* base, uint64_t q1, uint64_t q2, uint64_t addr, uint64_t len,
                                    bool write, uint32_t* dst_cq) {
  auto f = mdh::decode(q1, q2, true);
  if (!f) return cqe::kErrProtection;
  RegEntry e;
  uint32_t slot = 0;
  if (uint64_t st = region_resolve(base, *f, addr, len, write, e, slot)) return st;
  if (dst_cq) *dst_cq = e.dst_cq;
  return cqe::kOk;
}

// The CQ a CQ write through handle (q1, q2) lands in: the handle must name a live
// registration of the region (the check of every access, for no bytes) that has a CQ for
// remote events. A CQE status; `dst_cq` set when allowed.
inline uint64_t region_cq_write_target(const char* base, uint64_t q1, uint64_t q2, uint32_t& dst_cq) {
  auto f = mdh::decode(q1, q2, true);
  if (!f) return cqe::kErrProtection;
  RegEntry e;
  uint32_t slot = 0;
  if (region_resolve(base, *f, 0, 0, false, e, slot, nullptr, true) != cqe::kOk || e.dst_cq == kNoCq)
    return cqe::kErrProtection;  // nowhere to write: as a bad handle
  dst_cq = e.dst_cq;
  return cqe::kOk;
}

// Where an access lands in the owner's address space: one piece for a plain registration,
// one per segment touched for a multi-segment one. Keeps the first piece inline so the
// common case allocates nothing.
struct Extent {
  uint64_t va;
  uint64_t len;
};
class Extents {
 public:
  void clear() {
    n_ = 0;
    rest_.clear();
  }
  void push(uint64_t va, uint64_t len) {
    if (n_++ == 0)
      first_ = Extent{va, len};
    else
      rest_.push_back(Extent{va, len});
  }
  size_t size() const { return n_; }
  const Extent& operator[](size_t i) const { return i == 0 ? first_ : rest_[i - 1]; }

 private:
  Extent first_{};
  size_t n_ = 0;
  std::vector<Extent> rest_;
};

// Copies the pieces of [off, off + len) of a multi-segment registration out of the segment
// table. False if the table does not describe the registration (never written so by the
// daemon: treated as a protection error).
inline bool region_read_segments(const char* base, const RegEntry& e, uint64_t off, uint64_t len, Extents& out) {
  if (e.seg_count == 0 || e.seg_count > kMaxRegSegments || e.seg_first >= kSegSlots ||
      e.seg_count > kSegSlots - e.seg_first)
    return false;
  const auto* seg = reinterpret_cast<const SegEntry*>(base + kSegTableOffset) + e.seg_first;
  // The last segment starting at or before `off` (offsets ascend).
  uint32_t lo = 0, hi = e.seg_count;
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (seg[mid].offset <= off)
      lo = mid;
    else
      hi = mid;
  }
  for (uint32_t i = lo; len > 0; ++i) {
    if (i >= e.seg_count) return false;
    const SegEntry s{seg[i].offset, seg[i].address, seg[i].length, 0};
    if (off < s.offset || off - s.offset >= s.length) return false;  // a gap: not a table we wrote
    uint64_t in = off - s.offset;
    uint64_t n = s.length - in < len ? s.length - in : len;
    out.push(s.address + in, n);
    off += n;
    len -= n;
  }
  return true;
}

// region_check_access, and the owner's pieces of the access in `out`. The segments are
// read inside the entry's seqlock, so a registration replaced meanwhile is retried, never
// mixed with another's segments.
inline uint64_t region_translate(const char* base, uint64_t q1, uint64_t q2, uint64_t addr, uint64_t len, bool write,
                                 uint32_t* dst_cq, Extents& out) {
  out.clear();
  auto f = mdh::decode(q1, q2, true);
  if (!f) return cqe::kErrProtection;
  for (int tries = 0; tries < 64; ++tries) {
    RegEntry e;
    uint32_t seq = 0, slot = 0;
    uint64_t at = addr;
    if (uint64_t st = region_resolve(base, *f, addr, len, write, e, slot, &seq, false, &at)) return st;
    if (dst_cq) *dst_cq = e.dst_cq;
    if (e.seg_count == 0) {
      if (len > 0) out.push(at, len);
      return cqe::kOk;
    }
    bool ok = region_read_segments(base, e, at, len, out);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (region_reg_entry(base, slot)->seq.load(std::memory_order_relaxed) == seq)
      return ok ? cqe::kOk : cqe::kErrProtection;
    out.clear();
  }
  return cqe::kErrProtection;
}

}  // namespace nicemu::abi
