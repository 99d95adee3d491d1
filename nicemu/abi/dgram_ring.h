// Datagram completion ring: how the daemon's matcher hands finished session-management
// datagrams (GNI_EpPostData*) back to libugni without a control round trip per test or
// probe. One ring per attached CDM, allocated by the daemon in the CDM's region heap on
// the library's first datagram post (control op kDgramOpen). Posts go to the daemon as
// one-way control messages (kDgramSubmit); the library keeps its finished datagrams in
// process memory after taking them off this ring, so GNI_EpPostDataTest*, the probes and
// the waits read no socket.
//
// Index contract (single producer: the daemon; single consumer: the owner, whose threads
// serialise on a library lock):
//  - the producer writes the event into slot tail & mask only while tail - head < capacity,
//    then publishes tail + 1 (release), then bumps and wakes the region's `dgram_seq`;
//  - the consumer reads `tail` (acquire), copies the events in [head, tail) out, then
//    publishes the new head (release), handing the slots back;
//  - full ring: the daemon keeps further events in a private backlog, stores stalled = 1
//    (seq_cst) and re-checks head; a consumer that advanced head fences seq_cst and, if it
//    finds `stalled` set, clears it and sends kDgramKick, on which the daemon moves its
//    backlog into the ring. Either the daemon's re-check sees the new head or the consumer
//    sees `stalled`: no event is held back for ever.
//
// The ring lives in the read-write heap, so the daemon treats `head` as untrusted (a
// head behind by more than the capacity, or ahead of tail, reads as "full") and the
// library bounds-checks every event it copies out (data_len).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nicemu::abi {

inline constexpr uint32_t kDgramRingCapacity = 256;  // power of two

// One finished datagram: completed (with the peer's data) or terminated (cancelled).
struct DgramEvent {
  uint64_t lib_seq;    // the library's name for the post (DgramSubmit.lib_seq)
  uint64_t ep;         // the library's name for the endpoint (DgramSubmit.ep)
  uint64_t id;         // datagram id, valid if has_id
  uint32_t has_id;
  uint32_t state;      // gni_post_state_t: COMPLETED or TERMINATED
  uint32_t peer_addr;  // COMPLETED: who matched it
  uint32_t peer_inst;
  uint16_t data_len;   // the peer's bytes (may exceed the poster's buf_size: SIZE_ERROR)
  uint16_t reserved[3];
  uint8_t data[128];   // GNI_DATAGRAM_MAXSIZE
};
static_assert(sizeof(DgramEvent) == 176);

struct DgramRingCtl {
  alignas(64) std::atomic<uint64_t> tail;     // daemon
  alignas(64) std::atomic<uint64_t> head;     // library
  alignas(64) std::atomic<uint32_t> stalled;  // daemon holds events back; see above
  uint32_t reserved[15];
};
static_assert(sizeof(DgramRingCtl) == 192);
static_assert(offsetof(DgramRingCtl, head) == 64 && offsetof(DgramRingCtl, stalled) == 128);

constexpr uint64_t dgram_ring_bytes(uint32_t capacity) {
  return sizeof(DgramRingCtl) + uint64_t{capacity} * sizeof(DgramEvent);
}

struct DgramRingView {
  DgramRingCtl* ctl = nullptr;
  DgramEvent* events = nullptr;
  uint64_t mask = 0;  // capacity - 1

  bool valid() const { return ctl != nullptr; }

  // Producer. False when the ring is full (or its head was scribbled on).
  bool push(const DgramEvent& e) const {
    uint64_t t = ctl->tail.load(std::memory_order_relaxed);
    uint64_t h = ctl->head.load(std::memory_order_acquire);
    if (t - h > mask || h > t) return false;
    events[t & mask] = e;
    ctl->tail.store(t + 1, std::memory_order_release);
    return true;
  }

  // Consumer: calls f(event) for every published event (a private copy, not yet checked)
  // and hands the slots back. Returns the number taken.
  template <typename F>
  uint64_t drain(F&& f) const {
    uint64_t h = ctl->head.load(std::memory_order_relaxed);
    uint64_t t = ctl->tail.load(std::memory_order_acquire);
    if (t - h > mask + 1) return 0;  // a tail nobody honest wrote
    for (uint64_t i = h; i != t; ++i) {
      DgramEvent e = events[i & mask];
      f(e);
    }
    if (t != h) ctl->head.store(t, std::memory_order_release);
    return t - h;
  }

  // Consumer, after a drain that took events: true if the daemon is holding events back
  // and must be kicked (clears the flag).
  bool take_stall() const {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return ctl->stalled.load(std::memory_order_relaxed) != 0 && ctl->stalled.exchange(0) != 0;
  }
};

}  // namespace nicemu::abi
