#include "entry_pool.h"

#include <new>

namespace nicemu::udreg {

Entry* EntryPool::alloc() {
  if (!free_) {
    std::unique_ptr<Entry[]> slab(new (std::nothrow) Entry[kSlab]);
    if (!slab) return nullptr;
    try {
      slabs_.push_back(std::move(slab));
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    Entry* s = slabs_.back().get();
    for (size_t i = kSlab; i-- > 0;) {
      s[i].lru_next = free_;
      free_ = &s[i];
    }
  }
  Entry* e = free_;
  free_ = e->lru_next;
  Cache* owner = e->cache;
  *e = Entry{};
  e->cache = owner;
  e->magic = kEntryLive;
  ++live_;
  return e;
}

void EntryPool::free(Entry* e) {
  Cache* owner = e->cache;
  *e = Entry{};
  e->cache = owner;
  e->magic = kEntryFree;
  e->lru_next = free_;
  free_ = e;
  --live_;
}

}  // namespace nicemu::udreg
