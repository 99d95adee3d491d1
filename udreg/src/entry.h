// One cached registration: the public udreg_entry_t the client holds, plus the links of the
// interval index and the LRU list, the reference count and its state. Entries come from a
// per-cache pool (entry_pool.h) and are never returned to malloc while the cache lives, so a
// stale pointer from a client is recognised (magic) instead of being a use-after-free.
#pragma once
#include <cstdint>

#include "udreg_pub.h"

namespace nicemu::udreg {

class Cache;

inline constexpr uint32_t kEntryLive = 0x55524547;  // "UREG"
inline constexpr uint32_t kEntryFree = 0x46524545;  // "FREE"

struct Entry {
  udreg_entry_t pub{};  // first member: the client's pointer is a pointer to the Entry

  // Interval index (interval_index.h). Hot fields together, for the lookup.
  uint64_t start = 0;    // registered range [start, end)
  uint64_t end = 0;
  uint64_t max_end = 0;  // largest `end` in this subtree
  Entry* left = nullptr;
  Entry* right = nullptr;
  int32_t height = 0;

  uint32_t refs = 0;
  uint32_t magic = kEntryFree;
  bool indexed = false;    // in the interval index: hits may return it
  bool invalid = false;    // its memory went away: deregister at the last release
  bool watched = false;    // an invalidation source sees unmaps of its range
  bool in_lru = false;

  // LRU list of unreferenced cached entries (lru_list.h); also the pool's free list.
  Entry* lru_prev = nullptr;
  Entry* lru_next = nullptr;
  // Scratch link for collecting entries during an invalidation pass.
  Entry* next_hit = nullptr;
  Cache* cache = nullptr;
};

inline Entry* entry_of(udreg_entry_t* e) { return reinterpret_cast<Entry*>(e); }

}  // namespace nicemu::udreg
