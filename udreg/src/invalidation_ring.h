// The queue of unmapped address ranges, from the invalidation sources (interposed memory
// calls, the userfaultfd monitor) to the caches. Producers may run inside malloc or free, so
// pushing takes no lock and allocates nothing: claim a slot with one fetch_add on `head`,
// write the range, publish the slot's sequence number. Each cache keeps its own cursor and
// applies the ranges at its next API call, where calling device_dereg_func is allowed; a
// cache that fell more than kCapacity records behind has lost some and drops every entry.
//
// Ordering contract. A source that sees an unmap before it happens (the hooks) pushes before
// calling the real function, so any later Register — even in another thread that mapped the
// same addresses — finds the record once it reads `head`. A source that learns of it only
// afterwards (userfaultfd: the unmapping thread stays blocked until the event is read)
// closes the gate before reading the event and opens it after pushing: callers that find
// the gate closed wait, so nothing returns between the read and the push.
//
//   head   : producers fetch_add (acq_rel), then a release fence before writing the slot;
//            consumers load with acquire.
//   seq    : producer stores index+1 with release after writing start/end; a consumer reads
//            seq (acquire), start, end, then re-checks head: a slot overwritten meanwhile
//            implies head moved more than kCapacity past its cursor.
//   gate   : counter; closed while > 0. Waiters spin briefly, then sleep on the futex word.
//   epoch  : bumped when every record must be considered lost (fork child).
#pragma once
#include <atomic>
#include <cstdint>

namespace nicemu::udreg {

class InvalidationRing {
 public:
  static constexpr uint64_t kCapacity = 4096;

  // Queues [start, end) (already page-aligned by the caller).
  void push(uint64_t start, uint64_t end);

  // True if a cache at `cursor`/`epoch` has something to apply or must wait for the gate.
  bool pending(uint64_t cursor, uint64_t epoch) const {
    return head_.load(std::memory_order_acquire) != cursor || gate_.load(std::memory_order_acquire) != 0 ||
           epoch_.load(std::memory_order_acquire) != epoch;
  }

  uint64_t head() const { return head_.load(std::memory_order_acquire); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  void bump_epoch() { epoch_.fetch_add(1, std::memory_order_acq_rel); }

  // Applies records [cursor, head) with fn(start, end), advancing cursor. Returns false if
  // records were lost (overwritten, or a producer never finished its slot): cursor is then
  // set to head and the caller must invalidate everything.
  template <typename Fn>
  bool consume(uint64_t& cursor, Fn&& fn) {
    for (;;) {
      uint64_t h = head_.load(std::memory_order_acquire);
      if (cursor == h) return true;
      if (h - cursor > kCapacity) {
        cursor = h;
        return false;
      }
      uint64_t start = 0, end = 0;
      if (!read_slot(cursor, &start, &end)) {
        cursor = head_.load(std::memory_order_acquire);
        return false;
      }
      ++cursor;
      fn(start, end);
    }
  }

  void gate_close() { gate_.fetch_add(1, std::memory_order_seq_cst); }
  void gate_open();
  void wait_gate_open() const;
  // After fork: the child has no userfaultfd monitor that could still open the gate.
  void reset_gate() { gate_.store(0, std::memory_order_release); }

 private:
  struct Slot {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> start{0};
    std::atomic<uint64_t> end{0};
  };

  bool read_slot(uint64_t index, uint64_t* start, uint64_t* end) const;

  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) mutable std::atomic<uint32_t> gate_{0};
  mutable std::atomic<uint32_t> gate_waiters_{0};
  std::atomic<uint64_t> epoch_{0};
  alignas(64) Slot slots_[kCapacity];
};

InvalidationRing& invalidation_ring();

// What the sources call: queue [start, end), widened to whole pages, if any cached entry may
// overlap it. Lock-free, allocation-free.
void report_unmapped(uint64_t start, uint64_t end);

}  // namespace nicemu::udreg
