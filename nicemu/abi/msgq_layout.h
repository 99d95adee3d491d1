// Layout of a node's MSGQ segment (GNI_Msgq*, fact sheet §15), defined once for the daemon
// and libugni. One segment per (emulated node, protection domain): the node's daemon creates
// it at the first GNI_MsgqInit of the domain, hands it (a memfd over the control socket) to
// every local instance that joins, and to senders on other nodes that look it up. It holds
// one receive ring per connected remote node, shared by all local receivers: memory grows
// with the number of connected nodes, not with the number of peers.
//
//   0          SegmentHeader                \  read-only section: written by the daemon only,
//   4096       Member[nloc_insts]            |  mapped PROT_READ by everybody else, so
//              RxConn[num_msgq_eps]          |  membership and connections cannot be forged
//              TxConn[num_msgq_eps]         /
//   ro_size    MemberRw[nloc_insts]            read-write section: receivers' futex words,
//              TxCredit[num_msgq_eps]          credits of the send connections to other hosts,
//              Ring[num_msgq_eps]              receive rings (RingCtl, then the slots)
//
// Offsets follow from the attributes alone (segment_layout), so each party computes them
// itself and only compares the header's copy.
//
// Read-only tables. The daemon changes an entry only through its `state` and `gen` words:
// taking a slot bumps `gen`, fills the fields, then stores state = live (release); freeing
// it stores state = free (gen stays). A reader loads gen (acquire), state and the fields,
// then gen again, and trusts what it read only if gen did not move and the entry is live.
//
// Ring contract (receive ring i: messages from the instances of node RxConn[i].remote_pe to
// the instances of this node). Each slot starts with a 64-bit `word`: position (40 bits,
// compared modulo 2^40) | claimer pid (22 bits) | state (2 bits):
//  - kFree: position p may be claimed. kClaimed: a producer is writing it. kPublished: it
//    holds an entry for one receiver. kConsumed: taken or voided, not yet recycled;
//  - producer (a sender on the remote node; later also the daemon, feeding messages that
//    arrive from other hosts): reads tail t; if slot(t).word == free(t) it CASes the word to
//    claimed(t, pid) (acq_rel), CASes tail t -> t+1, writes entry and payload, then stores
//    published(t) (release). A slot claimed by another producer at t: help tail on. A slot
//    still holding position t - capacity: the ring is full (GNI_RC_NOT_DONE);
//  - consumer (each receiver of this node, for the entries addressed to it): scans from head
//    while slots hold their own position, passing over claimed slots, copies an entry
//    published for it out (after an acquire load of the word), then CASes published ->
//    consumed; only the CAS winner delivers its copy. An entry found past a claimed slot is
//    taken only after the claimed slots before it were looked at again (after that acquire
//    load) and hold nothing for this receiver: a sender publishes each entry before it claims
//    its next, so the messages of one sender to one receiver arrive in the order they were
//    sent;
//  - recycling (anybody, at head only): a consumed slot is CASed to free(head + capacity),
//    then head is CASed to head + 1 (after helping tail past head). A helper that finds the
//    slot already freed only moves head. On the way, an entry for a member that left or
//    died is voided (CAS to consumed), and so is a slot whose claimer died before
//    publishing: a dead party cannot block a ring;
//  - across hosts (docs/fabric.md, "MSGQ across hosts") the producer of a ring is the
//    target's daemon. Senders cannot see that ring, so each send connection (TxConn i) to a
//    node of another host has credits, TxCredit i: a sender takes one (CAS of `sent` while
//    sent - returned < smsg_q_sz, else GNI_RC_NOT_DONE), the sender's daemon adds to
//    `returned` what the target's daemon reports recycled. A ring never holds more than
//    its depth of one node's messages, as on one host;
//  - wakeups: a receiver about to sleep reads MemberRw.futex, increments `waiters` (seq_cst),
//    scans again, then futex-waits; a producer publishes, fences seq_cst, and only if
//    `waiters` is non-zero bumps `futex` and wakes it, so the non-blocking path makes no
//    system call. The daemon bumps a member's futex when it leaves and every futex when the
//    segment dies.
//
// Everything in the read-write section is untrusted input: a receiver copies an entry out,
// then checks its length and source node against its own attributes and the read-only
// tables; a malformed entry is counted and dropped.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nicemu::abi::msgq {

inline constexpr uint32_t kSegmentMagic = 0x4D534751;  // "MSGQ"
inline constexpr uint16_t kVersion = 3;  // 2: tables and rings in two memfds, tables sealed (region_map.h); 3: TxCredit
inline constexpr uint64_t kPageSize = 4096;

inline constexpr uint32_t kMaxMsgSize = 128;       // GNI_MSGQ_MSG_SZ_MAX: header + message
inline constexpr uint32_t kMaxLocalInsts = 128;    // GNI_MSGQ_NODE_INSTS_MAX
inline constexpr uint32_t kMaxQueueSlots = 65536;  // smsg_q_sz
inline constexpr uint32_t kMaxConns = 65536;       // num_msgq_eps
inline constexpr uint32_t kModeBlocking = 0x01;    // GNI_MSGQ_MODE_BLOCKING
inline constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 30;

// gni_msgq_attr_t with fixed-width fields. Every local instance must pass the same values.
struct Attrs {
  uint32_t max_msg_sz;
  uint32_t smsg_q_sz;     // slots of each receive ring
  uint32_t rcv_pool_sz;   // recorded and compared; this design needs no receive pool
  uint32_t num_msgq_eps;  // connections (remote nodes) the segment has room for
  uint32_t nloc_insts;    // local instances that may join
  uint32_t modes;         // GNI_MSGQ_MODE_* bits
  uint32_t rcv_cq_sz;     // recorded and compared; messages are not reported through a CQ
  uint32_t reserved;
  bool operator==(const Attrs&) const = default;
};
static_assert(sizeof(Attrs) == 32);

enum SegmentState : uint32_t {
  kSegmentAlive = 1,
  kSegmentDead = 2,     // the last local member left or died: reclaimed by the daemon
  kSegmentNicDown = 3,  // the daemon shut down
};

struct SegmentHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  std::atomic<uint32_t> state;  // SegmentState
  uint32_t nic_addr;
  uint32_t ptag;
  uint32_t cookie;
  uint64_t segment_id;          // unique per daemon; mappings are keyed on it
  Attrs attrs;
  uint64_t total_size;
  uint64_t ro_size;
};
static_assert(sizeof(SegmentHeader) <= kPageSize);
static_assert(offsetof(SegmentHeader, state) == 8 && offsetof(SegmentHeader, segment_id) == 24);
static_assert(offsetof(SegmentHeader, attrs) == 32 && offsetof(SegmentHeader, total_size) == 64);
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

enum EntryState : uint32_t { kEntryFree = 0, kEntryLive = 1 };

// A local instance that called GNI_MsgqInit (read-only section).
struct Member {
  std::atomic<uint32_t> gen;    // bumped when the slot is taken; entries carry it
  std::atomic<uint32_t> state;  // EntryState
  uint32_t inst_id;
  uint32_t pid;
  uint64_t attach_id;           // the CDM it joined through (daemon's bookkeeping)
  uint64_t reserved;
};
static_assert(sizeof(Member) == 32);

// Receive side of a connection (GNI_MsgqGetConnAttrs): ring i takes messages from the
// instances of node `remote_pe`.
struct RxConn {
  std::atomic<uint32_t> gen;
  std::atomic<uint32_t> state;  // EntryState
  uint32_t remote_pe;
  uint32_t reserved;
};
static_assert(sizeof(RxConn) == 16);

// Send side (GNI_MsgqConnect): local instances may send to the instances of `remote_pe`.
struct TxConn {
  std::atomic<uint32_t> gen;
  std::atomic<uint32_t> state;  // EntryState
  uint32_t remote_pe;
  uint32_t remote_insts;        // num_insts of the attributes it was connected with
  uint64_t reserved[2];
};
static_assert(sizeof(TxConn) == 32);

// Per member, read-write. Senders read `waiters` on every send: the member's statistics live
// on another cache line so that counting deliveries does not steal it from them.
struct MemberRw {
  alignas(64) std::atomic<uint32_t> futex;
  std::atomic<uint32_t> waiters;
  alignas(64) std::atomic<uint64_t> delivered;  // statistics, written by the member itself
  std::atomic<uint64_t> malformed;
  uint64_t reserved[6];
};
static_assert(sizeof(MemberRw) == 128 && offsetof(MemberRw, delivered) == 64);

// Credits of send connection i (TxConn i) when its node is on another host. The daemon
// sets returned = sent when it (re)connects or the peer is lost, and only ever adds
// otherwise. Members can forge it: that only lets this node's senders overrun their own
// ring at the target, whose daemon then holds the excess (bounded, counted).
struct TxCredit {
  alignas(64) std::atomic<uint64_t> sent;  // taken by senders
  std::atomic<uint64_t> returned;          // given back by the daemon
  // MSGQ over the ofi fabric (ugni/src/msgq_ofi.h): the last member of the target node our
  // senders lost, (a hash of its address << 32) | the low 32 bits of `sent` when the first of
  // them gave the credits back; 0 none. Written by CAS; the daemon never touches it.
  std::atomic<uint64_t> lost;
  uint64_t reserved[5];
};
static_assert(sizeof(TxCredit) == 64 && offsetof(TxCredit, returned) == 8 && offsetof(TxCredit, lost) == 16);

struct RingCtl {
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> voided;  // entries dropped for a departed receiver or a dead writer
  uint64_t reserved[7];
};
static_assert(sizeof(RingCtl) == 192);
static_assert(offsetof(RingCtl, head) == 64 && offsetof(RingCtl, voided) == 128);

// The entry a producer writes after claiming a slot (payload follows the slot header).
struct EntryHeader {
  uint32_t dst_inst;
  uint32_t dst_gen;     // Member.gen of the destination when the message was sent
  uint32_t src_inst;
  uint32_t src_pe;
  uint16_t dst_member;  // index in the member table
  uint8_t length;       // header + message bytes
  uint8_t tag;
  uint32_t reserved;
};
static_assert(sizeof(EntryHeader) == 24);

struct Slot {
  std::atomic<uint64_t> word;
  EntryHeader entry;
};
static_assert(sizeof(Slot) == 32 && offsetof(Slot, entry) == 8);

enum SlotState : uint64_t { kFree = 0, kClaimed = 1, kPublished = 2, kConsumed = 3 };
inline constexpr unsigned kPosShift = 24;
inline constexpr uint64_t kPosMask = (uint64_t{1} << 40) - 1;
inline constexpr uint64_t kPidMask = (uint64_t{1} << 22) - 1;  // pid_max is at most 2^22

constexpr uint64_t slot_word(uint64_t pos, uint64_t pid, SlotState s) {
  return ((pos & kPosMask) << kPosShift) | ((pid & kPidMask) << 2) | s;
}
constexpr uint64_t word_pos(uint64_t w) { return w >> kPosShift; }
constexpr uint32_t word_pid(uint64_t w) { return static_cast<uint32_t>((w >> 2) & kPidMask); }
constexpr SlotState word_state(uint64_t w) { return static_cast<SlotState>(w & 3); }
static_assert(word_pos(slot_word(kPosMask + 5, 7, kPublished)) == 4);
static_assert(word_pid(slot_word(9, 4194303, kClaimed)) == 4194303);
static_assert(word_state(slot_word(9, 4194303, kConsumed)) == kConsumed);

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A slot: word, entry header, then the payload rounded up to a cache line.
constexpr uint32_t slot_size(uint32_t max_msg_sz) {
  return static_cast<uint32_t>(align_up(sizeof(Slot) + max_msg_sz, 64));
}

struct Layout {
  uint64_t members_offset, rx_offset, tx_offset, ro_size;
  uint64_t member_rw_offset, tx_credit_offset, rings_offset, ring_bytes, total_size;
  uint32_t slot_size;
};

constexpr Layout segment_layout(const Attrs& a) {
  Layout l{};
  l.members_offset = kPageSize;
  l.rx_offset = align_up(l.members_offset + uint64_t{a.nloc_insts} * sizeof(Member), 64);
  l.tx_offset = align_up(l.rx_offset + uint64_t{a.num_msgq_eps} * sizeof(RxConn), 64);
  l.ro_size = align_up(l.tx_offset + uint64_t{a.num_msgq_eps} * sizeof(TxConn), kPageSize);
  l.member_rw_offset = l.ro_size;
  l.tx_credit_offset = align_up(l.member_rw_offset + uint64_t{a.nloc_insts} * sizeof(MemberRw), 64);
  l.rings_offset = align_up(l.tx_credit_offset + uint64_t{a.num_msgq_eps} * sizeof(TxCredit), 64);
  l.slot_size = slot_size(a.max_msg_sz);
  l.ring_bytes = sizeof(RingCtl) + uint64_t{a.smsg_q_sz} * l.slot_size;
  l.total_size = align_up(l.rings_offset + uint64_t{a.num_msgq_eps} * l.ring_bytes, kPageSize);
  return l;
}

// The attribute checks GNI_MsgqInit and GNI_MsgqSize share (the daemon checks them again).
constexpr bool attrs_valid(const Attrs& a) {
  if (a.max_msg_sz == 0 || a.max_msg_sz > kMaxMsgSize) return false;
  if (a.smsg_q_sz == 0 || a.smsg_q_sz > kMaxQueueSlots) return false;
  if (a.num_msgq_eps == 0 || a.num_msgq_eps > kMaxConns) return false;
  if (a.nloc_insts == 0 || a.nloc_insts > kMaxLocalInsts) return false;
  if ((a.modes & ~kModeBlocking) != 0 || a.reserved != 0) return false;
  return segment_layout(a).total_size <= kMaxSegmentBytes;
}
static_assert(slot_size(kMaxMsgSize) == 192 && slot_size(1) == 64);
static_assert(segment_layout(Attrs{128, 1, 1, 2, 8, 0, 16, 0}).total_size == 3 * kPageSize);

// Pointers into a mapped segment, from a layout the caller computed from its own attributes.
struct SegmentView {
  char* base = nullptr;
  Layout lay{};
  Attrs attrs{};

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base); }
  Member* member(uint32_t i) const { return reinterpret_cast<Member*>(base + lay.members_offset) + i; }
  RxConn* rx(uint32_t i) const { return reinterpret_cast<RxConn*>(base + lay.rx_offset) + i; }
  TxConn* tx(uint32_t i) const { return reinterpret_cast<TxConn*>(base + lay.tx_offset) + i; }
  MemberRw* member_rw(uint32_t i) const { return reinterpret_cast<MemberRw*>(base + lay.member_rw_offset) + i; }
  TxCredit* tx_credit(uint32_t i) const { return reinterpret_cast<TxCredit*>(base + lay.tx_credit_offset) + i; }
  char* ring(uint32_t i) const { return base + lay.rings_offset + uint64_t{i} * lay.ring_bytes; }
  uint64_t ring_offset(uint32_t i) const { return lay.rings_offset + uint64_t{i} * lay.ring_bytes; }

  // Consistent copies of read-only entries (see the contract above); false if not live.
  bool read_member(uint32_t i, uint32_t& inst, uint32_t& gen, uint32_t* pid = nullptr) const {
    if (i >= attrs.nloc_insts) return false;
    const Member* m = member(i);
    uint32_t g1 = m->gen.load(std::memory_order_acquire);
    if (m->state.load(std::memory_order_acquire) != kEntryLive) return false;
    uint32_t id = m->inst_id, p = m->pid;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (m->gen.load(std::memory_order_relaxed) != g1) return false;
    inst = id;
    gen = g1;
    if (pid) *pid = p;
    return true;
  }
  bool read_rx(uint32_t i, uint32_t& remote_pe, uint32_t& gen) const {
    return i < attrs.num_msgq_eps && read_conn(rx(i), remote_pe, gen);
  }
  bool read_tx(uint32_t i, uint32_t& remote_pe, uint32_t& gen) const {
    return i < attrs.num_msgq_eps && read_conn(tx(i), remote_pe, gen);
  }
  // Copies a live connection entry (RxConn or TxConn) out under its generation.
  template <typename Conn>
  static bool read_conn(const Conn* c, uint32_t& remote_pe, uint32_t& gen) {
    uint32_t g1 = c->gen.load(std::memory_order_acquire);
    if (c->state.load(std::memory_order_acquire) != kEntryLive) return false;
    uint32_t pe = c->remote_pe;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c->gen.load(std::memory_order_relaxed) != g1) return false;
    remote_pe = pe;
    gen = g1;
    return true;
  }
  // True if the entry's destination is still the live member it was sent to.
  bool destination_live(const EntryHeader& e) const {
    uint32_t inst, gen;
    return read_member(e.dst_member, inst, gen) && inst == e.dst_inst && gen == e.dst_gen;
  }
};

}  // namespace nicemu::abi::msgq
