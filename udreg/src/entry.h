// One cached registration: the public udreg_entry_t the client holds, plus the links of the
// interval index and the LRU list, the reference count and its state. 64-byte aligned, with
// everything a hit touches in the first cache line. Entries come from a
// per-cache pool (entry_pool.h) and are never returned to malloc while the cache lives, so a
// stale pointer from a client is recognised (magic) instead of being a use-after-free.
#pragma once
#include <cstddef>
#include <cstdint>

#include "udreg_pub.h"

namespace nicemu::udreg {

class Cache;

inline constexpr uint32_t kEntryLive = 0x55524547;  // "UREG"
inline constexpr uint32_t kEntryFree = 0x46524545;  // "FREE"

struct alignas(64) Entry {
  // Hot on a hit: range, reference count, state.
  uint64_t start = 0;  // registered range [start, end)
  uint64_t end = 0;
  void* leaf = nullptr;  // the interval index's leaf holding this entry
  uint32_t refs = 0;
  uint32_t magic = kEntryFree;
  bool indexed = false;  // in the interval index: hits may return it
  bool invalid = false;  // its memory went away: deregister at the last release
  bool watched = false;  // an invalidation source sees unmaps of its range
  bool in_lru = false;

  udreg_entry_t pub{};  // what the client holds (entry_of maps it back)

  Cache* cache = nullptr;

  // LRU list of unreferenced cached entries (lru_list.h); also the pool's free list.
  Entry* lru_prev = nullptr;
  Entry* lru_next = nullptr;
  // Scratch link for collecting entries during an invalidation pass.
  Entry* next_hit = nullptr;
};

static_assert(offsetof(Entry, pub) + sizeof(udreg_entry_t) <= 64, "what a hit touches shares one cache line");

inline Entry* entry_of(udreg_entry_t* e) {
  return reinterpret_cast<Entry*>(reinterpret_cast<char*>(e) - offsetof(Entry, pub));
}

}  // namespace nicemu::udreg
