// The interval index: registered ranges [start, end) in an AVL tree ordered by start (ties
// by entry address), each node carrying the largest end of its subtree. That augmentation
// answers both questions of the cache in O(log n): "is there an entry covering [a, b)?" (a
// hit) and "which entries overlap [a, b)?" (an invalidation, O(log n + k)). Nodes are the
// entries themselves (intrusive), so no operation allocates.
#pragma once
#include <cstddef>
#include <cstdint>

#include "entry.h"

namespace nicemu::udreg {

class IntervalIndex {
 public:
  void insert(Entry* e);
  void erase(Entry* e);

  // Any entry with start <= a and end >= b, or nullptr.
  Entry* find_covering(uint64_t a, uint64_t b) const;

  // Entries with start < b and end > a, chained through next_hit; returns the first.
  Entry* collect_overlapping(uint64_t a, uint64_t b) const;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Entry* root() const { return root_; }

  // Checks every invariant (order, balance, heights, max_end); for tests.
  bool verify() const;

 private:
  Entry* root_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nicemu::udreg
