#include "interval_index.h"

#include <algorithm>
#include <cstdint>

namespace nicemu::udreg {

namespace {

int32_t height(const Entry* n) { return n ? n->height : 0; }

void update(Entry* n) {
  n->height = 1 + std::max(height(n->left), height(n->right));
  uint64_t m = n->end;
  if (n->left && n->left->max_end > m) m = n->left->max_end;
  if (n->right && n->right->max_end > m) m = n->right->max_end;
  n->max_end = m;
}

// Strict order of the tree: by start, then by entry address (ranges may repeat).
bool before(const Entry* a, const Entry* b) {
  if (a->start != b->start) return a->start < b->start;
  return reinterpret_cast<uintptr_t>(a) < reinterpret_cast<uintptr_t>(b);
}

Entry* rotate_right(Entry* n) {
  Entry* l = n->left;
  n->left = l->right;
  l->right = n;
  update(n);
  update(l);
  return l;
}

Entry* rotate_left(Entry* n) {
  Entry* r = n->right;
  n->right = r->left;
  r->left = n;
  update(n);
  update(r);
  return r;
}

Entry* rebalance(Entry* n) {
  update(n);
  int32_t bal = height(n->left) - height(n->right);
  if (bal > 1) {
    if (height(n->left->left) < height(n->left->right)) n->left = rotate_left(n->left);
    return rotate_right(n);
  }
  if (bal < -1) {
    if (height(n->right->right) < height(n->right->left)) n->right = rotate_right(n->right);
    return rotate_left(n);
  }
  return n;
}

Entry* insert_at(Entry* n, Entry* e) {
  if (!n) return e;
  if (before(e, n))
    n->left = insert_at(n->left, e);
  else
    n->right = insert_at(n->right, e);
  return rebalance(n);
}

// Detaches the leftmost node of subtree n into *min; returns the new subtree root.
Entry* take_min(Entry* n, Entry** min) {
  if (!n->left) {
    *min = n;
    return n->right;
  }
  n->left = take_min(n->left, min);
  return rebalance(n);
}

Entry* erase_at(Entry* n, Entry* e, bool* found) {
  if (!n) return nullptr;
  if (n == e) {
    *found = true;
    Entry* l = n->left;
    Entry* r = n->right;
    n->left = n->right = nullptr;
    if (!r) return l;
    if (!l) return r;
    Entry* m = nullptr;
    r = take_min(r, &m);
    m->left = l;
    m->right = r;
    return rebalance(m);
  }
  if (before(e, n))
    n->left = erase_at(n->left, e, found);
  else
    n->right = erase_at(n->right, e, found);
  return rebalance(n);
}

// Any node of subtree n with end >= b; the caller knows one exists (n->max_end >= b).
Entry* any_reaching(Entry* n, uint64_t b) {
  while (n) {
    if (n->end >= b) return n;
    if (n->left && n->left->max_end >= b)
      n = n->left;
    else
      n = n->right;
  }
  return nullptr;
}

void collect(Entry* n, uint64_t a, uint64_t b, Entry** head) {
  while (n && n->max_end > a) {
    collect(n->left, a, b, head);
    if (n->start >= b) return;  // this node and its right subtree start at or after b
    if (n->end > a) {
      n->next_hit = *head;
      *head = n;
    }
    n = n->right;
  }
}

bool verify_at(const Entry* n, const Entry* lo, const Entry* hi, size_t* count) {
  if (!n) return true;
  if ((lo && !before(lo, n)) || (hi && !before(n, hi))) return false;
  if (n->start >= n->end) return false;
  int32_t hl = height(n->left), hr = height(n->right);
  if (n->height != 1 + std::max(hl, hr) || hl - hr > 1 || hr - hl > 1) return false;
  uint64_t m = n->end;
  if (n->left) m = std::max(m, n->left->max_end);
  if (n->right) m = std::max(m, n->right->max_end);
  if (n->max_end != m) return false;
  ++*count;
  return verify_at(n->left, lo, n, count) && verify_at(n->right, n, hi, count);
}

}  // namespace

void IntervalIndex::insert(Entry* e) {
  e->left = e->right = nullptr;
  e->height = 1;
  e->max_end = e->end;
  root_ = insert_at(root_, e);
  ++size_;
}

void IntervalIndex::erase(Entry* e) {
  bool found = false;
  root_ = erase_at(root_, e, &found);
  if (found) --size_;
}

Entry* IntervalIndex::find_covering(uint64_t a, uint64_t b) const {
  Entry* n = root_;
  while (n && n->max_end >= b) {
    if (n->start <= a) {
      if (n->end >= b) return n;
      // Every node on the left starts at or before n, so before a: any that reaches b covers.
      if (n->left && n->left->max_end >= b) return any_reaching(n->left, b);
      n = n->right;
    } else {
      n = n->left;
    }
  }
  return nullptr;
}

Entry* IntervalIndex::collect_overlapping(uint64_t a, uint64_t b) const {
  Entry* head = nullptr;
  collect(root_, a, b, &head);
  return head;
}

bool IntervalIndex::verify() const {
  size_t count = 0;
  return verify_at(root_, nullptr, nullptr, &count) && count == size_;
}

}  // namespace nicemu::udreg
