#include "cache_registry.h"

#include <cstring>
#include <new>

namespace nicemu::udreg {

CacheRegistry& CacheRegistry::instance() {
  static CacheRegistry* r = new CacheRegistry;  // never destroyed, like the caches it holds
  return *r;
}

CacheRegistry::Slot* CacheRegistry::find_locked(const char* name) {
  for (auto& s : caches_)
    if (strncmp(s.cache->name(), name, UDREG_MAX_CACHENAME_LEN) == 0) return &s;
  return nullptr;
}

CacheRegistry::Slot* CacheRegistry::find_locked(udreg_cache_handle_t h) {
  for (auto& s : caches_)
    if (s.cache->handle() == h) return &s;
  return nullptr;
}

udreg_return_t CacheRegistry::create(const udreg_cache_attr_t* attr, Watcher* watcher) {
  if (udreg_return_t rc = Cache::validate_attr(attr); rc != UDREG_RC_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(mu_);
  // One cache per name: the create-or-access idiom of clients relies on this failing (§2).
  if (find_locked(attr->cache_name)) return UDREG_RC_INVALID_PARAM;
  Cache* c = new (std::nothrow) Cache(*attr, watcher);
  if (!c) return UDREG_RC_NO_SPACE;
  try {
    caches_.push_back(Slot{c, 0});
  } catch (const std::bad_alloc&) {
    delete c;
    return UDREG_RC_NO_SPACE;
  }
  return UDREG_RC_SUCCESS;
}

udreg_return_t CacheRegistry::access(const char* name, udreg_cache_handle_t* out) {
  if (!name || !out || name[0] == '\0' || strnlen(name, UDREG_MAX_CACHENAME_LEN) == UDREG_MAX_CACHENAME_LEN)
    return UDREG_RC_INVALID_PARAM;
  std::lock_guard<std::mutex> lock(mu_);
  Slot* s = find_locked(name);
  if (!s) return UDREG_RC_NO_MATCH;
  ++s->accesses;
  *out = s->cache->handle();
  return UDREG_RC_SUCCESS;
}

udreg_return_t CacheRegistry::release(udreg_cache_handle_t h) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot* s = find_locked(h);
  if (!s || s->accesses == 0) return UDREG_RC_INVALID_PARAM;
  // The cache stays until UDREG_CacheDestroy: libfabric destroys through the handle it has
  // just released, Open MPI never destroys.
  --s->accesses;
  return UDREG_RC_SUCCESS;
}

udreg_return_t CacheRegistry::destroy(udreg_cache_handle_t h) {
  Cache* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot* s = find_locked(h);
    if (!s) return UDREG_RC_INVALID_PARAM;
    c = s->cache;
    caches_.erase(caches_.begin() + (s - caches_.data()));
  }
  c->destroy();
  delete c;
  return UDREG_RC_SUCCESS;
}

}  // namespace nicemu::udreg
