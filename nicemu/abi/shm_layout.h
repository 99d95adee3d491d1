// Layout of the shared-memory region the daemon hands every attached CDM (memfds passed
// over the control socket), and of the structures peers on the same host write into it.
// Defined once here for the daemon and all client libraries; fixed-width fields, offsets
// instead of pointers, sizes pinned with static_assert, a version checked at attach.
//
//   0            RegionHeader                    read-only: written by the daemon only
//   4096         RegEntry[kRegSlots]              \ the process's MDD table (process_mdd):
//   ...          SegEntry[kSegSlots]              /  written by the owner process, read by all
//   ...          CqDesc[kCqSlots]                 read-only: written by the daemon only
//   kRoSize      heap: CQ rings, SMSG mailboxes   read-write section, allocated by the daemon
//   region_size
//
// Three memfds, mapped back to back (nicemu/abi/region_map.h):
//  - the read-only memfd (header, CQ descriptors), sealed against new writers by the daemon:
//    peers trust the header (owner pid, state, lease) and nobody but the daemon may forge it;
//  - the MDD memfd (registrations and their segments), one per process and credential,
//    shared by the process's CDMs of that credential: the owner maps it writable once, then
//    seals it against new writers, so the owner's library registers memory without asking
//    the daemon, and no peer can write it. It describes the owner's own memory only: a
//    forged entry can expose nothing but the owner's memory, and every reader validates
//    what it copies out (region_access.h);
//  - the heap, read-write for the owner and peers: untrusted input for everybody but its
//    writer; a reader copies what it needs and bounds-checks it against the read-only part.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nicemu::abi {

inline constexpr uint32_t kRegionMagic = 0x4E494345;  // "NICE"
inline constexpr uint16_t kAbiVersion = 8;  // 2: segment table, RegEntry.seg_*; 3: two memfds (region_map.h), lease; 4: MboxCtl.note_at; 5: memory domains (mem_domain, RegEntry.domain), credit_wanted; 6: CQ sleepers check `tail` (producers no longer fence); 7: RegEntry.vmdh, kRegReserved, mailbox slots keep kSmsgTagHeaderRoom; 8: the MDD table (registrations, segments) in its own owner-written memfd, CqDesc after it
inline constexpr uint32_t kRegSlots = 16384;          // = mdh::kMaxSlots
inline constexpr uint32_t kCqSlots = 1024;
inline constexpr uint32_t kNoCq = 0xFFFFFFFF;
inline constexpr uint64_t kPageSize = 4096;

enum RegionState : uint32_t {
  kRegionAlive = 1,
  kRegionDead = 2,     // owner process died or detached; reclaimed by the daemon
  kRegionNicDown = 3,  // daemon shut down
};

struct RegionHeader {
  uint32_t magic;
  uint16_t abi_version;
  uint16_t header_size;
  std::atomic<uint32_t> state;   // RegionState; the only field that changes after attach
  uint32_t nic_addr;
  uint32_t inst_id;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t owner_pid;
  uint32_t device_type;          // gni_nic_device_t
  uint32_t modes;                // CDM modes
  uint64_t attach_id;            // unique per attachment; peers key their mappings on it
  uint64_t region_size;
  uint64_t ro_size;
  uint64_t reg_table_offset;
  uint64_t cq_table_offset;
  uint32_t reg_slots;
  uint32_t cq_slots;
  std::atomic<uint32_t> down_futex;  // bumped and woken when the region dies
  uint32_t amo_lock_count;           // AmoLock entries in the heap (power of two; 0 = none)
  std::atomic<uint32_t> dgram_seq;   // bumped and woken when a datagram of this CDM changes state
  uint32_t amo_lock_offset;          // AmoLock[amo_lock_count]: the first heap block, so < 4 GiB
  uint32_t counters_offset;          // the client's CdmCounterBlock (counters_layout.h); 0 = none
  uint32_t mem_domain;               // MDH of this CDM's registrations on its node (mem_handle.h), 1..4095
  // The daemon's lease: a robust futex word holding the tid of a daemon thread that lives as
  // long as the daemon. However the daemon ends (SIGKILL included) the kernel sets
  // kLeaseOwnerDied in it, so peers see a region of a dead daemon as down without any
  // system call and never act on its stale tables. `lease_link` is the daemon's robust-list
  // link (a pointer in the daemon's address space, meaningless to everybody else); 0 = no
  // lease (the region's state alone decides).
  uint64_t lease_link;
  std::atomic<uint32_t> lease;
};
inline constexpr uint32_t kLeaseOwnerDied = 0x40000000;  // = FUTEX_OWNER_DIED (linux/futex.h)
static_assert(sizeof(RegionHeader) <= kPageSize);
static_assert(offsetof(RegionHeader, state) == 8);
static_assert(offsetof(RegionHeader, attach_id) == 40);
static_assert(offsetof(RegionHeader, amo_lock_count) == 92 && offsetof(RegionHeader, amo_lock_offset) == 100);
static_assert(offsetof(RegionHeader, counters_offset) == 104);
static_assert(offsetof(RegionHeader, lease_link) == 112 && offsetof(RegionHeader, lease) == 120);

// The region's state as peers must take it: NIC down once its daemon's lease died.
inline uint32_t region_state(const RegionHeader& h) {
  if (h.lease.load(std::memory_order_acquire) & kLeaseOwnerDied) return kRegionNicDown;
  return h.state.load(std::memory_order_acquire);
}
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// kRegReserved: a virtual-MDH registration made with GNI_MEM_RESERVE_REGION whose pages were
// never filled in (GNI_MEM_UPDATE_REGION): the slot and its vMDH index are taken, but every
// access through it is refused, as the hardware's MDH is not live yet.
enum RegState : uint32_t { kRegFree = 0, kRegLive = 1, kRegReserved = 2 };

// One registration (GNI_MemRegister). Written under a seqlock by the owner's library (plain
// registrations), or by the daemon in a slot the library chose (vMDH, reserved and
// multi-segment ones) and when it reclaims a CDM's entries: `seq` is odd while the entry
// changes; readers copy the entry and retry if seq moved. A writer takes the entry by CAS of
// `seq` from even to odd, so the library and the daemon never write one entry at once.
// A multi-segment registration (GNI_MemRegisterSegments) is addressed by offset: its
// `address` is 0, `length` the sum of its segments, and SegEntry[seg_first, seg_first +
// seg_count) of the segment table map offsets to the owner's virtual addresses. Those
// entries are written before the registration is published and freed only after it is
// unpublished, so a reader that re-checks `seq` after reading them saw a consistent list.
struct RegEntry {
  std::atomic<uint32_t> seq;
  uint32_t state;      // RegState
  uint32_t gen;        // 12-bit generation, part of the handle
  uint32_t flags;      // GNI_MEM_* flags given at registration
  uint64_t address;    // owner's virtual address (0 for a multi-segment registration)
  uint64_t length;
  uint32_t dst_cq;     // CQ slot for remote events, or kNoCq
  uint32_t seg_count;  // 0: one contiguous range at `address`; else segments in the table
  uint32_t seg_first;  // index of the first SegEntry
  uint32_t domain;     // MDH of the CDM that registered it (a sibling's copy keeps the origin's)
  uint32_t vmdh;       // GNI_MEM_USE_VMDH: its index in the node's virtual-MDH block + 1; 0: none
  uint32_t reserved0;
  uint64_t reserved1;
};
static_assert(sizeof(RegEntry) == 64);
static_assert(offsetof(RegEntry, address) == 16);
static_assert(offsetof(RegEntry, dst_cq) == 32);
static_assert(offsetof(RegEntry, seg_count) == 36 && offsetof(RegEntry, seg_first) == 40);
static_assert(offsetof(RegEntry, domain) == 44 && offsetof(RegEntry, vmdh) == 48);

// Takes entry `e` for writing: CAS of `seq` from even to odd; false while another writer
// holds it (a hostile owner may hold it forever: a writer other than the owner gives up).
inline bool reg_write_begin(RegEntry& e, uint32_t& seq) {
  seq = e.seq.load(std::memory_order_relaxed);
  if ((seq & 1) || !e.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return false;
  std::atomic_thread_fence(std::memory_order_release);  // the fields' stores stay after the odd seq
  return true;
}
inline void reg_write_end(RegEntry& e, uint32_t seq) { e.seq.store(seq + 2, std::memory_order_release); }

// One segment of a multi-segment registration: offsets [offset, offset + length) of the
// registration are the owner's [address, address + length). A registration's segments
// are consecutive entries in ascending, gap-free offset order, the first at offset 0.
struct SegEntry {
  uint64_t offset;
  uint64_t address;
  uint64_t length;
  uint64_t reserved;
};
static_assert(sizeof(SegEntry) == 32);
inline constexpr uint32_t kSegSlots = 16384;       // per region
inline constexpr uint32_t kMaxRegSegments = 1024;  // per registration (= IOV_MAX)

enum CqState : uint32_t { kCqFree = 0, kCqLive = 1 };

struct CqDesc {
  std::atomic<uint32_t> state;  // CqState
  uint32_t mode;                // gni_cq_mode_t
  uint32_t capacity;            // power of two
  uint32_t reserved0;
  uint64_t ctl_offset;          // CqRingCtl in the heap
  uint64_t entries_offset;      // uint64_t[capacity] in the heap
  uint64_t reserved[4];
};
static_assert(sizeof(CqDesc) == 64);

inline constexpr uint64_t kRegTableOffset = kPageSize;
inline constexpr uint64_t kSegTableOffset = kRegTableOffset + uint64_t{kRegSlots} * sizeof(RegEntry);
inline constexpr uint64_t kCqTableOffset = kSegTableOffset + uint64_t{kSegSlots} * sizeof(SegEntry);
// The MDD memfd maps at [kRegTableOffset, kCqTableOffset) of a region, from its offset 0.
inline constexpr uint64_t kMddBytes = kCqTableOffset - kRegTableOffset;
inline constexpr uint64_t kRoSize =
    (kCqTableOffset + uint64_t{kCqSlots} * sizeof(CqDesc) + kPageSize - 1) / kPageSize * kPageSize;
static_assert(kRegTableOffset % kPageSize == 0 && kCqTableOffset % kPageSize == 0 && kMddBytes % kPageSize == 0);
static_assert(kRoSize % kPageSize == 0);
inline constexpr uint64_t kDefaultRegionSize = uint64_t{256} << 20;

// AMO lock table: every AMO on memory of the region's owner process holds the lock that the
// target address selects (hash of address / 8, so a 4-byte AMO and the 8-byte AMO around
// it share one), whichever process initiates it — process_vm_readv/writev is no atomic
// read-modify-write, so this is what makes NIC AMOs atomic with respect to each other.
// Reserved by the daemon as the first heap block when it creates the region.
//  - `owner` is 0 when free, else the holder's (start-time tag << 32 | pid): taking the lock
//    is CAS 0 -> self (acquire), releasing is a store of 0 (release). The start-time tag
//    tells a holder that died from a later process that reuses its pid, so a waiter can
//    break the lock of a dead holder by CAS of exactly that owner value to itself.
//  - waiters increment `waiters` (seq_cst), re-check `owner`, then futex-wait on `wake`;
//    the releaser stores owner = 0, fences seq_cst, and only if `waiters` is non-zero bumps
//    `wake` and wakes, so the uncontended path makes no system call.
struct AmoLock {
  std::atomic<uint64_t> owner;
  std::atomic<uint32_t> wake;
  std::atomic<uint32_t> waiters;
  uint64_t reserved[6];
};
static_assert(sizeof(AmoLock) == 64);
inline constexpr uint32_t kAmoLocks = 1024;

// Completion-queue ring: multi-producer (owner, same-host peers, daemon), single consumer
// (the owner, serialised by the client's own lock as uGNI requires).
//  - producers claim an index by CAS on `tail` only while tail - head < capacity, then
//    store the entry with release; an entry is never 0 (source bits are non-zero), so a
//    zero slot means "claimed but not yet written";
//  - the consumer reads slot[head & mask] with acquire, zeroes it, then publishes
//    head + 1 with release, which hands the slot back to producers;
//  - a full ring sets `overrun` (the entry is lost, as on hardware) and wakes the waiter;
//  - blocking waits: the consumer reads `futex`, increments `waiters` (seq_cst), re-checks
//    that `tail` (seq_cst) equals `head` and no overrun is flagged, then futex-waits on
//    `futex` for the value it read; producers claim with a seq_cst CAS on `tail` (overrun:
//    a seq_cst store), store the entry, and only if `waiters` (seq_cst load) is non-zero
//    bump `futex` and wake it, so the non-blocking path makes no system call and no fence.
//    Either the producer sees the waiter, and its bump makes the wait return, or the
//    waiter's re-check sees the claim (its entry may still be on its way: the waiter then
//    sleeps only briefly): no wake-up is lost;
//  - `waiters` counts sleepers, not consumers: a thread waiting on several CQs at once
//    (GNI_CqVectorWaitEvent / GNI_CqVectorMonitor, which only looks) registers on every
//    ring of its vector, re-checks them all, and sleeps on all their `futex` words with
//    one futex_waitv; the owner also bumps `futex` to wake waiters for its own reasons
//    (an interrupt mask taken), so a waiter must re-check after every wake.
struct CqRingCtl {
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint32_t> overrun;
  std::atomic<uint32_t> waiters;
  std::atomic<uint32_t> futex;
  uint32_t reserved;
};
static_assert(sizeof(CqRingCtl) == 192);
static_assert(offsetof(CqRingCtl, head) == 64);

// SMSG mailbox: one per (receiver registration, mbox_offset), i.e. per directed channel.
// Lives in the receiver's heap; the sender writes slots, the receiver releases them.
//  - sender: slot (sent % credits) is free while sent - released < credits (acquire on
//    `released`); it writes length, tag and payload, then stores slot.seq = sent + 1
//    (release) and publishes sent + 1;
//  - receiver: the message `next` is present when slot(next).seq == next + 1 (acquire);
//    after GNI_SmsgRelease it stores released = next + 1 (release), returning the credit.
// `sent` and `released` live in shared memory so a re-initialised endpoint resumes the
// channel where it was.
// A mailbox whose sender is on another host is written by the receiver's daemon, and the
// sender's credits travel back through the daemons. `note_at` (written by that daemon) is
// the release count at which the receiver tells its daemon (ctl::SmsgRelayNote): an eighth
// of a mailbox past what the daemon last reported to the sender. While messages keep arriving
// the daemon reports releases with its acks and moves `note_at` ahead, so a receiver notes
// only when it got ahead of those acks (a sender short of credits then gets them back at the
// note), not every so many releases. Both sides
// store, then load the other's word with seq_cst (the daemon re-checks `released` after
// moving `note_at`), so a note is never missed.
struct MboxCtl {
  alignas(64) std::atomic<uint32_t> sent;      // written by the sender only
  alignas(64) std::atomic<uint32_t> released;  // written by the receiver only
  alignas(64) uint32_t magic;
  uint32_t credits;
  uint32_t slot_size;
  uint32_t max_size;
  std::atomic<uint32_t> note_at;  // relayed mailboxes only: written by the receiver's daemon
  // Set (seq_cst) by a sender that ran out of credits, then `released` re-read; the
  // receiver stores `released` (seq_cst), then takes this flag and, if it was set, raises an
  // SMSG event in the sender's receive CQ, as the credit message of the hardware does.
  std::atomic<uint32_t> credit_wanted;
  // Relayed mailboxes: the receiver EP's remote event data (written by the receiver's
  // library), which the credit event the sender's daemon raises carries, as the receiver's
  // messages do. Untrusted: it only names the event for the sender's program.
  std::atomic<uint32_t> credit_event;
};
static_assert(sizeof(MboxCtl) == 192);
static_assert(offsetof(MboxCtl, released) == 64 && offsetof(MboxCtl, note_at) == 144 &&
              offsetof(MboxCtl, credit_wanted) == 148 && offsetof(MboxCtl, credit_event) == 152);
inline constexpr uint32_t kMboxMagic = 0x4D424F58;  // "MBOX"

// Cross-host SMSG (docs/fabric.md, "SMSG across hosts"): the sender's side of a channel
// whose mailbox is in a region on another host. The library cannot store into that
// mailbox; it hands each message to its daemon (ctl::SmsgRelaySend in the relay ring,
// relay_ring.h), which carries it over
// the fabric to the receiver's daemon, which writes it into the real mailbox. This block
// lives in the *sender's* heap so credits and failures reach the library without a call:
//  - library: `sent` (messages handed over; it only grows, the library's own index);
//  - daemon: `released` (the receiver's releases as last reported over the fabric, on the
//    sender's numbering: credits are free while sent - released < credits), `delivered`
//    (messages written into the receiver's mailbox) and `state` (0 while the channel works,
//    else the CQE error status it failed with, for good: receiver gone, peer daemon silent
//    past the fabric's retry budget). The library reads them with acquire.
struct SmsgRelayCtl {
  alignas(64) std::atomic<uint32_t> sent;       // written by the library only
  alignas(64) std::atomic<uint32_t> released;   // written by the daemon only
  std::atomic<uint32_t> delivered;              // daemon
  std::atomic<uint32_t> state;                  // daemon: 0 = up, else a cqe:: error status
  alignas(64) uint32_t magic;
  uint32_t credits;
  uint32_t max_size;
  // Set (seq_cst) by a library that ran out of credits, then `released` re-read; the daemon
  // stores `released` (seq_cst), then takes the flag and raises an SMSG event in the CQ the
  // relay was opened with (SmsgRelayOpen::credit_cq), as with a mailbox on this host.
  std::atomic<uint32_t> credit_wanted;
};
static_assert(sizeof(SmsgRelayCtl) == 192);
static_assert(offsetof(SmsgRelayCtl, released) == 64 && offsetof(SmsgRelayCtl, state) == 72);
inline constexpr uint32_t kRelayMagic = 0x524C4159;  // "RLAY"

struct MboxSlotHeader {
  std::atomic<uint32_t> seq;
  uint32_t length;   // header + data bytes
  uint8_t tag;
  uint8_t reserved[7];
};
static_assert(sizeof(MboxSlotHeader) == 16);

// Room a slot keeps beyond msg_maxsize for the header of a tagged send. Cray's header bounds
// GNI_SmsgSend by msg_maxsize ("header plus data exceeds the maximum short message size
// given in GNI_SmsgInit") but GNI_SmsgSendWTag only by GNI_SMSG_MAX_SIZE, and libfabric's
// gni provider relies on the difference: it sends a 32-byte header with up to
// msg_maxsize - 1 bytes of eager data. A tagged send may therefore carry up to msg_maxsize
// bytes of data plus a header of up to this many bytes (smsg_fits).
inline constexpr uint32_t kSmsgTagHeaderRoom = 64;
constexpr uint32_t smsg_capacity(uint32_t msg_maxsize) { return msg_maxsize + kSmsgTagHeaderRoom; }
constexpr bool smsg_fits(uint32_t msg_maxsize, uint32_t header_length, uint32_t data_length, bool tagged) {
  if (uint64_t{header_length} + data_length <= msg_maxsize) return true;
  return tagged && data_length <= msg_maxsize && header_length <= kSmsgTagHeaderRoom;
}
constexpr uint32_t mbox_slot_size(uint32_t msg_maxsize) {
  return (static_cast<uint32_t>(sizeof(MboxSlotHeader)) + smsg_capacity(msg_maxsize) + 63u) & ~63u;
}
constexpr uint64_t mbox_bytes(uint32_t credits, uint32_t msg_maxsize) {
  return sizeof(MboxCtl) + uint64_t{credits} * mbox_slot_size(msg_maxsize);
}

}  // namespace nicemu::abi

namespace nicemu::abi {
// GNI_SmsgBufferSizeNeeded: bytes of registered memory one mailbox needs. Deterministic in
// (credits, msg_maxsize), so both peers compute the same value.
constexpr uint64_t smsg_buffer_size(uint32_t credits, uint32_t msg_maxsize) {
  return (mbox_bytes(credits, msg_maxsize) + 63) & ~uint64_t{63};
}
}  // namespace nicemu::abi
