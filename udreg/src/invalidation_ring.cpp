#include "invalidation_ring.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "address_filter.h"

namespace nicemu::udreg {

namespace {

constexpr uint64_t kPage = 4096;

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  timespec ts{0, 10 * 1000 * 1000};  // re-check every 10 ms whatever happens
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Zero-initialised static storage: usable from hooks that run before any constructor.
constinit InvalidationRing g_ring;
constinit AddressFilter g_filter;

}  // namespace

InvalidationRing& invalidation_ring() { return g_ring; }
AddressFilter& address_filter() { return g_filter; }

void InvalidationRing::push(uint64_t start, uint64_t end) {
  uint64_t index = head_.fetch_add(1, std::memory_order_acq_rel);
  // Makes the claim visible to whoever reads this slot's fields (see read_slot).
  std::atomic_thread_fence(std::memory_order_release);
  Slot& s = slots_[index % kCapacity];
  s.start.store(start, std::memory_order_relaxed);
  s.end.store(end, std::memory_order_relaxed);
  s.seq.store(index + 1, std::memory_order_release);
}

bool InvalidationRing::read_slot(uint64_t index, uint64_t* start, uint64_t* end) const {
  const Slot& s = slots_[index % kCapacity];
  // The producer claimed the slot (head moved past it) and is between two stores, unless it
  // was preempted there: spin, then yield, and give up after a while (a lost record).
  auto deadline = std::chrono::steady_clock::time_point{};
  for (uint32_t spins = 0;; ++spins) {
    uint64_t seq = s.seq.load(std::memory_order_acquire);
    if (seq == index + 1) break;
    if (seq > index + 1) return false;  // overwritten by a later lap
    if (spins < 1000) {
      cpu_relax();
      continue;
    }
    auto now = std::chrono::steady_clock::now();
    if (deadline == std::chrono::steady_clock::time_point{})
      deadline = now + std::chrono::milliseconds(100);
    else if (now > deadline)
      return false;
    sched_yield();
  }
  *start = s.start.load(std::memory_order_relaxed);
  *end = s.end.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  // A producer that overwrote the slot while we read it claimed index + kCapacity first.
  return head_.load(std::memory_order_acquire) - index <= kCapacity;
}

// The gate and its waiter count form a Dekker handshake (store one, load the other), hence
// seq_cst; the futex's own value check and its timeout cover the rest.
void InvalidationRing::gate_open() {
  gate_.fetch_sub(1, std::memory_order_seq_cst);
  if (gate_waiters_.load(std::memory_order_seq_cst) != 0) futex_wake_all(&gate_);
}

void InvalidationRing::wait_gate_open() const {
  for (uint32_t spins = 0;; ++spins) {
    uint32_t g = gate_.load(std::memory_order_acquire);
    if (g == 0) return;
    if (spins < 2000) {
      cpu_relax();
      continue;
    }
    gate_waiters_.fetch_add(1, std::memory_order_seq_cst);
    if (gate_.load(std::memory_order_seq_cst) == g) futex_wait(&gate_, g);
    gate_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void report_unmapped(uint64_t start, uint64_t end) {
  if (end <= start) return;
  uint64_t a = start & ~(kPage - 1);
  uint64_t b = end > UINT64_MAX - (kPage - 1) ? UINT64_MAX & ~(kPage - 1) : (end + kPage - 1) & ~(kPage - 1);
  if (!g_filter.may_overlap(a, b)) return;
  g_ring.push(a, b);
}

}  // namespace nicemu::udreg
