// First-fit allocator for the read-write heap of a CDM region (CQ rings, SMSG mailboxes).
// Offsets only: the memory itself is the memfd mapping. Runs in the daemon, which is the
// only party that allocates, so it needs no locking.
#pragma once
#include <cstdint>
#include <map>
#include <optional>

namespace nicemu::daemon {

class HeapAllocator {
 public:
  HeapAllocator(uint64_t begin, uint64_t end) { free_[begin] = end - begin; }

  std::optional<uint64_t> allocate(uint64_t bytes, uint64_t align = 64) {
    bytes = (bytes + 63) & ~uint64_t{63};
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      uint64_t start = (it->first + align - 1) & ~(align - 1);
      uint64_t end = it->first + it->second;
      if (start + bytes > end) continue;
      uint64_t block = it->first;
      free_.erase(it);
      if (start > block) free_[block] = start - block;
      if (start + bytes < end) free_[start + bytes] = end - (start + bytes);
      used_[start] = bytes;
      in_use_ += bytes;
      return start;
    }
    return std::nullopt;
  }

  // Returns the size released (0 if `offset` was not allocated).
  uint64_t release(uint64_t offset) {
    auto u = used_.find(offset);
    if (u == used_.end()) return 0;
    uint64_t bytes = u->second;
    used_.erase(u);
    in_use_ -= bytes;
    auto [it, ok] = free_.emplace(offset, bytes);
    (void)ok;
    if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
    return bytes;
  }

  uint64_t in_use() const { return in_use_; }

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> size
  std::map<uint64_t, uint64_t> used_;
  uint64_t in_use_ = 0;
};

}  // namespace nicemu::daemon
