// A counting filter over 2 MiB address regions: which parts of the address space hold cached
// entries of any cache of the process. The invalidation sources ask it before queueing an
// unmapped range, so munmaps and frees far from every registration cost two loads, and the
// hooks cost one when nothing is cached at all. Counters are hashed (false positives only
// queue a range no entry overlaps), updated by caches under their own lock, read lock-free
// from hooks that may run inside malloc.
#pragma once
#include <atomic>
#include <cstdint>

namespace nicemu::udreg {

class AddressFilter {
 public:
  static constexpr unsigned kRegionShift = 21;
  static constexpr uint64_t kSlots = 1u << 16;
  static constexpr uint64_t kMaxRegionsScanned = 1024;  // wider ranges are assumed to overlap

  void add(uint64_t start, uint64_t end) { update(start, end, +1); }
  void remove(uint64_t start, uint64_t end) { update(start, end, -1); }

  bool empty() const { return entries_.load(std::memory_order_acquire) == 0; }

  bool may_overlap(uint64_t start, uint64_t end) const {
    if (end <= start || empty()) return false;
    if (wide_.load(std::memory_order_acquire) != 0) return true;
    uint64_t first = start >> kRegionShift, last = (end - 1) >> kRegionShift;
    if (last - first >= kMaxRegionsScanned) return true;
    for (uint64_t r = first; r <= last; ++r)
      if (slots_[slot(r)].load(std::memory_order_acquire) != 0) return true;
    return false;
  }

 private:
  static uint64_t slot(uint64_t region) { return (region * 0x9E3779B97F4A7C15ull) >> (64 - 16); }

  void update(uint64_t start, uint64_t end, int delta) {
    if (end <= start) return;
    uint64_t first = start >> kRegionShift, last = (end - 1) >> kRegionShift;
    // An entry wider than the table is counted once, as "matches everything".
    if (last - first >= kSlots) {
      wide_.fetch_add(uint32_t(delta), std::memory_order_acq_rel);
    } else {
      for (uint64_t r = first; r <= last; ++r) slots_[slot(r)].fetch_add(uint32_t(delta), std::memory_order_acq_rel);
    }
    entries_.fetch_add(int64_t(delta), std::memory_order_acq_rel);
  }

  std::atomic<int64_t> entries_{0};
  std::atomic<uint32_t> wide_{0};
  std::atomic<uint32_t> slots_[kSlots]{};
};

// The process-wide filter (zero-initialised static storage: usable before constructors run).
AddressFilter& address_filter();

}  // namespace nicemu::udreg
