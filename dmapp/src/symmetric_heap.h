// The symmetric heap's allocator: a deterministic first-fit allocator over one fixed range.
// Every PE makes the same sequence of calls, so every PE gets the same offsets, and with the
// range mapped at the same address on every PE (symmetric_heap.cpp), the same addresses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>

namespace nicemu::dmapp {

class SymmetricHeap {
 public:
  static constexpr uint64_t kAlign = 64;  // cache line: AMO words and DQW elements fit

  void reset(uint64_t base, uint64_t size);
  // 0 when no free block is large enough.
  uint64_t allocate(uint64_t size);
  // The block's size, 0 if `addr` is not the start of a live block.
  uint64_t block_size(uint64_t addr) const;
  bool release(uint64_t addr);
  // Grows or shrinks in place when the following free space allows; else 0 (caller moves).
  bool resize_in_place(uint64_t addr, uint64_t size);

  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t used() const { return used_; }
  uint64_t largest_free() const;
  uint64_t allocations() const { return live_.size(); }

 private:
  static uint64_t round(uint64_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }
  uint64_t base_ = 0, size_ = 0, used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // address -> length, coalesced
  std::map<uint64_t, uint64_t> live_;  // address -> length
};

// Maps `size` bytes at the same address on every PE (collective over PMI). Returns the
// address, or nullptr with errno-style detail on stderr.
void* map_symmetric_range(uint64_t size);
void unmap_symmetric_range(void* base, uint64_t size);
// XT_SYMMETRIC_HEAP_SIZE with an optional K/M/G suffix; the default when unset; 0 if malformed.
uint64_t symmetric_heap_size_from_env();

}  // namespace nicemu::dmapp
