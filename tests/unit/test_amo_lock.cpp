// The AMO lock table: mutual exclusion between threads and processes, lock selection by
// address, and recovery from holders that died (reaped, zombie, pid reused) or hang.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "amo_lock.h"
#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;

namespace {

// Shared anonymous memory, so forked children see the same locks.
template <typename T>
T* shared_page() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return new (p) T{};
}

struct Shared {
  abi::AmoLock lock;
  std::atomic<uint32_t> ready{0};
  uint64_t counter = 0;  // protected by `lock`, deliberately not atomic
};

// Child that takes the lock, says so, then runs `then`.
pid_t child_holding(Shared* s, void (*then)()) {
  pid_t p = fork();
  if (p == 0) {
    if (amo_lock_acquire(&s->lock) != AmoLockResult::kAcquired) _exit(2);
    s->ready.store(1);
    then();
    _exit(0);
  }
  while (s->ready.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("lock selection: inside the table, per 8-byte word, none without a table") {
  auto r = std::make_shared<Region>();
  r->size = abi::kRoSize + (1 << 20);
  r->base = static_cast<char*>(mmap(nullptr, r->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(r->base != MAP_FAILED);
  auto* h = new (r->base) abi::RegionHeader{};
  CHECK(amo_lock_for(*r, 0x1000) == nullptr);  // count 0: no table
  h->amo_lock_offset = uint32_t(abi::kRoSize);
  h->amo_lock_count = abi::kAmoLocks;
  auto* first = reinterpret_cast<abi::AmoLock*>(r->base + abi::kRoSize);
  std::set<abi::AmoLock*> used;
  for (uint64_t a = 0x7f0000001000; a < 0x7f0000001000 + 8 * 4096; a += 8) {
    abi::AmoLock* l = amo_lock_for(*r, a);
    REQUIRE(l >= first);
    REQUIRE(l < first + abi::kAmoLocks);
    CHECK(amo_lock_for(*r, a + 4) == l);  // the 4-byte word inside shares the lock
    used.insert(l);
  }
  CHECK(used.size() > abi::kAmoLocks * 9 / 10);  // spread over the table
  h->amo_lock_count = 1000;                      // not a power of two
  CHECK(amo_lock_for(*r, 0x1000) == nullptr);
  h->amo_lock_count = abi::kAmoLocks;
  h->amo_lock_offset = 64;  // in the read-only part
  CHECK(amo_lock_for(*r, 0x1000) == nullptr);
  h->amo_lock_offset = uint32_t(r->size - 4096);  // runs past the end
  CHECK(amo_lock_for(*r, 0x1000) == nullptr);
  munmap(r->base, r->size);
  r->base = nullptr;
}

TEST_CASE("mutual exclusion between threads and between processes") {
  auto* s = shared_page<Shared>();
  constexpr int kIters = 20000;
  auto work = [s] {
    for (int i = 0; i < kIters; ++i) {
      REQUIRE(amo_lock_acquire(&s->lock) == AmoLockResult::kAcquired);
      uint64_t v = s->counter;
      if ((i & 63) == 0) std::this_thread::yield();  // widen the window a race would need
      s->counter = v + 1;
      amo_lock_release(&s->lock);
    }
  };
  pid_t p = fork();
  if (p == 0) {
    std::thread t(work);
    work();
    t.join();
    _exit(0);
  }
  std::thread t(work);
  work();
  t.join();
  int st = 0;
  waitpid(p, &st, 0);
  CHECK(WIFEXITED(st));
  CHECK(s->counter == 4 * kIters);
  CHECK(s->lock.owner.load() == 0);
  CHECK(s->lock.waiters.load() == 0);
  munmap(s, 4096);
}

TEST_CASE("a holder that died is broken: reaped, or a zombie") {
  for (bool reap : {true, false}) {
    CAPTURE(reap);
    auto* s = shared_page<Shared>();
    pid_t p = child_holding(s, [] {});
    if (reap) {
      waitpid(p, nullptr, 0);
    } else {
      // Not reaped: the child stays a zombie, whose pid still exists.
      while (amo_lock_holder_alive(s->lock.owner.load())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      CHECK(kill(p, 0) == 0);
    }
    CHECK(s->lock.owner.load() != 0);  // it exited holding the lock
    auto t0 = std::chrono::steady_clock::now();
    CHECK(amo_lock_acquire(&s->lock) == AmoLockResult::kBrokeDeadHolder);
    CHECK(seconds_since(t0) < 1.0);
    CHECK(s->lock.owner.load() == amo_lock_self());
    amo_lock_release(&s->lock);
    CHECK(s->lock.owner.load() == 0);
    if (!reap) waitpid(p, nullptr, 0);
    munmap(s, 4096);
  }
}

TEST_CASE("holder identity survives pid reuse; garbage owners are nobody") {
  const uint64_t me = amo_lock_self();
  CHECK(static_cast<pid_t>(me & 0xFFFFFFFF) == getpid());
  CHECK(amo_lock_holder_alive(me));
  CHECK_FALSE(amo_lock_holder_alive(me + (uint64_t{1} << 32)));  // our pid, another start time
  CHECK_FALSE(amo_lock_holder_alive(0xFFFFFFFFull));             // pid -1
  CHECK(amo_lock_holder_alive(uint64_t(getpid())));               // no tag: the pid alone
}

TEST_CASE("a live holder that never releases: bounded wait, then the lock is usable again") {
  auto* s = shared_page<Shared>();
  pid_t p = child_holding(s, [] { pause(); });
  auto t0 = std::chrono::steady_clock::now();
  CHECK(amo_lock_acquire(&s->lock, 50'000'000) == AmoLockResult::kTimeout);
  double waited = seconds_since(t0);
  CHECK(waited >= 0.04);
  CHECK(waited < 2.0);
  CHECK(s->lock.waiters.load() == 0);
  kill(p, SIGKILL);
  waitpid(p, nullptr, 0);
  CHECK(amo_lock_acquire(&s->lock) == AmoLockResult::kBrokeDeadHolder);
  amo_lock_release(&s->lock);
  munmap(s, 4096);
}

// The lock lives in the target's writable heap: its holder can write anything there, such
// as waking the waiters again and again without ever releasing. Each wake-up looks like a
// release to the waiter, so only the total bound ends the wait (the daemon's loop uses it).
Shared* g_waker = nullptr;
TEST_CASE("a holder that keeps waking waiters without releasing: the total bound ends the wait") {
  auto* s = g_waker = shared_page<Shared>();
  pid_t p = child_holding(s, [] {
    for (;;) {
      g_waker->lock.wake.fetch_add(1);
      abi::futex_wake_all(&g_waker->lock.wake);
      usleep(500);
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  CHECK(amo::lock_acquire(&s->lock, amo::lock_self(getpid()), 0, 50'000'000, 150'000'000) == amo::LockResult::kTimeout);
  double waited = seconds_since(t0);
  CHECK(waited >= 0.14);
  CHECK(waited < 1.0);
  kill(p, SIGKILL);
  waitpid(p, nullptr, 0);
  munmap(s, 4096);
}

TEST_CASE("a waiter asleep on a held lock is woken by the release") {
  auto* s = shared_page<Shared>();
  REQUIRE(amo_lock_acquire(&s->lock) == AmoLockResult::kAcquired);
  std::atomic<bool> got{false};
  std::thread t([&] {
    CHECK(amo_lock_acquire(&s->lock) == AmoLockResult::kAcquired);
    got = true;
    amo_lock_release(&s->lock);
  });
  while (s->lock.waiters.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  CHECK_FALSE(got.load());
  amo_lock_release(&s->lock);
  t.join();
  CHECK(got.load());
  munmap(s, 4096);
}
