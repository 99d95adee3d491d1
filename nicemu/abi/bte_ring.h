// BTE submission ring: how libugni hands GNI_PostRdma requests to its daemon's BTE engine
// without waiting for a reply. One ring per attached CDM, allocated by the daemon in the
// CDM's region heap on the first RDMA post (control op kBteOpen, which also passes the
// node's doorbell eventfd). Layout defined once here for the library and the daemon.
//
// Index contract (multi-producer: the owner's threads; single consumer: the daemon's BTE
// dispatcher):
//  - a producer claims position p by CAS on `tail` only while tail - head < capacity (a full
//    ring is GNI_RC_ERROR_RESOURCE, the API's "queue full, retry later"), writes the request
//    into slot p & mask, then publishes it by storing slot.seq = p + 1 (release);
//  - the consumer takes position `head` when slot(head).seq == head + 1 (acquire), copies the
//    request out, then publishes head + 1 (release), handing the slot back to producers;
//  - `done` counts requests the daemon has completed (events pushed, or dropped), published
//    with release after the completion; done == tail means nothing of the ring is in
//    flight, which is when libugni may run a same-host transfer itself (one copy) without
//    overtaking an earlier post of the CDM;
//  - doorbell: an idle consumer stores armed = 1 (seq_cst), re-checks the ring, then sleeps
//    in read() on the eventfd. A producer publishes, fences seq_cst, and only if `armed` is 1
//    exchanges it to 0 and writes the eventfd; so a busy daemon costs producers no system
//    call, and either the producer sees `armed` or the consumer's re-check sees the request.
//
// The ring lives in the read-write heap: everything in it is untrusted input for the
// daemon, which copies a request out and validates every field against the read-only
// registration tables of the initiator and the target before it moves a byte.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nicemu::abi {

inline constexpr uint32_t kBteRingCapacity = 1024;  // power of two
inline constexpr uint32_t kBteNoTid = 0xFFFFFFFF;  // no local event: nothing to report

// The uGNI values the engine interprets (it does not include gni_pub.h; libugni
// static_asserts that they agree): GNI_CQMODE_* bits of cq_mode and the CDM mode that
// confines a CDM to one channel.
inline constexpr uint16_t kBteEventLocal = 0x1;   // GNI_CQMODE_LOCAL_EVENT
inline constexpr uint16_t kBteEventGlobal = 0x2;  // GNI_CQMODE_GLOBAL_EVENT
inline constexpr uint16_t kBteEventRemote = 0x4;  // GNI_CQMODE_REMOTE_EVENT
inline constexpr uint32_t kBteSingleChannelMode = 0x40;  // GNI_CDM_MODE_BTE_SINGLE_CHANNEL

enum BteOp : uint16_t {
  kBtePut = 1,  // initiator's local memory -> target's registered memory (GNI_POST_RDMA_PUT)
  kBteGet = 2,  // target's registered memory -> initiator's local memory (GNI_POST_RDMA_GET)
};

// One GNI_PostRdma, as captured at post time (event ids are the EP's values then, §11.4).
struct BteRequest {
  uint16_t op;                // BteOp
  uint16_t cq_mode;           // GNI_CQMODE_* bits
  uint16_t rdma_mode;         // GNI_RDMAMODE_* bits
  uint16_t dlvr_mode;
  uint32_t src_cq;            // initiator's CQ slot for local events, or kNoCq
  uint32_t tid;               // CQE tid of the local events, or kBteNoTid
  uint32_t local_event;       // id of the local events
  uint32_t remote_event;      // id of the remote event
  uint32_t ep_id;             // initiator EP: one EP's requests run in posting order
  uint32_t remote_nic;        // target NIC address (EP binding); the target CDM is the
  uint32_t reserved1;         // memory domain of remote_qword1
  uint32_t reserved0;
  uint64_t local_addr;
  uint64_t local_qword1;      // initiator's registration of [local_addr, +length)
  uint64_t local_qword2;
  uint64_t remote_addr;
  uint64_t remote_qword1;     // target's registration of [remote_addr, +length)
  uint64_t remote_qword2;
  uint64_t length;
};
static_assert(sizeof(BteRequest) == 96);
static_assert(offsetof(BteRequest, local_addr) == 40 && offsetof(BteRequest, length) == 88);

struct BteSlot {
  std::atomic<uint32_t> seq;  // position + 1 once published
  uint32_t reserved0;
  BteRequest req;
  uint64_t reserved[3];
};
static_assert(sizeof(BteSlot) == 128);
static_assert(offsetof(BteSlot, req) == 8);

struct BteRingCtl {
  alignas(64) std::atomic<uint64_t> tail;   // producers
  alignas(64) std::atomic<uint64_t> head;   // consumer
  alignas(64) std::atomic<uint32_t> armed;  // consumer asleep: the next producer rings
  uint32_t reserved0;
  std::atomic<uint64_t> done;               // consumer: requests completed
  uint32_t reserved[12];
};
static_assert(sizeof(BteRingCtl) == 192);
static_assert(offsetof(BteRingCtl, head) == 64 && offsetof(BteRingCtl, armed) == 128 &&
              offsetof(BteRingCtl, done) == 136);

constexpr uint64_t bte_ring_bytes(uint32_t capacity) {
  return sizeof(BteRingCtl) + uint64_t{capacity} * sizeof(BteSlot);
}

struct BteRingView {
  BteRingCtl* ctl = nullptr;
  BteSlot* slots = nullptr;
  uint64_t mask = 0;  // capacity - 1, from the daemon's reply (library) or its own record

  bool valid() const { return ctl != nullptr; }

  enum class Push { kOk, kFull, kRing };  // kRing: published, and the consumer must be woken

  // Producer.
  Push push(const BteRequest& r) const {
    uint64_t t = ctl->tail.load(std::memory_order_relaxed);
    for (;;) {
      if (t - ctl->head.load(std::memory_order_acquire) > mask) {
        // Full only on head read between two equal reads of tail: preempted between the
        // two loads while other threads pushed and the daemon consumed, a thread compared
        // an old tail with a newer head (as CqRingView::snapshot).
        const uint64_t before = ctl->tail.load(std::memory_order_acquire);
        const uint64_t h = ctl->head.load(std::memory_order_acquire);
        t = ctl->tail.load(std::memory_order_relaxed);
        if (t != before) continue;
        if (t - h > mask) return Push::kFull;
      }
      if (ctl->tail.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
    }
    BteSlot& s = slots[t & mask];
    s.req = r;
    s.seq.store(static_cast<uint32_t>(t + 1), std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ctl->armed.load(std::memory_order_relaxed) != 0 && ctl->armed.exchange(0, std::memory_order_acq_rel) != 0)
      return Push::kRing;
    return Push::kOk;
  }

  // Consumer: copies the request at position `head` (the consumer's private copy: the
  // shared `head` word is only ever written by it, never read back) into `out` and
  // advances. False when none is published there yet.
  bool pop(uint64_t& head, BteRequest& out) const {
    const BteSlot& s = slots[head & mask];
    if (s.seq.load(std::memory_order_acquire) != static_cast<uint32_t>(head + 1)) return false;
    out = s.req;
    ++head;
    ctl->head.store(head, std::memory_order_release);
    return true;
  }

  // Consumer, before sleeping: arms the doorbell; true if a request is published at `head`
  // meanwhile (do not sleep). Looks at the slot, not at `tail`: a producer that claimed a
  // slot and died before publishing must not keep the consumer awake.
  bool arm(uint64_t head) const {
    ctl->armed.store(1, std::memory_order_seq_cst);
    return slots[head & mask].seq.load(std::memory_order_seq_cst) == static_cast<uint32_t>(head + 1);
  }
};

}  // namespace nicemu::abi
