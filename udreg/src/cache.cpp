#include "cache.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "address_filter.h"
#include "invalidation_ring.h"

namespace nicemu::udreg {

namespace {

constexpr uint32_t kKnownModes = UDREG_CC_MODE_USE_KERNEL_CACHE | UDREG_CC_MODE_USE_LAZY_DEREG |
                                 UDREG_CC_MODE_USE_EVICT_W_UNREG | UDREG_CC_MODE_USE_LARGE_PAGES;

}  // namespace

udreg_return_t Cache::validate_attr(const udreg_cache_attr_t* attr) {
  if (!attr) return UDREG_RC_INVALID_PARAM;
  size_t n = strnlen(attr->cache_name, UDREG_MAX_CACHENAME_LEN);
  if (n == 0 || n == UDREG_MAX_CACHENAME_LEN) return UDREG_RC_INVALID_PARAM;  // empty or unterminated
  if (attr->max_entries == 0) return UDREG_RC_INVALID_PARAM;
  if (attr->modes & ~kKnownModes) return UDREG_RC_INVALID_PARAM;
  if (!attr->device_reg_func || !attr->device_dereg_func) return UDREG_RC_INVALID_PARAM;
  return UDREG_RC_SUCCESS;
}

Cache::Cache(const udreg_cache_attr_t& attr, Watcher* watcher) : attr_(attr), watcher_(watcher) {
  // Records queued before the cache existed concern no entry of it.
  ring_epoch_ = invalidation_ring().epoch();
  ring_cursor_ = invalidation_ring().head();
}

Cache::~Cache() { magic_ = 0; }

void Cache::debug(const char* fmt, ...) const {
  if (!attr_.debug_mode) return;
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "udreg[%d] %s: %s\n", attr_.debug_rank, attr_.cache_name, line);
}

// Called first by every operation on the cache: what the invalidation sources reported since
// the last call is applied before any lookup, so a range unmapped before this call began is
// never returned as a hit.
void Cache::apply_invalidations_locked() {
  InvalidationRing& ring = invalidation_ring();
  if (!ring.pending(ring_cursor_, ring_epoch_)) return;
  ring.wait_gate_open();
  uint64_t epoch = ring.epoch();
  if (epoch != ring_epoch_) {
    ring_epoch_ = epoch;
    ring_cursor_ = ring.head();
    invalidate_all_locked();
    return;
  }
  bool complete = ring.consume(ring_cursor_, [this](uint64_t a, uint64_t b) { invalidate_range_locked(a, b); });
  if (!complete) invalidate_all_locked();
}

void Cache::unindex_locked(Entry* e) {
  if (!e->indexed) return;
  index_.erase(e);
  address_filter().remove(e->start, e->end);
  e->indexed = false;
}

void Cache::drop_locked(Entry* e) {
  lru_.remove(e);
  unindex_locked(e);
  void* dd = e->pub.device_data;
  if (dd) {  // the client may have taken it over and cleared it (§3)
    stats_.add(Stat::kDeviceDereg);
    uint32_t rc = attr_.device_dereg_func(dd, attr_.dreg_context);
    if (rc != 0) {
      stats_.add(Stat::kDeviceDeregFailed);
      debug("device_dereg_func(%p) for [%p, +%llu) returned %u", dd, e->pub.address,
            static_cast<unsigned long long>(e->pub.length), rc);
    }
  }
  pool_.free(e);
}

void Cache::invalidate_range_locked(uint64_t a, uint64_t b) {
  Entry* e = index_.collect_overlapping(a, b);
  while (e) {
    Entry* next = e->next_hit;
    e->next_hit = nullptr;
    unindex_locked(e);
    e->invalid = true;
    stats_.add(Stat::kInvalidated);
    debug("invalidated [%p, +%llu) (refs %u): memory [%#llx, %#llx) went away", e->pub.address,
          static_cast<unsigned long long>(e->pub.length), e->refs, static_cast<unsigned long long>(a),
          static_cast<unsigned long long>(b));
    if (e->refs == 0) drop_locked(e);  // otherwise deregistered when its last reference goes
    e = next;
  }
}

void Cache::invalidate_all_locked() {
  stats_.add(Stat::kInvalidateAll);
  debug("invalidation records lost: dropping every entry");
  pool_.for_each_live([this](Entry* e) {
    if (!e->indexed) return;
    unindex_locked(e);
    e->invalid = true;
    stats_.add(Stat::kInvalidated);
    if (e->refs == 0) drop_locked(e);
  });
}

// The LRU list is ordered by last release. A hit leaves its entry where it was (unlinking
// would touch two other entries' cache lines on the hottest path); such referenced entries
// are unlinked here when they reach the back, and relinked at the front by their release.
bool Cache::evict_one_locked() {
  while (Entry* e = lru_.back()) {
    if (e->refs != 0) {
      lru_.remove(e);
      continue;
    }
    stats_.add(Stat::kEvicted);
    drop_locked(e);
    return true;
  }
  return false;
}

udreg_return_t Cache::reg(void* addr, uint64_t length, udreg_entry_t** out) {
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (!out || a == 0 || length == 0 || length > UINT64_MAX - a) return UDREG_RC_INVALID_PARAM;
  uint64_t b = a + length;
  std::lock_guard<std::mutex> lock(mu_);
  apply_invalidations_locked();

  if (Entry* e = index_.find_covering(a, b)) {
    if (e->refs == UINT32_MAX) return UDREG_RC_NO_SPACE;
    ++e->refs;  // stays in the LRU list if it is there: see evict_one_locked
    stats_.add(Stat::kHit);
    *out = &e->pub;
    return UDREG_RC_SUCCESS;
  }

  stats_.add(Stat::kMiss);
  // The bound on entries holds by evicting the least recently used unreferenced one.
  if (pool_.live() >= attr_.max_entries && !evict_one_locked()) return UDREG_RC_NO_SPACE;

  // Counted in the address filter and watched before the device sees the range: an unmap
  // while the registration is being made (memory freed by another thread meanwhile) is
  // reported and queued, not filtered out or missed, and drops the new entry at the next
  // call. Watching after the device call could watch new memory mapped at the same
  // address while the registration describes the old.
  AddressFilter& filter = address_filter();
  filter.add(a, b);
  const bool watched = watcher_->watch(a, b);
  void* dd;
  for (;;) {
    dd = attr_.device_reg_func(addr, length, attr_.reg_context);
    if (dd == UDREG_DEVICE_REG_FAILED) {
      filter.remove(a, b);
      debug("device_reg_func failed for [%p, +%llu)", addr, static_cast<unsigned long long>(length));
      return UDREG_RC_INVALID_PARAM;
    }
    if (dd) break;
    // NULL: the device is out of registration resources; free one and retry.
    if (!evict_one_locked()) {
      filter.remove(a, b);
      return UDREG_RC_NO_SPACE;
    }
  }
  stats_.add(Stat::kDeviceReg);

  Entry* e = pool_.alloc();
  if (!e) {
    filter.remove(a, b);
    stats_.add(Stat::kDeviceDereg);
    attr_.device_dereg_func(dd, attr_.dreg_context);
    return UDREG_RC_NO_SPACE;
  }
  e->cache = this;
  e->pub.device_data = dd;
  e->pub.address = addr;
  e->pub.length = length;
  e->start = a;
  e->end = b;
  e->refs = 1;
  e->watched = watched;
  if (e->watched) e->indexed = index_.insert(e);  // false: no memory for the index, not cached
  if (!e->indexed) {
    filter.remove(a, b);
    stats_.add(Stat::kUnwatched);
  }
  *out = &e->pub;
  return UDREG_RC_SUCCESS;
}

udreg_return_t Cache::release(udreg_entry_t* entry, bool unregister) {
  if (!entry) return UDREG_RC_INVALID_PARAM;
  std::lock_guard<std::mutex> lock(mu_);
  apply_invalidations_locked();
  Entry* e = entry_of(entry);
  if (e->magic != kEntryLive || e->cache != this || e->refs == 0) return UDREG_RC_INVALID_PARAM;
  if (--e->refs != 0) return UDREG_RC_SUCCESS;
  if (e->indexed && unregister && evict_w_unreg()) {
    stats_.add(Stat::kEvicted);
    drop_locked(e);
  } else if (e->indexed && lazy()) {
    lru_.push_front(e);  // moves it if a hit left it in the list
  } else {
    drop_locked(e);  // not lazy, invalidated while in use, or never cacheable
  }
  return UDREG_RC_SUCCESS;
}

udreg_return_t Cache::evict() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t before = pool_.live();
  apply_invalidations_locked();
  if (evict_one_locked()) return UDREG_RC_SUCCESS;
  // Invalidations just applied released device resources too: the caller may retry.
  return pool_.live() < before ? UDREG_RC_SUCCESS : UDREG_RC_NO_MATCH;
}

udreg_return_t Cache::get_stat(udreg_stat_t stat, uint64_t* value) {
  if (!value || size_t(stat) > size_t(Stat::kEvicted)) return UDREG_RC_INVALID_PARAM;
  std::lock_guard<std::mutex> lock(mu_);
  *value = stats_.get(Stat(stat));
  return UDREG_RC_SUCCESS;
}

udreg_return_t Cache::reset_stat(udreg_stat_t stat) {
  if (size_t(stat) > size_t(Stat::kEvicted)) return UDREG_RC_INVALID_PARAM;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.reset(Stat(stat));
  return UDREG_RC_SUCCESS;
}

void Cache::destroy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    apply_invalidations_locked();
    pool_.for_each_live([this](Entry* e) { drop_locked(e); });
    if (attr_.debug_mode) {
      char line[512];
      size_t off = 0;
      for (size_t i = 0; i < size_t(Stat::kCount) && off < sizeof line; ++i)
        off += size_t(snprintf(line + off, sizeof line - off, "%s%s=%llu", i ? " " : "", kStatNames[i],
                               static_cast<unsigned long long>(stats_.get(Stat(i)))));
      debug("destroyed: %s", line);
    }
  }
  if (attr_.destructor_callback) attr_.destructor_callback(attr_.destructor_context);
}

size_t Cache::live_entries() {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_.live();
}

size_t Cache::cached_unreferenced() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  pool_.for_each_live([&](Entry* e) { n += e->in_lru && e->refs == 0; });
  return n;
}

size_t Cache::indexed_entries() {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

uint64_t Cache::stat(Stat s) {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.get(s);
}

bool Cache::verify() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!index_.verify()) return false;
  size_t indexed = 0, in_lru = 0;
  bool ok = true;
  pool_.for_each_live([&](Entry* e) {
    indexed += e->indexed;
    in_lru += e->in_lru;
    if (e->in_lru && !e->indexed) ok = false;    // the LRU holds cached entries ...
    if (e->refs == 0 && !e->in_lru) ok = false;  // ... every unreferenced one among them
    if (e->invalid && e->indexed) ok = false;
  });
  return ok && indexed == index_.size() && in_lru == lru_.size();
}

}  // namespace nicemu::udreg
