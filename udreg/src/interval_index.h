// The interval index: registered ranges [start, end) in a B+tree ordered by start, every
// child slot carrying the smallest start and the largest end below it. That augmentation
// answers both questions of the cache in O(log n): "is there an entry covering [a, b)?" (a
// hit: at most one child per level is explored without a guaranteed answer) and "which
// entries overlap [a, b)?" (an invalidation, O(log n + k)). Wide nodes keep the hot part of
// the tree in a few cache lines: 10 000 entries take three levels of about 7 lines each,
// against 14 pointer hops in a binary tree. Nodes are allocated only by insert and freed by
// erase (a leaf that empties is removed; nodes are not merged, so memory stays proportional
// to the peak number of entries).
#pragma once
#include <cstddef>
#include <cstdint>

#include "entry.h"

namespace nicemu::udreg {

class IntervalIndex {
 public:
  static constexpr int kFanout = 16;

  IntervalIndex() = default;
  IntervalIndex(const IntervalIndex&) = delete;
  IntervalIndex& operator=(const IntervalIndex&) = delete;
  ~IntervalIndex();

  // Returns false (and leaves the index unchanged) if a node could not be allocated.
  bool insert(Entry* e);
  void erase(Entry* e);

  // Any entry with start <= a and end >= b, or nullptr. Among several, one with the
  // largest start at or before a is preferred.
  Entry* find_covering(uint64_t a, uint64_t b) const;

  // Entries with start < b and end > a, chained through next_hit; returns the first.
  Entry* collect_overlapping(uint64_t a, uint64_t b) const;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int depth() const;

  // Checks every invariant (order, child summaries, parents, back pointers); for tests.
  bool verify() const;

  struct Node;

 private:
  void refresh_up(Node* n);
  bool split(Node* n);
  void remove_child(Node* parent, Node* child);

  Node* root_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nicemu::udreg
