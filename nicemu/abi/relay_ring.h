// SMSG relay ring: how libugni hands GNI_SmsgSend messages for receivers on other hosts
// (ctl::SmsgRelaySend, header then data) to its daemon without a system call per message.
// One ring per attached CDM, allocated by the daemon in the CDM's region heap on the first
// relay open (its offset comes back in ctl::SmsgRelayOpenReply). Layout defined once here
// for the library and the daemon.
//
// A byte ring of records: u32 length, then `length` bytes of one control message, padded
// to 8 bytes. A record never wraps: a producer that would cross the end writes a pad
// record (length kRelayPad) and starts again at offset 0. Positions are byte counts that
// only grow; offset = position % capacity.
//
// Index contract (producers: the CDM's threads, serialised by the library; one consumer:
// the daemon's loop):
//  - the producer writes a record at `tail` only while it fits (tail + bytes - head <=
//    capacity; a full ring is GNI_RC_NOT_DONE, the API's "try again"), then publishes the
//    new tail (release);
//  - the consumer reads records from its own copy of head up to tail (acquire), copies each
//    out before validating it (the ring is untrusted input), then publishes head (release);
//  - doorbell: a consumer that finds the ring empty after a pause stores armed = 1
//    (seq_cst), re-checks, and waits; a producer publishes, fences seq_cst, and only if
//    `armed` is 1 exchanges it to 0 and sends a ctl::SmsgRelayNote (op kSmsgRelayDoorbell)
//    on its connection.
//    While the daemon is draining or pausing between drains (armed = 0), messages cost the
//    producer no system call: a stream of sends becomes one wake-up per batch, and the
//    batch shares fabric packets.
// Every message of a CDM's relays goes through the ring, so their order is the order of
// the sends.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nicemu::abi {

inline constexpr uint32_t kRelayRingMagic = 0x52524E47;  // "RRNG"
// Holds several of the largest relayed messages (ctl::kSmsgRelayMaxSize plus its header).
inline constexpr uint32_t kRelayRingCapacity = 256 * 1024;  // power of two
inline constexpr uint32_t kRelayPad = 0xFFFFFFFF;           // record length: skip to offset 0

struct RelayRingCtl {
  alignas(64) std::atomic<uint64_t> tail;  // library
  alignas(64) std::atomic<uint64_t> head;  // daemon
  std::atomic<uint32_t> armed;             // daemon sets, library clears (exchange)
  alignas(64) uint32_t magic;
  uint32_t capacity;
  uint64_t reserved;
  // capacity bytes of records follow at offset 192
};
static_assert(sizeof(RelayRingCtl) == 192);
static_assert(offsetof(RelayRingCtl, head) == 64 && offsetof(RelayRingCtl, armed) == 72 &&
              offsetof(RelayRingCtl, magic) == 128);
inline constexpr uint64_t kRelayRingBytes = sizeof(RelayRingCtl) + kRelayRingCapacity;

inline char* relay_ring_data(RelayRingCtl* r) { return reinterpret_cast<char*>(r) + sizeof(RelayRingCtl); }

// Bytes a record of `len` message bytes takes.
inline constexpr uint64_t relay_record_bytes(uint64_t len) { return (4 + len + 7) & ~uint64_t{7}; }

}  // namespace nicemu::abi
