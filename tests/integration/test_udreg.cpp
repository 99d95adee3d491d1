// uDREG with real device registrations: GNI_MemRegister/GNI_MemDeregister through a nicemu
// daemon are the cache's callbacks. Free-then-reuse returns the stale registration with
// invalidation disabled and a fresh one with each source (userfaultfd, interposed hooks, both);
// munmap + mmap at the same address, mremap (move, shrink), madvise DONTNEED/FREE/REMOVE, brk
// shrink; an entry in use when its memory goes is deregistered at its last release; eviction
// under a small max_entries; threads registering while others free and remap memory. Every
// child checks at the end that each real registration was deregistered exactly once and that
// the daemon holds none of its registrations any more.
#include <doctest/doctest.h>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "../anon_memory.h"
#include "udreg_nicemu.h"
#include "udreg_pub.h"

using namespace harness;

namespace {

constexpr uint64_t kPage = 4096;
constexpr int kSkip = 77;

// The device callbacks: real registrations with the emulated NIC, counted.
struct GniDevice {
  gni_nic_handle_t nic = nullptr;
  std::mutex mu;  // the cache calls back under its own lock; this guards the counters for readers
  uint64_t regs = 0, deregs = 0, failures = 0;
  uint64_t next_serial = 1;
  std::set<uint64_t> live;  // serials: heap addresses of Reg objects are reused, serials never

  struct Reg {
    gni_mem_handle_t h;
    uint64_t addr, len;
    uint64_t serial;
  };

  static void* reg(void* addr, uint64_t len, void* ctx) {
    auto* d = static_cast<GniDevice*>(ctx);
    auto* r = new Reg{{}, uint64_t(addr), len, 0};
    gni_return_t rc = GNI_MemRegister(d->nic, uint64_t(addr), len, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &r->h);
    if (rc != GNI_RC_SUCCESS) {
      delete r;
      return rc == GNI_RC_ERROR_RESOURCE ? nullptr : UDREG_DEVICE_REG_FAILED;
    }
    std::lock_guard<std::mutex> l(d->mu);
    ++d->regs;
    r->serial = d->next_serial++;
    d->live.insert(r->serial);
    return r;
  }

  static uint32_t dereg(void* data, void* ctx) {
    auto* d = static_cast<GniDevice*>(ctx);
    auto* r = static_cast<Reg*>(data);
    {
      std::lock_guard<std::mutex> l(d->mu);
      if (d->live.erase(r->serial) != 1) {  // deregistered twice, or never registered
        ++d->failures;
        return 1;
      }
      ++d->deregs;
    }
    gni_return_t rc = GNI_MemDeregister(d->nic, &r->h);
    delete r;
    if (rc != GNI_RC_SUCCESS) {
      std::lock_guard<std::mutex> l(d->mu);
      ++d->failures;
    }
    return rc == GNI_RC_SUCCESS ? 0 : 1;
  }

  uint64_t live_count() {
    std::lock_guard<std::mutex> l(mu);
    return live.size();
  }
  bool is_live(uint64_t serial) {
    std::lock_guard<std::mutex> l(mu);
    return live.count(serial) == 1;
  }
};

uint64_t serial_of(const udreg_entry_t* e) { return static_cast<GniDevice::Reg*>(e->device_data)->serial; }

struct Ctx {
  Cluster* cluster = nullptr;
  Gni g;
  GniDevice dev;
  udreg_cache_handle_t cache = nullptr;
  std::string mode;
};

udreg_cache_handle_t make_cache(GniDevice& dev, const char* name, uint32_t modes, uint32_t max_entries) {
  struct udreg_cache_attr a;
  std::memset(&a, 0, sizeof a);
  std::snprintf(a.cache_name, sizeof a.cache_name, "%s", name);
  a.max_entries = max_entries;
  a.modes = modes;
  a.reg_context = &dev;
  a.dreg_context = &dev;
  a.device_reg_func = GniDevice::reg;
  a.device_dereg_func = GniDevice::dereg;
  CHILD_CHECK(UDREG_CacheCreate(&a) == UDREG_RC_SUCCESS);
  udreg_cache_handle_t h = nullptr;
  CHILD_CHECK(UDREG_CacheAccess(name, &h) == UDREG_RC_SUCCESS);
  return h;
}

uint64_t daemon_registrations(Cluster& cl) {
  auto s = cl.status(0);
  for (auto& c : s["cdms"])
    if (c["pid"].get<int64_t>() == getpid()) return c["registrations"].get<uint64_t>();
  return UINT64_MAX;
}

// Runs `body` in a child attached to node 0 with NICEMU_UDREG_INVALIDATION=mode, a lazy
// kernel-cache cache, then destroys the cache and checks the exactly-once accounting.
// Returns the child's exit code (77 when the mode is not available here).
int run(Cluster& cl, Cred cred, const std::string& mode, std::function<int(Ctx&)> body, uint32_t max_entries = 64,
        uint32_t modes = UDREG_CC_MODE_USE_KERNEL_CACHE | UDREG_CC_MODE_USE_LAZY_DEREG) {
  pid_t p = cl.spawn(0, [&]() -> int {
    setenv("NICEMU_UDREG_INVALIDATION", mode.c_str(), 1);
    // Fixed threshold: glibc would otherwise raise it after the first free of a big block
    // and serve the next one from the heap, at another address.
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    Ctx c;
    c.cluster = &cl;
    c.mode = mode;
    CHILD_CHECK(c.g.open(1, cred) == GNI_RC_SUCCESS);
    c.dev.nic = c.g.nic;
    c.cache = make_cache(c.dev, "udreg-test", modes, max_entries);
    unsigned src = nicemu_udreg_invalidation_sources();
    if ((mode == "uffd" && !(src & NICEMU_UDREG_SOURCE_UFFD)) ||
        (mode == "hooks" && !(src & NICEMU_UDREG_SOURCE_HOOKS))) {
      std::fprintf(stderr, "mode %s not available here (sources %#x): skipped\n", mode.c_str(), src);
      return kSkip;
    }
    int rc = body(c);
    if (rc != 0) return rc;
    CHILD_CHECK(UDREG_CacheRelease(c.cache) == UDREG_RC_SUCCESS);
    CHILD_CHECK(UDREG_CacheDestroy(c.cache) == UDREG_RC_SUCCESS);
    CHILD_CHECK(c.dev.failures == 0);
    CHILD_CHECK(c.dev.regs == c.dev.deregs);
    CHILD_CHECK(c.dev.live.empty());
    CHILD_CHECK(daemon_registrations(cl) == 0);
    return 0;
  });
  return cl.wait(p, 120);
}

void expect_ok(int rc, const std::string& what) {
  if (rc == kSkip) {
    MESSAGE(what << ": skipped (source not available on this machine)");
    return;
  }
  CHECK_MESSAGE(rc == 0, what);
}

uint64_t cache_stat(udreg_cache_handle_t h, udreg_stat_t s) {
  uint64_t v = 0;
  CHILD_CHECK(UDREG_GetStat(h, s, &v) == UDREG_RC_SUCCESS);
  return v;
}

inline uint8_t pattern(uint64_t i) { return uint8_t((i * 131) ^ (i >> 7) ^ 0x5a); }

// A loopback FMA PUT through the entry's memory handle: the registration really describes
// this memory.
void put_through(Ctx& c, void* dst, udreg_entry_t* e, uint64_t len) {
  auto* r = static_cast<GniDevice::Reg*>(e->device_data);
  gni_ep_handle_t ep = bound_ep(c.g.nic, c.g.cq, c.g.addr, c.g.inst);
  static char src[4096];
  if (len > sizeof src) len = sizeof src;
  for (uint64_t i = 0; i < len; ++i) src[i] = char(pattern(i));
  std::memset(dst, 0, len);
  gni_post_descriptor_t d = put_desc(uint64_t(src), uint64_t(dst), r->h, len);
  CHILD_CHECK(post_and_wait(c.g.cq, ep, d, 5000) == 0);
  CHILD_CHECK(std::memcmp(dst, src, len) == 0);
  CHILD_CHECK(GNI_EpUnbind(ep) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_EpDestroy(ep) == GNI_RC_SUCCESS);
}

// Runs `scenario` until it found its holes free, at most 20 times.
template <typename F>
bool with_retries(F scenario) {
  for (int i = 0; i < 20; ++i)
    if (scenario()) return true;
  return false;
}

// After the memory of a cached registration was replaced by new memory at the same address:
// with invalidation the next Register misses and the old registration is deregistered once;
// without, the old entry comes back (stale).
int expect_fresh_or_stale(Ctx& c, udreg_entry_t* old, uint64_t old_serial, void* addr, uint64_t len) {
  uint64_t regs = c.dev.regs, deregs = c.dev.deregs;
  udreg_entry_t* e = nullptr;
  CHILD_CHECK(UDREG_Register(c.cache, addr, len, &e) == UDREG_RC_SUCCESS);
  if (c.mode == "none") {
    CHILD_CHECK(e == old);                 // the stale registration is returned ...
    CHILD_CHECK(serial_of(e) == old_serial);
    CHILD_CHECK(c.dev.regs == regs);       // ... and no new one was made
  } else {
    CHILD_CHECK(serial_of(e) != old_serial);
    CHILD_CHECK(c.dev.regs == regs + 1);
    CHILD_CHECK(c.dev.deregs == deregs + 1);  // the old one, once
    CHILD_CHECK(!c.dev.is_live(old_serial));
    put_through(c, addr, e, len);
  }
  CHILD_CHECK(UDREG_DecrRefcount(c.cache, e) == UDREG_RC_SUCCESS);
  return 0;
}

const std::vector<std::string> kModes = {"none", "uffd", "hooks", "auto"};

// Runs `body` (run) once per invalidation mode on a one-node cluster and checks every run.
void in_every_mode(const std::string& what, std::function<int(Ctx&)> body, uint32_t max_entries = 64) {
  Cluster cl(1);
  Cred cred = cl.credential();
  for (const auto& mode : kModes) expect_ok(run(cl, cred, mode, body, max_entries), what + ", mode " + mode);
}

// Registers [p, p + n) and drops the reference at once (the entry stays cached); returns
// the entry in `e` and its registration's serial, to tell a stale entry from a fresh one.
uint64_t register_cached(Ctx& c, void* p, uint64_t n, udreg_entry_t*& e) {
  e = nullptr;
  CHILD_CHECK(UDREG_Register(c.cache, p, n, &e) == UDREG_RC_SUCCESS);
  const uint64_t serial = serial_of(e);
  CHILD_CHECK(UDREG_DecrRefcount(c.cache, e) == UDREG_RC_SUCCESS);
  return serial;
}

}  // namespace

TEST_CASE("free then malloc at the same address: stale without invalidation, fresh with it") {
  in_every_mode("free/malloc", [](Ctx& c) {
    const uint64_t n = 4 << 20;
    char* p = static_cast<char*>(malloc(n));
    CHILD_CHECK(p);
    std::memset(p, 1, n);
    udreg_entry_t* e = nullptr;
    CHILD_CHECK(UDREG_Register(c.cache, p, n, &e) == UDREG_RC_SUCCESS);
    uint64_t dd = serial_of(e);
    put_through(c, p, e, kPage);
    CHILD_CHECK(UDREG_DecrRefcount(c.cache, e) == UDREG_RC_SUCCESS);
    // The hit before the free: same entry, no new registration.
    udreg_entry_t* again = nullptr;
    CHILD_CHECK(UDREG_Register(c.cache, p + 100, 1000, &again) == UDREG_RC_SUCCESS);
    CHILD_CHECK(again == e && cache_stat(c.cache, UDREG_STAT_CACHE_HIT) == 1);
    CHILD_CHECK(UDREG_DecrRefcount(c.cache, again) == UDREG_RC_SUCCESS);

    free(p);  // glibc unmaps the block from inside libc
    char* q = static_cast<char*>(malloc(n));
    if (q != p) {
      std::fprintf(stderr, "malloc did not return the same address (sanitizer allocator?): skipped\n");
      free(q);
      return kSkip;
    }
    std::memset(q, 2, n);
    int rc = expect_fresh_or_stale(c, e, dd, q, n);
    free(q);
    return rc;
  });
}

TEST_CASE("munmap then mmap at the same address, and an entry in use when its memory goes") {
  in_every_mode("munmap/mmap", [](Ctx& c) {
    const uint64_t n = 1 << 20;
    CHILD_CHECK(with_retries([&] {
      char* p = map_anon(n, 0x11);
      udreg_entry_t* e = nullptr;
      const uint64_t dd = register_cached(c, p, n, e);
      CHILD_CHECK(munmap(p, n) == 0);
      if (!refill(p, n, 0x11)) return false;
      CHILD_CHECK(expect_fresh_or_stale(c, e, dd, p, n) == 0);
      munmap(p, n);
      return true;
    }));

    // In use: the reference is held across the unmap.
    CHILD_CHECK(with_retries([&] {
      char* r = map_anon(n, 0x11);
      udreg_entry_t* held = nullptr;
      CHILD_CHECK(UDREG_Register(c.cache, r, n, &held) == UDREG_RC_SUCCESS);
      uint64_t held_serial = serial_of(held);
      CHILD_CHECK(munmap(r, n) == 0);
      if (!refill(r, n, 0x11)) {
        CHILD_CHECK(UDREG_DecrRefcount(c.cache, held) == UDREG_RC_SUCCESS);
        return false;
      }
      uint64_t deregs = c.dev.deregs;
      udreg_entry_t* fresh = nullptr;
      CHILD_CHECK(UDREG_Register(c.cache, r, n, &fresh) == UDREG_RC_SUCCESS);
      if (c.mode == "none") {
        CHILD_CHECK(fresh == held);
        CHILD_CHECK(UDREG_DecrRefcount(c.cache, fresh) == UDREG_RC_SUCCESS);
      } else {
        CHILD_CHECK(fresh != held);
        CHILD_CHECK(c.dev.deregs == deregs);  // still referenced: not yet
        CHILD_CHECK(c.dev.is_live(held_serial));
      }
      CHILD_CHECK(UDREG_DecrRefcount(c.cache, held) == UDREG_RC_SUCCESS);
      if (c.mode != "none") {
        CHILD_CHECK(c.dev.deregs == deregs + 1);  // the last reference went: deregistered, lazy or not
        CHILD_CHECK(!c.dev.is_live(held_serial));
        CHILD_CHECK(UDREG_DecrRefcount(c.cache, fresh) == UDREG_RC_SUCCESS);
      }
      munmap(r, n);
      return true;
    }));
    return 0;
  });
}

TEST_CASE("mremap: moved and shrunk registrations are invalidated") {
  in_every_mode("mremap", [](Ctx& c) {
    const uint64_t n = 1 << 20;
    // Moved away: new memory appears at the old address.
    CHILD_CHECK(with_retries([&] {
      char* p = map_anon(n, 0x11);
      char* dst = map_anon(n, 0x11);
      udreg_entry_t* e = nullptr;
      const uint64_t dd = register_cached(c, p, n, e);
      CHILD_CHECK(mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == dst);
      bool ok = refill(p, n, 0x11);
      if (ok) {
        CHILD_CHECK(expect_fresh_or_stale(c, e, dd, p, n) == 0);
        munmap(p, n);
      }
      munmap(dst, n);
      return ok;
    }));

    // Shrunk in place: the tail is gone and comes back as other memory.
    CHILD_CHECK(with_retries([&] {
      char* s = map_anon(n, 0x11);
      udreg_entry_t* e = nullptr;
      const uint64_t dd = register_cached(c, s, n, e);
      CHILD_CHECK(mremap(s, n, n / 2, 0) == s);
      bool ok = refill(s + n / 2, n / 2, 0x11);
      if (ok) CHILD_CHECK(expect_fresh_or_stale(c, e, dd, s, n) == 0);
      munmap(s, ok ? n : n / 2);
      return ok;
    }));
    return 0;
  });
}

TEST_CASE("madvise DONTNEED, FREE and REMOVE give pages back: entries are invalidated") {
  in_every_mode("madvise", [](Ctx& c) {
    const uint64_t n = 256 << 10;
    struct Case {
      int advice;
      int flags;
    };
    for (Case k : {Case{MADV_DONTNEED, MAP_PRIVATE}, Case{MADV_FREE, MAP_PRIVATE}, Case{MADV_REMOVE, MAP_SHARED}}) {
      void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, k.flags | MAP_ANONYMOUS, -1, 0);
      CHILD_CHECK(m != MAP_FAILED);
      char* p = static_cast<char*>(m);
      std::memset(p, 3, n);
      udreg_entry_t* e = nullptr;
      const uint64_t dd = register_cached(c, p + 100, n - 200, e);
      CHILD_CHECK(madvise(p + 2 * kPage, kPage, k.advice) == 0);  // one page in the middle
      CHILD_CHECK(expect_fresh_or_stale(c, e, dd, p + 100, n - 200) == 0);
      munmap(p, n);
    }
    return 0;
  });
}

TEST_CASE("brk shrink: heap memory given back is invalidated") {
  in_every_mode("brk", [](Ctx& c) {
    const intptr_t n = 64 << 10;
    // Page-align the break first (malloc may have left it anywhere).
    uintptr_t cur = uintptr_t(sbrk(0));
    CHILD_CHECK(sbrk(intptr_t((kPage - cur % kPage) % kPage)) != reinterpret_cast<void*>(-1));
    char* p = static_cast<char*>(sbrk(n));
    CHILD_CHECK(p != reinterpret_cast<char*>(-1));
    std::memset(p, 4, size_t(n));
    udreg_entry_t* e = nullptr;
    const uint64_t dd = register_cached(c, p, uint64_t(n), e);
    CHILD_CHECK(sbrk(-n) == p + n);
    CHILD_CHECK(sbrk(n) == p);
    std::memset(p, 5, size_t(n));
    CHILD_CHECK(expect_fresh_or_stale(c, e, dd, p, uint64_t(n)) == 0);
    return 0;
  });
}

TEST_CASE("eviction under a small max_entries keeps hits, misses and registrations consistent") {
  Cluster cl(1);
  Cred cred = cl.credential();
  int rc = run(
      cl, cred, "auto",
      [](Ctx& c) {
        constexpr int kBufs = 10;
        constexpr uint64_t kLen = 64 << 10;
        char* base = map_anon(kBufs * kLen, 0x11);
        std::mt19937 rng(7);
        uint64_t calls = 0;
        for (int round = 0; round < 200; ++round) {
          int i = int(rng() % kBufs);
          udreg_entry_t* e = nullptr;
          CHILD_CHECK(UDREG_Register(c.cache, base + uint64_t(i) * kLen, kLen, &e) == UDREG_RC_SUCCESS);
          ++calls;
          CHILD_CHECK(c.dev.live_count() <= 4);  // max_entries bounds the device registrations
          if (round % 37 == 0) put_through(c, base + uint64_t(i) * kLen, e, kPage);
          CHILD_CHECK(UDREG_DecrRefcount(c.cache, e) == UDREG_RC_SUCCESS);
        }
        uint64_t hit = cache_stat(c.cache, UDREG_STAT_CACHE_HIT), miss = cache_stat(c.cache, UDREG_STAT_CACHE_MISS),
                 evicted = cache_stat(c.cache, UDREG_STAT_CACHE_EVICTED);
        std::fprintf(stderr, "hit %llu miss %llu evicted %llu\n", (unsigned long long)hit, (unsigned long long)miss,
                     (unsigned long long)evicted);
        CHILD_CHECK(hit + miss == calls);
        CHILD_CHECK(miss == c.dev.regs);              // one device registration per miss
        CHILD_CHECK(evicted == c.dev.deregs);         // nothing else was deregistered
        CHILD_CHECK(c.dev.regs - c.dev.deregs == 4);  // the cache is full of unreferenced entries
        CHILD_CHECK(hit > 0 && evicted > 0);
        // Explicit eviction empties it one entry at a time, then reports nothing to evict.
        for (int i = 0; i < 4; ++i) CHILD_CHECK(UDREG_Evict(c.cache) == UDREG_RC_SUCCESS);
        CHILD_CHECK(UDREG_Evict(c.cache) == UDREG_RC_NO_MATCH);
        CHILD_CHECK(c.dev.live_count() == 0);
        CHILD_CHECK(UDREG_ResetStat(c.cache, UDREG_STAT_CACHE_HIT) == UDREG_RC_SUCCESS);
        CHILD_CHECK(cache_stat(c.cache, UDREG_STAT_CACHE_HIT) == 0);
        munmap(base, kBufs * kLen);
        return 0;
      },
      4);
  expect_ok(rc, "eviction");
}

TEST_CASE("threads register and release while others free and remap memory") {
  Cluster cl(1);
  Cred cred = cl.credential();
  for (const std::string mode : {"auto", "uffd", "hooks"}) {
    int rc = run(
        cl, cred, mode,
        [](Ctx& c) {
          constexpr uint64_t kChunk = 64 << 10;
          constexpr int kChunks = 16;
          char* base = map_anon(kChunks * kChunk, 0x11);
          std::atomic<bool> stop{false};
          std::atomic<int> bad{0};
          // Churn: big blocks through malloc/free (libc's own munmap), and one chunk of the
          // registered area unmapped and mapped again, over and over.
          std::thread churn([&] {
            std::mt19937 rng(99);
            while (!stop.load()) {
              void* b = malloc(512 << 10);
              if (b) std::memset(b, 0, 4096);
              free(b);
              char* victim = base + uint64_t(rng() % kChunks) * kChunk;
              if (rng() % 4 == 0) {
                // Everyone may hold this chunk: only give pages back, keep the mapping.
                madvise(victim, kChunk, MADV_DONTNEED);
              }
            }
          });
          std::vector<std::thread> workers;
          for (int t = 0; t < 3; ++t)
            workers.emplace_back([&, t] {
              std::mt19937 rng(unsigned(t) * 31 + 1);
              for (int i = 0; i < 400; ++i) {
                char* p = base + uint64_t(rng() % kChunks) * kChunk + rng() % 1000;
                uint64_t len = 1 + rng() % (kChunk - 1000);
                udreg_entry_t* e = nullptr;
                udreg_return_t r = UDREG_Register(c.cache, p, len, &e);
                if (r != UDREG_RC_SUCCESS) {
                  bad.fetch_add(1);
                  continue;
                }
                auto* reg = static_cast<GniDevice::Reg*>(e->device_data);
                if (!reg || reg->addr > uint64_t(p) || reg->addr + reg->len < uint64_t(p) + len) bad.fetch_add(1);
                if (UDREG_DecrRefcount(c.cache, e) != UDREG_RC_SUCCESS) bad.fetch_add(1);
              }
            });
          for (auto& w : workers) w.join();
          stop.store(true);
          churn.join();
          CHILD_CHECK(bad.load() == 0);
          CHILD_CHECK(c.dev.live_count() <= 16);
          munmap(base, kChunks * kChunk);
          return 0;
        },
        16);
    expect_ok(rc, "threads, mode " + mode);
  }
}

TEST_CASE("caches by name: create once, access many, release, destroy; bad arguments") {
  Cluster cl(1);
  Cred cred = cl.credential();
  int rc = run(cl, cred, "auto", [](Ctx& c) {
    // The create-or-access idiom: a second create of the same name fails, access succeeds.
    udreg_cache_attr_t a{};
    std::snprintf(a.cache_name, sizeof a.cache_name, "udreg-test");
    a.max_entries = 8;
    a.device_reg_func = GniDevice::reg;
    a.device_dereg_func = GniDevice::dereg;
    a.reg_context = a.dreg_context = &c.dev;
    CHILD_CHECK(UDREG_CacheCreate(&a) == UDREG_RC_INVALID_PARAM);
    udreg_cache_handle_t h2 = nullptr;
    CHILD_CHECK(UDREG_CacheAccess("udreg-test", &h2) == UDREG_RC_SUCCESS);
    CHILD_CHECK(h2 == c.cache);
    CHILD_CHECK(UDREG_CacheRelease(h2) == UDREG_RC_SUCCESS);
    CHILD_CHECK(UDREG_CacheAccess("no-such-cache", &h2) == UDREG_RC_NO_MATCH);
    CHILD_CHECK(UDREG_CacheAccess(nullptr, &h2) == UDREG_RC_INVALID_PARAM);
    CHILD_CHECK(UDREG_CacheCreate(nullptr) == UDREG_RC_INVALID_PARAM);

    // A second cache, destroyed with a referenced entry: deregistered, destructor called.
    static int destructed = 0;
    std::snprintf(a.cache_name, sizeof a.cache_name, "udreg-test-2");
    a.destructor_callback = [](void*) { ++destructed; };
    CHILD_CHECK(UDREG_CacheCreate(&a) == UDREG_RC_SUCCESS);
    udreg_cache_handle_t h3 = nullptr;
    CHILD_CHECK(UDREG_CacheAccess("udreg-test-2", &h3) == UDREG_RC_SUCCESS);
    char* p = map_anon(kPage, 0x11);
    udreg_entry_t* e = nullptr;
    CHILD_CHECK(UDREG_Register(h3, p, kPage, &e) == UDREG_RC_SUCCESS);
    uint64_t deregs = c.dev.deregs;
    CHILD_CHECK(UDREG_CacheRelease(h3) == UDREG_RC_SUCCESS);
    CHILD_CHECK(UDREG_CacheRelease(h3) == UDREG_RC_INVALID_PARAM);  // one access only
    CHILD_CHECK(UDREG_CacheDestroy(h3) == UDREG_RC_SUCCESS);       // through the released handle
    CHILD_CHECK(c.dev.deregs == deregs + 1 && destructed == 1);
    CHILD_CHECK(UDREG_CacheAccess("udreg-test-2", &h3) == UDREG_RC_NO_MATCH);

    // Entries of one cache are refused by another; bad arguments change nothing.
    CHILD_CHECK(UDREG_Register(c.cache, p, kPage, &e) == UDREG_RC_SUCCESS);
    CHILD_CHECK(UDREG_Register(nullptr, p, kPage, &e) == UDREG_RC_INVALID_PARAM);
    CHILD_CHECK(UDREG_Register(c.cache, p, 0, &e) == UDREG_RC_INVALID_PARAM);
    uint64_t v = 0;
    CHILD_CHECK(UDREG_GetStat(c.cache, udreg_stat_t(99), &v) == UDREG_RC_INVALID_PARAM);
    CHILD_CHECK(UDREG_GetStat(c.cache, UDREG_STAT_CACHE_MISS, nullptr) == UDREG_RC_INVALID_PARAM);
    CHILD_CHECK(UDREG_Unregister(c.cache, e) == UDREG_RC_SUCCESS);
    CHILD_CHECK(UDREG_Unregister(c.cache, e) == UDREG_RC_INVALID_PARAM);  // no reference left
    CHILD_CHECK(UDREG_DecrRefcount(c.cache, nullptr) == UDREG_RC_INVALID_PARAM);
    munmap(p, kPage);
    return 0;
  });
  expect_ok(rc, "cache names");
}

TEST_CASE("peers write and read memory that uDREG registered and userfaultfd watches") {
  // A registration made through the cache, on pages never touched (userfaultfd registers
  // them in write-protect mode without protecting any): another process's FMA and RDMA
  // (the daemon's BTE engine, cross-memory attach) must reach them as any other memory.
  Cluster cl(1);
  Cred cred = cl.credential();
  Oob oob;
  struct Target {
    uint32_t addr, inst;
    uint64_t buf;
    gni_mem_handle_t h;
  };
  constexpr uint64_t kLen = 2 << 20;
  pid_t target = cl.spawn(0, [&]() -> int {
    setenv("NICEMU_UDREG_INVALIDATION", "auto", 1);
    Gni g = open_gni(1, cred);
    GniDevice dev;
    dev.nic = g.nic;
    udreg_cache_handle_t cache = make_cache(dev, "udreg-peer", UDREG_CC_MODE_USE_LAZY_DEREG, 16);
    void* m = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHILD_CHECK(m != MAP_FAILED);
    char* buf = static_cast<char*>(m);
    buf[0] = 1;  // only the first page is populated
    udreg_entry_t* e = nullptr;
    CHILD_CHECK(UDREG_Register(cache, buf, kLen, &e) == UDREG_RC_SUCCESS);
    std::fprintf(stderr, "target sources %#x\n", nicemu_udreg_invalidation_sources());
    oob.send(0, Target{g.addr, g.inst, uint64_t(buf), static_cast<GniDevice::Reg*>(e->device_data)->h});
    CHILD_CHECK(oob.recv<int>(0) == 1);  // the initiator is done
    for (uint64_t i = 0; i < 4096; ++i) CHILD_CHECK(uint8_t(buf[i]) == pattern(i));
    for (uint64_t i = 0; i < (1 << 20); ++i) CHILD_CHECK(uint8_t(buf[(64 << 10) + i]) == pattern(i + 7));
    CHILD_CHECK(UDREG_DecrRefcount(cache, e) == UDREG_RC_SUCCESS);
    CHILD_CHECK(UDREG_CacheRelease(cache) == UDREG_RC_SUCCESS);
    CHILD_CHECK(UDREG_CacheDestroy(cache) == UDREG_RC_SUCCESS);
    CHILD_CHECK(dev.regs == dev.deregs && dev.failures == 0);
    munmap(m, kLen);
    return 0;
  });
  pid_t initiator = cl.spawn(0, [&]() -> int {
    Target t = oob.recv<Target>(1);
    Gni g = open_gni(2, cred);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, t.inst);
    std::vector<char> src(1 << 20), back(1 << 20);
    for (uint64_t i = 0; i < src.size(); ++i) src[i] = char(pattern(i + 7));
    gni_mem_handle_t src_h, back_h;
    src_h = mem_register(g.nic, uint64_t(src.data()), src.size(), nullptr, GNI_MEM_READWRITE);
    back_h = mem_register(g.nic, uint64_t(back.data()), back.size(), nullptr, GNI_MEM_READWRITE);
    auto complete = [&](gni_post_descriptor_t* d) {
      gni_cq_entry_t ev = 0;
      CHILD_CHECK(GNI_CqWaitEvent(g.cq, 10000, &ev) == GNI_RC_SUCCESS);
      gni_post_descriptor_t* out = nullptr;
      CHILD_CHECK(GNI_GetCompleted(g.cq, ev, &out) == GNI_RC_SUCCESS);
      CHILD_CHECK(out == d);
    };
    // FMA PUT of one page (the initiator writes with cross-memory attach).
    std::vector<char> page(4096);
    for (uint64_t i = 0; i < page.size(); ++i) page[i] = char(pattern(i));
    gni_post_descriptor_t f{};
    f.type = GNI_POST_FMA_PUT;
    f.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    f.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
    f.local_addr = uint64_t(page.data());
    f.remote_addr = t.buf;
    f.remote_mem_hndl = t.h;
    f.length = page.size();
    CHILD_CHECK(GNI_PostFma(ep, &f) == GNI_RC_SUCCESS);
    complete(&f);
    // RDMA PUT of 1 MiB into untouched pages (the daemon's BTE engine writes), then GET back.
    gni_post_descriptor_t r{};
    r.type = GNI_POST_RDMA_PUT;
    r.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    r.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
    r.local_addr = uint64_t(src.data());
    r.local_mem_hndl = src_h;
    r.remote_addr = t.buf + (64 << 10);
    r.remote_mem_hndl = t.h;
    r.length = src.size();
    CHILD_CHECK(GNI_PostRdma(ep, &r) == GNI_RC_SUCCESS);
    complete(&r);
    gni_post_descriptor_t gd = r;
    gd.type = GNI_POST_RDMA_GET;
    gd.local_addr = uint64_t(back.data());
    gd.local_mem_hndl = back_h;
    CHILD_CHECK(GNI_PostRdma(ep, &gd) == GNI_RC_SUCCESS);
    complete(&gd);
    CHILD_CHECK(std::memcmp(back.data(), src.data(), src.size()) == 0);
    oob.send(1, 1);
    CHILD_CHECK(GNI_MemDeregister(g.nic, &src_h) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MemDeregister(g.nic, &back_h) == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(cl.wait(initiator, 60) == 0);
  CHECK(cl.wait(target, 60) == 0);
}
