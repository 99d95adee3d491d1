// Operations on a CQ ring (layout and index contract in shm_layout.h). Header-only: used by
// libugni (consumer, local and same-host producers) and the daemon (producer of errors).
#pragma once
#include <algorithm>
#include <cstddef>
#include "nicemu/abi/futex.h"
#include "nicemu/abi/shm_layout.h"

namespace nicemu::abi {

struct CqRingView {
  static constexpr uint32_t kMaxPushTries = 1u << 16;
  // How long a consumer sleeps when the ring is not quiet() but its entry is not there yet:
  // the producer stores it within nanoseconds and may have missed our `waiters` (wake()).
  static constexpr uint64_t kUnquietNapNs = 50'000;
  CqRingCtl* ctl = nullptr;
  std::atomic<uint64_t>* entries = nullptr;
  uint64_t mask = 0;  // capacity - 1, taken from the daemon-written CqDesc, never from ctl

  bool valid() const { return ctl != nullptr; }

  // Reads head between two reads of tail into `t` and `h`; true when tail did not move
  // in between, so that t - h is how full the ring was at one moment. A full ring is
  // decided only on such a pair: a producer preempted between its read of tail and its
  // read of head (or the other way round) while others pushed and the consumer popped
  // got an old tail with a newer head (a "negative", i.e. huge, distance) or an old head
  // with a newer tail, and flagged an overrun of a ring that was never full (F4,
  // docs/security.md: libdmapp, which keeps its posts within its CQ's capacity, saw
  // "completion queue overrun"). On false the pair is still usable for room: the head
  // is not newer than the tail.
  bool snapshot(uint64_t& t, uint64_t& h) const {
    const uint64_t before = ctl->tail.load(std::memory_order_acquire);
    h = ctl->head.load(std::memory_order_acquire);
    t = ctl->tail.load(std::memory_order_relaxed);
    return t == before;
  }

  // Producer side. Returns false (and flags overrun) when the ring is full. A producer
  // that pushes often passes `head_cache`, its private copy of the consumer's head: head
  // only grows, so a stale copy can only make the ring look fuller, and the shared line
  // is read again only then (it is otherwise a cross-core miss on every push).
  // The ring is in its owner's heap, so the owner can keep rewriting `tail`: the CAS is
  // retried a bounded number of times (far beyond real contention), then the entry is
  // dropped as on overrun, so a hostile owner cannot hold a peer or the daemon here.
  // One entry is every SMSG send's case (twice per message): push_n's batch arithmetic
  // was a third of the send's instructions, so it has a path of its own with the same rules.
  bool push(uint64_t entry, uint64_t* head_cache = nullptr) const {
    const uint64_t cap = mask + 1;
    uint64_t t = ctl->tail.load(std::memory_order_relaxed);
    uint64_t h = head_cache ? *head_cache : 0;
    for (uint32_t tries = 0;; ++tries) {
      if (tries == kMaxPushTries) {
        ctl->overrun.store(1, std::memory_order_release);
        return false;
      }
      if (t - h >= cap) {  // full, or a stale (or no) copy of head: read the shared line
        const bool still = snapshot(t, h);
        if (head_cache) *head_cache = h;
        if (!still) continue;  // tail moved meanwhile: look again with the newer pair
        if (t - h >= cap) {
          CqRingCtl* const c = ctl;  // may be freed once overrun is seen (as below)
          c->overrun.store(1, std::memory_order_seq_cst);
          wake(c);
          return false;
        }
      }
      // seq_cst: the reservation is what a sleeping consumer checks (quiet()), see wake().
      if (ctl->tail.compare_exchange_weak(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) break;
    }
    // Nothing of this view is read once the entry is visible: a consumer that sees it may
    // destroy the CQ and free the view (the ctl block itself stays mapped with its region).
    CqRingCtl* const c = ctl;
    entries[t & mask].store(entry, std::memory_order_release);
    wake(c);
    return true;
  }

  // Pushes n entries in order with one reservation of the tail and one wake: a producer
  // delivering a batch touches the shared lines once, not n times. Returns how many went
  // in; the rest found the ring full and are dropped with overrun flagged, as by push.
  size_t push_n(const uint64_t* e, size_t n, uint64_t* head_cache = nullptr) const {
    if (n == 0) return 0;
    const uint64_t cap = mask + 1;
    auto room = [cap](uint64_t t, uint64_t h) { return t - h <= cap ? cap - (t - h) : 0; };
    uint64_t t = ctl->tail.load(std::memory_order_relaxed);
    uint64_t h = head_cache ? *head_cache : 0;
    uint64_t k = 0;
    for (uint32_t tries = 0;; ++tries) {
      if (tries == kMaxPushTries) {
        ctl->overrun.store(1, std::memory_order_release);
        return 0;
      }
      if (room(t, h) < n) {
        const bool still = snapshot(t, h);
        if (head_cache) *head_cache = h;
        if (!still) continue;
      }
      k = std::min<uint64_t>(n, room(t, h));
      if (k == 0) {
        CqRingCtl* const c = ctl;  // may be freed once overrun is seen (as below)
        c->overrun.store(1, std::memory_order_seq_cst);
        wake(c);
        return 0;
      }
      // seq_cst: the reservation is what a sleeping consumer checks (quiet()), see wake().
      if (ctl->tail.compare_exchange_weak(t, t + k, std::memory_order_seq_cst, std::memory_order_relaxed)) break;
    }
    CqRingCtl* const c = ctl;  // as in push: the view may be freed once an entry is visible
    std::atomic<uint64_t>* const slots = entries;
    const uint64_t m = mask;
    for (uint64_t i = 0; i < k; ++i) slots[(t + i) & m].store(e[i], std::memory_order_release);
    if (k < n) c->overrun.store(1, std::memory_order_seq_cst);
    wake(c);
    return k;
  }

  // No fence: a consumer about to sleep raises `waiters` (seq_cst RMW) and then checks
  // quiet(), which reads `tail`; a producer reserved its entry with a seq_cst RMW of `tail`
  // (or flagged overrun with a seq_cst store) before this seq_cst load. In the single total
  // order either the consumer sees the reservation and does not sleep, or we see it waiting.
  // (Checking the entry instead would need a full fence between its store and this load:
  // on x86 an mfence per push, two per SMSG message.)
  void wake() const { wake(ctl); }
  static void wake(CqRingCtl* c) {
    if (c->waiters.load(std::memory_order_seq_cst) != 0) {
      c->futex.fetch_add(1, std::memory_order_release);
      futex_wake_all(&c->futex);
    }
  }

  // Consumer side (single consumer). 0 = empty.
  uint64_t peek() const {
    uint64_t h = ctl->head.load(std::memory_order_relaxed);
    return entries[h & mask].load(std::memory_order_acquire);
  }
  uint64_t pop() const {
    uint64_t h = ctl->head.load(std::memory_order_relaxed);
    uint64_t e = entries[h & mask].load(std::memory_order_acquire);
    if (e == 0) return 0;
    entries[h & mask].store(0, std::memory_order_relaxed);
    ctl->head.store(h + 1, std::memory_order_release);
    return e;
  }
  bool take_overrun() const {
    if (ctl->overrun.load(std::memory_order_acquire) == 0) return false;
    return ctl->overrun.exchange(0, std::memory_order_acq_rel) != 0;
  }
  bool has_overrun() const { return ctl->overrun.load(std::memory_order_acquire) != 0; }
  // The consumer, after raising `waiters` and before sleeping: nothing reserved that it has
  // not taken (an entry still being written counts: the producer is about to store it),
  // and no overrun. See wake().
  bool quiet() const {
    return ctl->tail.load(std::memory_order_seq_cst) == ctl->head.load(std::memory_order_relaxed) &&
           ctl->overrun.load(std::memory_order_seq_cst) == 0;
  }
};

}  // namespace nicemu::abi
