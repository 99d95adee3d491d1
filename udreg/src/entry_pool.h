// Storage of a cache's entries: slabs of entries allocated as the cache grows and kept until
// the cache is destroyed, with a free list. Its size is bounded by the cache's max_entries
// (plus invalidated entries still referenced), entries sit close together for the lookup,
// and a pointer a client kept after its entry was freed still points at an Entry (whose magic
// says it is free) rather than at reused heap memory.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "entry.h"

namespace nicemu::udreg {

class EntryPool {
 public:
  static constexpr size_t kSlab = 256;

  // A fresh entry with magic kEntryLive, or nullptr if memory is exhausted.
  Entry* alloc();
  void free(Entry* e);

  // Calls fn(e) for every live entry (allocated, not freed).
  template <typename Fn>
  void for_each_live(Fn fn) {
    for (auto& s : slabs_)
      for (size_t i = 0; i < kSlab; ++i)
        if (s[i].magic == kEntryLive) fn(&s[i]);
  }

  size_t live() const { return live_; }
  size_t capacity() const { return slabs_.size() * kSlab; }

 private:
  std::vector<std::unique_ptr<Entry[]>> slabs_;
  Entry* free_ = nullptr;  // chained through lru_next
  size_t live_ = 0;
};

}  // namespace nicemu::udreg
