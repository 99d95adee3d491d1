// Least-recently-used order of cached entries, by the time their last reference went (lazy
// deregistration): an entry joins at the front when released, leaves when evicted or
// invalidated. A hit does not unlink it (see Cache::evict_one_locked). Eviction takes the
// back. Intrusive, O(1), no allocation.
#pragma once
#include <cstddef>

#include "entry.h"

namespace nicemu::udreg {

class LruList {
 public:
  // Also moves an entry already in the list to the front.
  void push_front(Entry* e) {
    if (e->in_lru) remove(e);
    e->lru_prev = nullptr;
    e->lru_next = head_;
    if (head_)
      head_->lru_prev = e;
    else
      tail_ = e;
    head_ = e;
    e->in_lru = true;
    ++size_;
  }

  void remove(Entry* e) {
    if (!e->in_lru) return;
    if (e->lru_prev)
      e->lru_prev->lru_next = e->lru_next;
    else
      head_ = e->lru_next;
    if (e->lru_next)
      e->lru_next->lru_prev = e->lru_prev;
    else
      tail_ = e->lru_prev;
    e->lru_prev = e->lru_next = nullptr;
    e->in_lru = false;
    --size_;
  }

  Entry* back() const { return tail_; }
  Entry* front() const { return head_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  Entry* head_ = nullptr;
  Entry* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nicemu::udreg
