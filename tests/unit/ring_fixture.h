// A ring of the shared-memory ABI in plain memory, for the ring tests: its control block,
// `cap` slots (a power of two) and the view producers and consumers use. Slots names the
// view's pointer to the slot array (BteRingView::slots, CqRingView::entries, ...).
#pragma once
#include <cstdint>
#include <vector>

template <typename Ctl, typename Slot, typename View, auto Slots>
struct RingFixture {
  explicit RingFixture(uint32_t cap) : slots(cap) {
    view.ctl = &ctl;
    view.*Slots = slots.data();
    view.mask = cap - 1;
  }
  Ctl ctl{};
  std::vector<Slot> slots;
  View view;
};

// Runs `slow` on CPU 0 beside a thread that only spins, so that the scheduler preempts it
// at arbitrary points (between two loads of a push, say), and `fast` on another CPU, both
// with a `stop` flag, for `run`. The ring tests use it to catch a producer acting on
// indices that others moved while it was off the CPU.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

template <typename Slow, typename Fast>
void race_preempted(Slow slow, Fast fast, std::chrono::milliseconds run) {
  std::atomic<bool> stop{false};
  auto pin = [](std::thread& t, unsigned cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(t.native_handle(), sizeof set, &set);
  };
  std::thread a([&] { slow(stop); });
  std::thread hog([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  std::thread b([&] { fast(stop); });
  pin(a, 0);
  pin(hog, 0);
  pin(b, std::thread::hardware_concurrency() > 1 ? 1 : 0);
  std::this_thread::sleep_for(run);
  stop = true;
  a.join();
  hog.join();
  b.join();
}

// One credit per entry a producer may have in the ring: producers that hold one each can
// never find the ring really full, so a "full" answer is the race under test.
struct RingCredits {
  explicit RingCredits(int64_t n) : left(n) {}
  bool take() {
    if (left.fetch_sub(1, std::memory_order_acq_rel) > 0) return true;
    left.fetch_add(1, std::memory_order_acq_rel);
    return false;
  }
  void give() { left.fetch_add(1, std::memory_order_acq_rel); }
  std::atomic<int64_t> left;
};
