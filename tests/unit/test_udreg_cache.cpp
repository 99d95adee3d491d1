// uDREG cache without a device or invalidation sources: hits and misses, reference counts,
// lazy and immediate deregistration, EVICT_W_UNREG, LRU eviction under max_entries, device
// callbacks called once per real registration, device_data owned by the client, and
// invalidation fed through the ring (in use and unused entries, lost records, fork epoch,
// unwatched ranges); concurrent Register/Release from several threads (run under TSan too).
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "address_filter.h"
#include "cache.h"
#include "invalidation_ring.h"

using namespace nicemu::udreg;

namespace {

// A fake device: each registration gets a handle never used before; records what was
// (de)registered.
struct Device {
  std::mutex mu;
  std::map<void*, std::pair<uint64_t, uint64_t>> live;  // handle -> range
  uint64_t regs = 0, deregs = 0;
  uint64_t next_handle = 0x1000;
  int fail_next_with_null = 0;   // NULL: out of resources
  bool fail_hard = false;        // UDREG_DEVICE_REG_FAILED
  size_t capacity = SIZE_MAX;    // refuse (NULL) beyond this many live registrations

  static void* reg(void* addr, uint64_t len, void* ctx) {
    auto* d = static_cast<Device*>(ctx);
    std::lock_guard<std::mutex> l(d->mu);
    if (d->fail_hard) return UDREG_DEVICE_REG_FAILED;
    if (d->fail_next_with_null > 0) {
      --d->fail_next_with_null;
      return nullptr;
    }
    if (d->live.size() >= d->capacity) return nullptr;
    void* h = reinterpret_cast<void*>(d->next_handle += 16);
    d->live[h] = {uint64_t(addr), len};
    ++d->regs;
    return h;
  }
  static uint32_t dereg(void* h, void* ctx) {
    auto* d = static_cast<Device*>(ctx);
    std::lock_guard<std::mutex> l(d->mu);
    auto it = d->live.find(h);
    if (it == d->live.end()) return 1;  // double or unknown deregistration
    d->live.erase(it);
    ++d->deregs;
    return 0;
  }
};

struct FixedWatcher : Watcher {
  bool answer = true;
  bool watch(uint64_t, uint64_t) override { return answer; }
};

udreg_cache_attr_t attr_for(Device* d, uint32_t modes, uint32_t max_entries = 64) {
  udreg_cache_attr_t a{};
  strcpy(a.cache_name, "unit");
  a.max_entries = max_entries;
  a.modes = modes;
  a.reg_context = d;
  a.dreg_context = d;
  a.device_reg_func = Device::reg;
  a.device_dereg_func = Device::dereg;
  return a;
}

// Distinct fake addresses, never dereferenced; far from real mappings of this process is not
// needed since the cache never touches the memory.
void* at(uint64_t page, uint64_t off = 0) { return reinterpret_cast<void*>(0x7e0000000000ull + page * 4096 + off); }

constexpr uint32_t kLazy = UDREG_CC_MODE_USE_LAZY_DEREG;

}  // namespace

TEST_CASE("cache: attribute validation") {
  Device d;
  udreg_cache_attr_t a = attr_for(&d, kLazy);
  CHECK(Cache::validate_attr(&a) == UDREG_RC_SUCCESS);
  CHECK(Cache::validate_attr(nullptr) == UDREG_RC_INVALID_PARAM);
  auto bad = a;
  bad.cache_name[0] = '\0';
  CHECK(Cache::validate_attr(&bad) == UDREG_RC_INVALID_PARAM);
  bad = a;
  memset(bad.cache_name, 'x', sizeof bad.cache_name);  // not terminated
  CHECK(Cache::validate_attr(&bad) == UDREG_RC_INVALID_PARAM);
  bad = a;
  bad.max_entries = 0;
  CHECK(Cache::validate_attr(&bad) == UDREG_RC_INVALID_PARAM);
  bad = a;
  bad.modes |= 0x100;
  CHECK(Cache::validate_attr(&bad) == UDREG_RC_INVALID_PARAM);
  bad = a;
  bad.device_dereg_func = nullptr;
  CHECK(Cache::validate_attr(&bad) == UDREG_RC_INVALID_PARAM);
  bad = a;
  bad.modes = UDREG_CC_MODE_USE_KERNEL_CACHE | UDREG_CC_MODE_USE_LAZY_DEREG | UDREG_CC_MODE_USE_EVICT_W_UNREG |
              UDREG_CC_MODE_USE_LARGE_PAGES;
  CHECK(Cache::validate_attr(&bad) == UDREG_RC_SUCCESS);
}

TEST_CASE("cache: hits share one registration, lazy deregistration keeps it, refcounts balance") {
  Device d;
  FixedWatcher w;
  auto a = attr_for(&d, kLazy);
  Cache c(a, &w);
  udreg_entry_t *e1 = nullptr, *e2 = nullptr, *e3 = nullptr;

  REQUIRE(c.reg(at(0), 8192, &e1) == UDREG_RC_SUCCESS);
  CHECK(d.regs == 1);
  CHECK(e1->address == at(0));
  CHECK(e1->length == 8192);
  CHECK(d.live.count(e1->device_data) == 1);

  // Covered sub-range and exact range: hits, no new registration.
  REQUIRE(c.reg(at(1, 100), 50, &e2) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(0), 8192, &e3) == UDREG_RC_SUCCESS);
  CHECK(e2 == e1);
  CHECK(e3 == e1);
  CHECK(d.regs == 1);
  CHECK(c.stat(Stat::kHit) == 2);
  CHECK(c.stat(Stat::kMiss) == 1);

  // Reaching one byte past the entry is a miss: a second registration.
  udreg_entry_t* e4 = nullptr;
  REQUIRE(c.reg(at(1), 4097, &e4) == UDREG_RC_SUCCESS);
  CHECK(e4 != e1);
  CHECK(d.regs == 2);

  for (auto* e : {e1, e2, e3, e4}) CHECK(c.release(e, false) == UDREG_RC_SUCCESS);
  // Lazy: both stay registered, unreferenced, in the LRU.
  CHECK(d.deregs == 0);
  CHECK(c.cached_unreferenced() == 2);
  CHECK(c.verify());
  // One release too many is refused and changes nothing.
  CHECK(c.release(e1, false) == UDREG_RC_INVALID_PARAM);
  CHECK(c.cached_unreferenced() == 2);

  // A hit on an unreferenced entry takes it out of the LRU.
  udreg_entry_t* again = nullptr;
  REQUIRE(c.reg(at(0, 1), 10, &again) == UDREG_RC_SUCCESS);
  CHECK(again == e1);
  CHECK(c.cached_unreferenced() == 1);
  CHECK(c.verify());
  CHECK(c.release(again, false) == UDREG_RC_SUCCESS);

  c.destroy();
  CHECK(d.deregs == 2);
  CHECK(d.live.empty());
}

TEST_CASE("cache: without lazy deregistration the last reference deregisters") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, 0), &w);
  udreg_entry_t *e1 = nullptr, *e2 = nullptr;
  REQUIRE(c.reg(at(10), 4096, &e1) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(10), 4096, &e2) == UDREG_RC_SUCCESS);  // concurrent holders still share
  CHECK(e1 == e2);
  CHECK(c.release(e1, false) == UDREG_RC_SUCCESS);
  CHECK(d.deregs == 0);
  CHECK(c.release(e2, true) == UDREG_RC_SUCCESS);
  CHECK(d.deregs == 1);
  CHECK(c.live_entries() == 0);
  // The entry is gone: its pointer is recognised, not used.
  CHECK(c.release(e1, false) == UDREG_RC_INVALID_PARAM);
  REQUIRE(c.reg(at(10), 4096, &e1) == UDREG_RC_SUCCESS);
  CHECK(d.regs == 2);
  CHECK(c.release(e1, false) == UDREG_RC_SUCCESS);
  c.destroy();
}

TEST_CASE("cache: EVICT_W_UNREG evicts on Unregister, DecrRefcount keeps the entry") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, kLazy | UDREG_CC_MODE_USE_EVICT_W_UNREG), &w);
  udreg_entry_t *e1 = nullptr, *e2 = nullptr;
  REQUIRE(c.reg(at(20), 4096, &e1) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(30), 4096, &e2) == UDREG_RC_SUCCESS);
  CHECK(c.release(e1, false) == UDREG_RC_SUCCESS);  // DecrRefcount
  CHECK(c.release(e2, true) == UDREG_RC_SUCCESS);   // Unregister
  CHECK(d.deregs == 1);
  CHECK(d.live.count(e1->device_data) == 1);
  CHECK(c.cached_unreferenced() == 1);
  CHECK(c.stat(Stat::kEvicted) == 1);
  c.destroy();
}

TEST_CASE("cache: max_entries bounds the entries; LRU eviction keeps counts consistent") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, kLazy, 4), &w);
  std::vector<udreg_entry_t*> held;
  for (uint64_t i = 0; i < 4; ++i) {
    udreg_entry_t* e = nullptr;
    REQUIRE(c.reg(at(100 + i * 2), 4096, &e) == UDREG_RC_SUCCESS);
    held.push_back(e);
  }
  // Full and everything referenced: nothing can be evicted.
  udreg_entry_t* e = nullptr;
  CHECK(c.reg(at(200), 4096, &e) == UDREG_RC_NO_SPACE);
  CHECK(c.evict() == UDREG_RC_NO_MATCH);
  CHECK(d.regs == 4);

  // Release in order 2, 0, 3: LRU order is 2 (oldest), 0, 3.
  for (int i : {2, 0, 3}) CHECK(c.release(held[size_t(i)], false) == UDREG_RC_SUCCESS);
  void* dd2 = held[2]->device_data;
  REQUIRE(c.reg(at(200), 4096, &e) == UDREG_RC_SUCCESS);  // evicts entry 2 automatically
  CHECK(d.live.count(dd2) == 0);
  CHECK(c.live_entries() == 4);
  CHECK(c.stat(Stat::kEvicted) == 1);
  CHECK(c.release(e, false) == UDREG_RC_SUCCESS);

  // Explicit eviction takes the oldest unreferenced one (entry 0).
  void* dd0 = held[0]->device_data;
  CHECK(c.evict() == UDREG_RC_SUCCESS);
  CHECK(d.live.count(dd0) == 0);
  CHECK(c.stat(Stat::kEvicted) == 2);
  CHECK(c.verify());

  // hits + misses == registers; device registrations == misses that succeeded.
  uint64_t hits = c.stat(Stat::kHit), misses = c.stat(Stat::kMiss);
  CHECK(hits == 0);
  CHECK(misses == 6);  // 4 + the refused one + at(200)
  CHECK(d.regs == 5);
  CHECK(d.regs - d.deregs == c.live_entries());
  c.destroy();
  CHECK(d.live.empty());
}

TEST_CASE("cache: device out of resources (NULL) evicts and retries; hard failure is INVALID_PARAM") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, kLazy, 100), &w);
  udreg_entry_t* e = nullptr;
  REQUIRE(c.reg(at(300), 4096, &e) == UDREG_RC_SUCCESS);
  CHECK(c.release(e, false) == UDREG_RC_SUCCESS);

  d.capacity = 1;  // the device holds one registration: the cached one must go
  udreg_entry_t* f = nullptr;
  REQUIRE(c.reg(at(310), 4096, &f) == UDREG_RC_SUCCESS);
  CHECK(d.live.size() == 1);
  CHECK(c.stat(Stat::kEvicted) == 1);

  // Still out of resources and nothing evictable: NO_SPACE, nothing leaked.
  udreg_entry_t* g = nullptr;
  CHECK(c.reg(at(320), 4096, &g) == UDREG_RC_NO_SPACE);
  CHECK(c.live_entries() == 1);

  d.capacity = SIZE_MAX;
  d.fail_hard = true;
  CHECK(c.reg(at(330), 4096, &g) == UDREG_RC_INVALID_PARAM);
  d.fail_hard = false;
  CHECK(c.live_entries() == 1);
  CHECK(d.regs == 2);

  CHECK(c.reg(nullptr, 4096, &g) == UDREG_RC_INVALID_PARAM);
  CHECK(c.reg(at(340), 0, &g) == UDREG_RC_INVALID_PARAM);
  CHECK(c.reg(reinterpret_cast<void*>(UINT64_MAX - 10), 100, &g) == UDREG_RC_INVALID_PARAM);
  CHECK(c.reg(at(340), 10, nullptr) == UDREG_RC_INVALID_PARAM);
  CHECK(c.release(f, false) == UDREG_RC_SUCCESS);
  c.destroy();
}

TEST_CASE("cache: device_data belongs to the client") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, kLazy), &w);
  udreg_entry_t* e = nullptr;
  REQUIRE(c.reg(at(400), 4096, &e) == UDREG_RC_SUCCESS);
  // The client deregisters the object itself and registers a new one (what Open MPI does
  // when the access rights are insufficient): the library deregisters the current one.
  void* old = e->device_data;
  CHECK(Device::dereg(old, &d) == 0);
  e->device_data = Device::reg(e->address, e->length, &d);
  CHECK(c.release(e, false) == UDREG_RC_SUCCESS);
  CHECK(c.evict() == UDREG_RC_SUCCESS);
  CHECK(d.live.empty());  // the replacement went through device_dereg_func, once

  // A cleared device_data is never passed to device_dereg_func.
  REQUIRE(c.reg(at(410), 4096, &e) == UDREG_RC_SUCCESS);
  CHECK(Device::dereg(e->device_data, &d) == 0);
  e->device_data = nullptr;
  uint64_t deregs = d.deregs;
  CHECK(c.release(e, false) == UDREG_RC_SUCCESS);
  CHECK(c.evict() == UDREG_RC_SUCCESS);
  CHECK(d.deregs == deregs);
  c.destroy();
}

TEST_CASE("cache: unmapped ranges invalidate unused entries at once and used ones at their last release") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, kLazy | UDREG_CC_MODE_USE_KERNEL_CACHE), &w);
  udreg_entry_t *unused = nullptr, *used = nullptr, *other = nullptr;
  REQUIRE(c.reg(at(500), 3 * 4096, &unused) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(510, 8), 100, &used) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(520), 4096, &other) == UDREG_RC_SUCCESS);
  CHECK(c.release(unused, false) == UDREG_RC_SUCCESS);
  CHECK(c.release(other, false) == UDREG_RC_SUCCESS);
  void* dd_unused = unused->device_data;
  void* dd_used = used->device_data;

  // What a hook does before munmap: one page in the middle of `unused`, and `used`'s page.
  report_unmapped(uint64_t(at(501)), uint64_t(at(502)));
  report_unmapped(uint64_t(at(510)), uint64_t(at(510)) + 1);

  // The next call applies them: `unused` is deregistered, `used` no longer hits.
  udreg_entry_t* e = nullptr;
  REQUIRE(c.reg(at(510, 8), 100, &e) == UDREG_RC_SUCCESS);
  CHECK(e != used);
  CHECK(d.live.count(dd_unused) == 0);
  CHECK(d.live.count(dd_used) == 1);
  CHECK(c.stat(Stat::kInvalidated) == 2);
  CHECK(c.stat(Stat::kMiss) == 4);
  // `other` was not touched.
  udreg_entry_t* o = nullptr;
  REQUIRE(c.reg(at(520), 4096, &o) == UDREG_RC_SUCCESS);
  CHECK(o == other);
  CHECK(c.verify());

  // The old reference goes: deregistered now, even though the cache is lazy.
  CHECK(c.release(used, false) == UDREG_RC_SUCCESS);
  CHECK(d.live.count(dd_used) == 0);
  CHECK(c.release(e, false) == UDREG_RC_SUCCESS);
  CHECK(c.release(o, false) == UDREG_RC_SUCCESS);
  CHECK(c.verify());
  c.destroy();
  CHECK(d.live.empty());
  CHECK(d.regs == d.deregs);
}

TEST_CASE("cache: lost invalidation records and a fork epoch drop every entry") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, kLazy), &w);
  udreg_entry_t *a = nullptr, *b = nullptr;
  REQUIRE(c.reg(at(600), 4096, &a) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(700), 4096, &b) == UDREG_RC_SUCCESS);
  CHECK(c.release(a, false) == UDREG_RC_SUCCESS);

  // More records than the ring holds, none about these entries: the cache cannot know.
  for (uint64_t i = 0; i < InvalidationRing::kCapacity + 10; ++i) invalidation_ring().push(1 << 12, 2 << 12);
  udreg_entry_t* x = nullptr;
  REQUIRE(c.reg(at(600), 4096, &x) == UDREG_RC_SUCCESS);
  CHECK(c.stat(Stat::kHit) == 0);  // `a` was dropped: a miss and a new registration
  CHECK(d.regs == 3);
  CHECK(c.stat(Stat::kInvalidateAll) == 1);
  CHECK(d.live.size() == 2);  // `b` (still referenced) and the new one
  CHECK(c.release(b, false) == UDREG_RC_SUCCESS);
  CHECK(d.live.size() == 1);

  CHECK(c.release(x, false) == UDREG_RC_SUCCESS);
  invalidation_ring().bump_epoch();
  CHECK(c.evict() == UDREG_RC_SUCCESS);  // dropping by the epoch counts as progress
  CHECK(d.live.empty());
  CHECK(c.stat(Stat::kInvalidateAll) == 2);
  c.destroy();
}

TEST_CASE("cache: a range no source watches is never cached nor shared") {
  Device d;
  FixedWatcher w;
  w.answer = false;
  Cache c(attr_for(&d, kLazy), &w);
  udreg_entry_t *e1 = nullptr, *e2 = nullptr;
  REQUIRE(c.reg(at(800), 4096, &e1) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(800), 4096, &e2) == UDREG_RC_SUCCESS);
  CHECK(e1 != e2);
  CHECK(d.regs == 2);
  CHECK(c.release(e1, false) == UDREG_RC_SUCCESS);
  CHECK(c.release(e2, false) == UDREG_RC_SUCCESS);
  CHECK(d.live.empty());
  CHECK(c.stat(Stat::kUnwatched) == 2);
  CHECK(address_filter().empty());
  c.destroy();
}

TEST_CASE("cache: destroy deregisters referenced entries and calls the destructor once") {
  Device d;
  FixedWatcher w;
  auto a = attr_for(&d, kLazy);
  static int destructed = 0;
  destructed = 0;
  a.destructor_callback = [](void* ctx) { destructed += ctx == reinterpret_cast<void*>(0x1234); };
  a.destructor_context = reinterpret_cast<void*>(0x1234);
  Cache c(a, &w);
  udreg_entry_t *e1 = nullptr, *e2 = nullptr;
  REQUIRE(c.reg(at(900), 4096, &e1) == UDREG_RC_SUCCESS);
  REQUIRE(c.reg(at(910), 4096, &e2) == UDREG_RC_SUCCESS);
  CHECK(c.release(e2, false) == UDREG_RC_SUCCESS);
  c.destroy();
  CHECK(d.live.empty());
  CHECK(destructed == 1);
  CHECK(address_filter().empty());
}

TEST_CASE("cache: concurrent Register/Release from several threads, with invalidations") {
  Device d;
  FixedWatcher w;
  Cache c(attr_for(&d, kLazy | UDREG_CC_MODE_USE_KERNEL_CACHE, 48), &w);
  constexpr int kThreads = 4;
  constexpr int kIters = 4000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(unsigned(t) + 1);
      std::vector<udreg_entry_t*> mine;
      for (int i = 0; i < kIters; ++i) {
        uint64_t page = rng() % 64;
        if (rng() % 16 == 0) {
          report_unmapped(uint64_t(at(1000 + page)), uint64_t(at(1001 + page)));
          continue;
        }
        udreg_entry_t* e = nullptr;
        udreg_return_t rc = c.reg(at(1000 + page, rng() % 100), 1 + rng() % 3000, &e);
        if (rc == UDREG_RC_SUCCESS) {
          if (e->device_data == nullptr) failures.fetch_add(1);
          mine.push_back(e);
        } else if (rc != UDREG_RC_NO_SPACE) {
          failures.fetch_add(1);
        }
        if (mine.size() > 6 || (rng() % 3 == 0 && !mine.empty())) {
          size_t k = rng() % mine.size();
          if (c.release(mine[k], rng() % 2 == 0) != UDREG_RC_SUCCESS) failures.fetch_add(1);
          mine.erase(mine.begin() + long(k));
        }
        if (rng() % 50 == 0) c.evict();
      }
      for (auto* e : mine)
        if (c.release(e, false) != UDREG_RC_SUCCESS) failures.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  CHECK(c.verify());
  CHECK(c.live_entries() <= 48);
  CHECK(c.live_entries() == c.cached_unreferenced());  // nothing is referenced any more
  {
    // Cache before device lock, the order the cache's callbacks take them in.
    size_t live = c.live_entries();
    uint64_t device_regs = c.stat(Stat::kDeviceReg);
    std::lock_guard<std::mutex> l(d.mu);
    CHECK(d.regs - d.deregs == live);
    CHECK(d.regs == device_regs);
  }
  c.destroy();
  CHECK(d.live.empty());
  CHECK(d.regs == d.deregs);
}
