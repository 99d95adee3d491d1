// CQ ring: order, overrun, wrap-around, and many producers against one consumer.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/cq_ring.h"
#include "ring_fixture.h"

using namespace nicemu::abi;

namespace {
using Ring = RingFixture<CqRingCtl, std::atomic<uint64_t>, CqRingView, &CqRingView::entries>;
}  // namespace

TEST_CASE("entries come out in push order and the ring wraps") {
  Ring r(16);
  for (uint64_t round = 0; round < 5; ++round) {
    for (uint64_t i = 1; i <= 16; ++i) CHECK(r.view.push(cqe::make(1, 0, 0, 0, 0, round * 100 + i)));
    for (uint64_t i = 1; i <= 16; ++i) CHECK(cqe::id_of(r.view.pop()) == round * 100 + i);
    CHECK(r.view.pop() == 0);
  }
}

TEST_CASE("a full ring reports overrun once and keeps earlier entries") {
  Ring r(16);
  for (uint64_t i = 1; i <= 16; ++i) REQUIRE(r.view.push(cqe::make(1, 0, 0, 0, 0, i)));
  CHECK_FALSE(r.view.push(cqe::make(1, 0, 0, 0, 0, 99)));
  CHECK(r.view.has_overrun());
  CHECK(r.view.take_overrun());
  CHECK_FALSE(r.view.take_overrun());
  CHECK(cqe::id_of(r.view.pop()) == 1);
}

TEST_CASE("a single push with a producer's copy of head re-reads head only when the ring looks full") {
  Ring r(16);
  uint64_t head_cache = 0;
  for (uint64_t i = 1; i <= 16; ++i) REQUIRE(r.view.push(cqe::make(1, 0, 0, 0, 0, i), &head_cache));
  CHECK(head_cache == 0);  // the ring never looked full: the shared head line was not read
  CHECK_FALSE(r.view.push(cqe::make(1, 0, 0, 0, 0, 17), &head_cache));  // full: read, still full
  CHECK(r.view.take_overrun());
  for (uint64_t i = 1; i <= 4; ++i) CHECK(cqe::id_of(r.view.pop()) == i);
  // The copy is stale (0): the push reads head (4) again and finds room.
  CHECK(r.view.push(cqe::make(1, 0, 0, 0, 0, 18), &head_cache));
  CHECK(head_cache == 4);
  CHECK_FALSE(r.view.has_overrun());
  for (uint64_t i = 5; i <= 16; ++i) CHECK(cqe::id_of(r.view.pop()) == i);
  CHECK(cqe::id_of(r.view.pop()) == 18);
  CHECK(r.view.pop() == 0);
}

TEST_CASE("a batch push keeps its order, fills what room there is and flags the rest as overrun") {
  Ring r(16);
  std::vector<uint64_t> batch;
  for (uint64_t i = 1; i <= 10; ++i) batch.push_back(cqe::make(1, 0, 0, 0, 0, i));
  uint64_t head_cache = 0;
  CHECK(r.view.push_n(batch.data(), batch.size(), &head_cache) == 10);
  CHECK_FALSE(r.view.has_overrun());
  // Six slots left: six of the next ten go in, the rest are dropped with overrun.
  for (auto& e : batch) e = cqe::make(1, 0, 0, 0, 0, cqe::id_of(e) + 10);
  CHECK(r.view.push_n(batch.data(), batch.size(), &head_cache) == 6);
  CHECK(r.view.take_overrun());
  for (uint64_t i = 1; i <= 16; ++i) CHECK(cqe::id_of(r.view.pop()) == i);
  CHECK(r.view.pop() == 0);
  // The stale head cache (0) is re-read when it makes the ring look full, and it wraps.
  CHECK(r.view.push_n(batch.data(), 10, &head_cache) == 10);
  CHECK(head_cache == 16);
  for (uint64_t i = 11; i <= 20; ++i) CHECK(cqe::id_of(r.view.pop()) == i);
  CHECK(r.view.push_n(batch.data(), 0) == 0);
  // A full ring takes none.
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(r.view.push(cqe::make(1, 0, 0, 0, 0, 1)));
  CHECK(r.view.push_n(batch.data(), 1) == 0);
  CHECK(r.view.take_overrun());
}

TEST_CASE("four producers, one consumer: nothing lost, per-producer order kept") {
  Ring r(64);
  constexpr int kProducers = 4, kPer = 20000;
  std::vector<std::thread> ts;
  for (int p = 0; p < kProducers; ++p)
    ts.emplace_back([&, p] {
      for (int i = 0; i < kPer; ++i)
        while (!r.view.push(cqe::make(1, 0, 0, 0, uint64_t(p), uint64_t(i)))) {
          r.view.take_overrun();  // full: the consumer is behind; retry
          std::this_thread::yield();
        }
    });
  std::vector<int> next(kProducers, 0);
  int got = 0;
  while (got < kProducers * kPer) {
    uint64_t e = r.view.pop();
    if (!e) continue;
    int p = int(cqe::tid_of(e));
    REQUIRE(int(cqe::id_of(e)) == next[p]);
    ++next[p];
    ++got;
  }
  for (auto& t : ts) t.join();
  CHECK(r.view.pop() == 0);
}

TEST_CASE("a waiter on several rings (futex_waitv) is woken by a push into any of them") {
  Ring rings[3] = {Ring(16), Ring(16), Ring(16)};
  // The waiter's protocol (shm_layout.h): futex values first, then `waiters`, then re-check.
  FutexWaitv words[3];
  for (int i = 0; i < 3; ++i) {
    words[i] = futex_waitv_entry(&rings[i].ctl.futex, rings[i].ctl.futex.load());
    rings[i].ctl.waiters.fetch_add(1);
  }
  // Nothing pushed: the wait times out.
  int first = futex_wait_any(words, 3, 10'000'000);
  if (first == ENOSYS || first == EPERM) {
    MESSAGE("futex_waitv is not available here; libugni falls back to polling");
    return;
  }
  CHECK(first == ETIMEDOUT);
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rings[2].view.push(cqe::make(1, 0, 0, 0, 0, 5));
  });
  auto t0 = std::chrono::steady_clock::now();
  int err = futex_wait_any(words, 3, 5'000'000'000);
  auto waited = std::chrono::steady_clock::now() - t0;
  producer.join();
  CHECK(err == 0);
  CHECK(waited < std::chrono::seconds(2));
  CHECK(cqe::id_of(rings[2].view.pop()) == 5);
  // A push made before the wait (the value moved): it returns at once.
  CHECK(futex_wait_any(words, 3, 5'000'000'000) == 0);
}

TEST_CASE("a consumer that sleeps between pushes is woken by each one (no fence on the push path)") {
  // The consumer's side of a blocking wait as libugni's GNI_CqWaitEvent does it; the
  // producer pushes in bursts with pauses, so the consumer often goes to sleep just as an
  // entry is claimed. A lost wake-up would show as a sleep running into its 2 s timeout.
  Ring r(64);
  constexpr int kN = 3000;
  std::thread producer([&] {
    for (int i = 0; i < kN; ++i) {
      while (!r.view.push(cqe::make(1, 0, 0, 0, 0, uint64_t(i)))) {
        r.view.take_overrun();
        std::this_thread::yield();
      }
      if (i % 7 == 6) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  int got = 0, lost = 0, sleeps = 0;
  while (got < kN) {
    if (uint64_t e = r.view.pop()) {
      REQUIRE(int(cqe::id_of(e)) == got);
      ++got;
      continue;
    }
    const uint32_t seq = r.ctl.futex.load(std::memory_order_acquire);
    r.ctl.waiters.fetch_add(1, std::memory_order_seq_cst);
    if (r.view.peek() == 0) {
      const bool quiet = r.view.quiet();
      auto t0 = std::chrono::steady_clock::now();
      futex_wait(&r.ctl.futex, seq, quiet ? 2'000'000'000 : 50'000);
      if (quiet) ++sleeps;
      if (quiet && std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(1900)) ++lost;
    }
    r.ctl.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
  producer.join();
  CHECK(lost == 0);
  MESSAGE("consumer slept " << sleeps << " times");
  CHECK(r.view.quiet());
}

TEST_CASE("a producer preempted in a push does not see a false overrun when others moved on") {
  // libdmapp keeps its outstanding posts within its CQ's capacity, so the ring is never
  // full, yet it saw "completion queue overrun" (F4): the daemon pushing a remote
  // completion read `tail`, was preempted (a loaded node), and meanwhile the process pushed
  // and consumed its own same-host completions past that `tail`; the newer `head` it then
  // read made a "negative", i.e. huge, distance: a full ring. Here the "daemon" thread is
  // preempted at random points of its pushes while the "process" thread pushes and pops.
  // Every producer holds a credit per entry in the ring: it can never be really full.
  constexpr uint32_t kCap = 16;
  Ring r(kCap);
  RingCredits credits(kCap);
  std::atomic<uint64_t> daemon_pushes{0}, refused{0};
  uint64_t got = 0, overruns = 0, own = 0;
  race_preempted(
      [&](std::atomic<bool>& stop) {
        uint64_t head_cache = 0;
        for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          if (!credits.take()) continue;  // spin: a yield would make its switches voluntary
          const uint64_t e = cqe::make(1, 0, 0, 0, 1, i);
          // The three forms the daemon and libugni use: batch, single, single with a head copy.
          const bool ok =
              i % 3 == 0 ? r.view.push_n(&e, 1) == 1 : r.view.push(e, i % 3 == 1 ? &head_cache : nullptr);
          if (ok) daemon_pushes.fetch_add(1, std::memory_order_relaxed);
          else {
            refused.fetch_add(1, std::memory_order_relaxed);
            credits.give();
          }
        }
      },
      [&](std::atomic<bool>& stop) {
        for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          if (credits.take()) {
            if (r.view.push(cqe::make(1, 0, 0, 0, 2, i))) ++own;
            else {
              refused.fetch_add(1, std::memory_order_relaxed);
              credits.give();
            }
          }
          if (r.view.take_overrun()) ++overruns;
          while (r.view.pop()) {
            ++got;
            credits.give();
          }
        }
      },
      std::chrono::seconds(3));
  while (r.view.pop()) ++got;
  if (r.view.take_overrun()) ++overruns;
  MESSAGE(daemon_pushes.load() << " pushes by the preempted producer, " << own << " by the consumer's thread");
  CHECK(got == daemon_pushes.load() + own);
  CHECK(refused.load() == 0);
  CHECK(overruns == 0);
}
