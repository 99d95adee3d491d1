// Operations on one MSGQ receive ring (layout and the producer/consumer contract in
// msgq_layout.h). Header-only and free of I/O: libugni runs producers (GNI_MsgqSend),
// consumers (GNI_MsgqProgress) and recycling on a mapped segment, the daemon initialises
// rings (and will feed messages from other hosts as a producer), unit tests run it all on
// plain memory.
//
// The ring memory is written by other processes: every loop is bounded, no value read from
// it is used as an index or a length without a check, and a consumer's copy is only trusted
// once its CAS published -> consumed succeeded.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>

#include "nicemu/abi/msgq_layout.h"

namespace nicemu::abi::msgq {

// Entry and payload are read while other parties may be recycling the slot (a copy is only
// trusted after the CAS that follows it succeeds), so both sides move them as relaxed
// atomic 8-byte words: a lost race yields a discarded copy, never undefined behaviour.
inline void store_words(char* dst, const char* src, uint32_t words) {
  for (uint32_t i = 0; i < words; ++i) {
    uint64_t v;
    std::memcpy(&v, src + 8 * i, 8);
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(dst + 8 * i)).store(v, std::memory_order_relaxed);
  }
}
inline void load_words(char* dst, char* src, uint32_t words) {
  for (uint32_t i = 0; i < words; ++i) {
    uint64_t v = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(src + 8 * i)).load(std::memory_order_relaxed);
    std::memcpy(dst + 8 * i, &v, 8);
  }
}

struct RingView {
  RingCtl* ctl = nullptr;
  char* slots = nullptr;
  uint32_t capacity = 0;   // from the caller's own attributes, never from the ring
  uint32_t slot_size = 0;

  static RingView at(char* ring, uint32_t capacity, uint32_t slot_size) {
    return RingView{reinterpret_cast<RingCtl*>(ring), ring + sizeof(RingCtl), capacity, slot_size};
  }
  bool valid() const { return ctl != nullptr; }
  uint32_t payload_capacity() const { return slot_size - static_cast<uint32_t>(sizeof(Slot)); }
  Slot* slot(uint64_t pos) const { return reinterpret_cast<Slot*>(slots + (pos % capacity) * slot_size); }
  char* payload(Slot* s) const { return reinterpret_cast<char*>(s) + sizeof(Slot); }
  static EntryHeader load_entry(Slot* s) {
    alignas(8) char buf[sizeof(EntryHeader)];
    load_words(buf, reinterpret_cast<char*>(&s->entry), sizeof(EntryHeader) / 8);
    EntryHeader e;
    std::memcpy(&e, buf, sizeof e);
    return e;
  }

  // Daemon, on a ring nobody uses yet: every slot free for its first position.
  void init() const {
    ctl->tail.store(0, std::memory_order_relaxed);
    ctl->head.store(0, std::memory_order_relaxed);
    ctl->voided.store(0, std::memory_order_relaxed);
    for (uint32_t i = 0; i < capacity; ++i) {
      Slot* s = slot(i);
      std::memset(&s->entry, 0, slot_size - sizeof(std::atomic<uint64_t>));
      s->word.store(slot_word(i, 0, kFree), std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_release);
  }

  enum class Push { kOk, kFull, kCorrupt };

  // Producer: claims the next position, writes header then message after the entry, and
  // publishes. `e.length` is set here. The caller checked hdr_len + msg_len <= kMaxMsgSize
  // and <= payload_capacity(). `pos`, if given, gets the position taken.
  Push push(EntryHeader e, const void* hdr, uint32_t hdr_len, const void* msg, uint32_t msg_len,
            uint32_t pid, uint64_t* pos = nullptr) const {
    uint64_t t = ctl->tail.load(std::memory_order_acquire);
    for (uint32_t tries = 0; tries < 4 * capacity + 1024; ++tries) {
      Slot* s = slot(t);
      uint64_t w = s->word.load(std::memory_order_acquire);
      const uint64_t p = word_pos(w);
      if (w == slot_word(t, 0, kFree)) {
        if (!s->word.compare_exchange_strong(w, slot_word(t, pid, kClaimed), std::memory_order_acq_rel,
                                             std::memory_order_acquire))
          continue;  // another producer took it: look again at the same position
        uint64_t expected = t;
        ctl->tail.compare_exchange_strong(expected, t + 1, std::memory_order_acq_rel, std::memory_order_relaxed);
        e.length = static_cast<uint8_t>(hdr_len + msg_len);
        alignas(8) char buf[sizeof(EntryHeader) + kMaxMsgSize + 8] = {};
        std::memcpy(buf, &e, sizeof e);
        if (hdr_len) std::memcpy(buf + sizeof e, hdr, hdr_len);
        if (msg_len) std::memcpy(buf + sizeof e + hdr_len, msg, msg_len);
        store_words(reinterpret_cast<char*>(&s->entry), buf, static_cast<uint32_t>(sizeof e + hdr_len + msg_len + 7) / 8);
        s->word.store(slot_word(t, pid, kPublished), std::memory_order_release);
        if (pos) *pos = t;
        return Push::kOk;
      }
      if (p == (t & kPosMask)) {  // claimed at t by another producer: help tail on
        uint64_t expected = t;
        t = ctl->tail.compare_exchange_strong(expected, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)
                ? t + 1
                : expected;
        continue;
      }
      uint64_t now = ctl->tail.load(std::memory_order_acquire);
      if (now != t) {  // our view of tail was stale
        t = now;
        continue;
      }
      // The previous lap still occupies position t: full. Anything else is garbage.
      return p == ((t - capacity) & kPosMask) ? Push::kFull : Push::kCorrupt;
    }
    return Push::kCorrupt;
  }

  // What take() found.
  enum class Take {
    kTaken,  // an entry for us: copied out and consumed
    kEmpty,  // the whole ring was looked at, from head to its first free slot or its end, and
             // nothing in it is published for us (also a ring too garbled to hold anything)
    kBusy,   // gave up: the ring kept moving under the scan (head moved again and again, or
             // the entries it found kept being taken from it). Entries for us may be there;
             // the caller must look again rather than treat the ring as empty (and sleep).
  };
  // Scans from a fresh head a few times at most, then reports kBusy.
  static constexpr int kTakeScans = 4;

  // Consumer: takes the first entry published for `is_mine(entry)`, in position order.
  // Copies the entry, and min(length, payload_capacity()) payload bytes rounded up to 8 into
  // `out_payload` (8-byte aligned, payload_capacity() bytes).
  //
  // The scan passes over claimed slots (a writer that died before publishing must not block
  // delivery), and that alone would break the order per sender: the scan is not a snapshot.
  // It may see position q claimed by sender S, then S publishes q, sends again, and the scan
  // reaches S's next entry at a later position p and takes it first. So a candidate found
  // past a claimed slot is confirmed by looking again, after the acquire load of its word,
  // at [first claimed, p): S published q before p, so that second look sees q published (or
  // already consumed); an entry there for us becomes the candidate, checked the same way.
  //
  // Every slot from head on holds its own position in an honest ring, except the slot at
  // head itself between a recycler's two CASes (already free for the next lap, head not yet
  // moved). A slot at another position means head moved since we read it (recycling went
  // past the scan: scan again from the new head), or, head unmoved, that half-done recycling
  // at head (helped on here as recycle() does, then scan again), or garbage (kEmpty: nothing
  // there can be delivered). The scans and the rechecks are bounded (the ring is written by
  // other processes); running out of them is kBusy, never kEmpty.
  template <typename IsMine>
  [[nodiscard]] Take take(IsMine&& is_mine, EntryHeader& out, void* out_payload) const {
    // Bounds the rechecks and lost CASes (each one is a slot state change an honest ring
    // makes once per lap), so a scribbled ring cannot keep us here.
    uint32_t events = 4 * capacity + 64;
    for (int scan = 0; scan < kTakeScans; ++scan) {
      const uint64_t h = ctl->head.load(std::memory_order_acquire);
      bool moved = false;
      uint64_t first_claimed = h + capacity;  // none seen yet
      for (uint64_t pos = h; pos < h + capacity; ++pos) {
        Slot* s = slot(pos);
        uint64_t w = s->word.load(std::memory_order_acquire);
        if (word_pos(w) != (pos & kPosMask)) {
          // (Seeing a slot recycled past pos, this acquire load of head sees head >= pos.)
          if (ctl->head.load(std::memory_order_acquire) != h) {
            moved = true;  // recycled since we read head
          } else if (pos == h && word_pos(w) == ((h + capacity) & kPosMask)) {
            uint64_t expected = h;  // freed for the next lap, head not moved yet: move it
            ctl->head.compare_exchange_strong(expected, h + 1, std::memory_order_acq_rel, std::memory_order_relaxed);
            moved = true;
          } else {
            return Take::kEmpty;  // garbage
          }
          break;
        }
        const SlotState st = word_state(w);
        if (st == kFree) return Take::kEmpty;  // nothing claimed from here on
        if (st == kClaimed && pos < first_claimed) first_claimed = pos;
        if (st != kPublished) continue; // being written (by another sender) or already taken
        EntryHeader e = load_entry(s);
        if (!is_mine(e)) continue;
        uint64_t cand = pos;
        for (uint64_t q = first_claimed; q < cand; ++q) {  // the second look (see above)
          Slot* sq = slot(q);
          uint64_t wq = sq->word.load(std::memory_order_acquire);
          if (word_pos(wq) != (q & kPosMask) || word_state(wq) != kPublished) continue;
          EntryHeader eq = load_entry(sq);
          if (!is_mine(eq)) continue;
          if (events-- == 0) return Take::kBusy;
          cand = q;  // earlier entry for us: it becomes the candidate, look again before it
          s = sq;
          w = wq;
          e = eq;
          q = first_claimed - 1;  // (wraps back to first_claimed on ++q)
        }
        uint32_t n = e.length < payload_capacity() ? e.length : payload_capacity();
        load_words(static_cast<char*>(out_payload), payload(s), (n + 7) / 8);
        if (!s->word.compare_exchange_strong(w, slot_word(cand, word_pid(w), kConsumed), std::memory_order_acq_rel,
                                             std::memory_order_relaxed)) {
          if (events-- == 0) return Take::kBusy;
          pos = cand;  // taken by another thread or voided: go on after it
          continue;
        }
        out = e;
        return Take::kTaken;
      }
      if (!moved) return Take::kEmpty;  // every slot looked at, none published for us
    }
    return Take::kBusy;
  }

  // Anybody: true if some published entry satisfies `pred` (for idle and release checks).
  template <typename Pred>
  bool any_published(Pred&& pred) const {
    const uint64_t h = ctl->head.load(std::memory_order_acquire);
    for (uint64_t pos = h; pos < h + capacity; ++pos) {
      Slot* s = slot(pos);
      uint64_t w = s->word.load(std::memory_order_acquire);
      if (word_pos(w) != (pos & kPosMask) || word_state(w) == kFree) return false;
      if (word_state(w) != kPublished) continue;
      if (pred(load_entry(s))) return true;
    }
    return false;
  }

  // Anybody: recycles consumed slots at head. On the way, voids an entry whose destination
  // is gone (`dst_live(entry)` false) and, if `claimer_gone` is given, a slot claimed by a
  // process that died before publishing. Returns the number of slots recycled.
  template <typename DstLive, typename ClaimerGone>
  uint32_t recycle(DstLive&& dst_live, ClaimerGone&& claimer_gone) const {
    uint32_t recycled = 0;
    for (uint32_t n = 0; n < 2 * capacity + 2; ++n) {
      const uint64_t h = ctl->head.load(std::memory_order_acquire);
      Slot* s = slot(h);
      uint64_t w = s->word.load(std::memory_order_acquire);
      const uint64_t p = word_pos(w);
      if (p == ((h + capacity) & kPosMask)) {  // freed already by a helper: move head only
        uint64_t expected = h;
        ctl->head.compare_exchange_strong(expected, h + 1, std::memory_order_acq_rel, std::memory_order_relaxed);
        continue;
      }
      if (p != (h & kPosMask)) return recycled;  // head moved meanwhile, or garbage
      switch (word_state(w)) {
        case kFree:
          return recycled;
        case kConsumed: {
          // A producer that died between claiming and moving tail left tail == h. (Look
          // before the CAS: a CAS takes the producers' cache line even when it fails.)
          uint64_t expected = h;
          if (ctl->tail.load(std::memory_order_acquire) == h)
            ctl->tail.compare_exchange_strong(expected, h + 1, std::memory_order_acq_rel, std::memory_order_relaxed);
          expected = h;
          if (s->word.compare_exchange_strong(w, slot_word(h + capacity, 0, kFree), std::memory_order_acq_rel,
                                              std::memory_order_relaxed)) {
            ++recycled;
            ctl->head.compare_exchange_strong(expected, h + 1, std::memory_order_acq_rel, std::memory_order_relaxed);
          }
          continue;
        }
        case kPublished: {
          if (dst_live(load_entry(s))) return recycled;
          if (s->word.compare_exchange_strong(w, slot_word(h, word_pid(w), kConsumed), std::memory_order_acq_rel,
                                              std::memory_order_relaxed))
            ctl->voided.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        case kClaimed:
          if (!claimer_gone(word_pid(w))) return recycled;
          if (s->word.compare_exchange_strong(w, slot_word(h, 0, kConsumed), std::memory_order_acq_rel,
                                              std::memory_order_relaxed))
            ctl->voided.fetch_add(1, std::memory_order_relaxed);
          continue;
      }
    }
    return recycled;
  }
};

// For recycle() callers that must not look at claimers (receivers on their fast path).
inline bool claimer_unknown(uint32_t) { return false; }

}  // namespace nicemu::abi::msgq
