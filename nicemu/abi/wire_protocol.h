// The daemon-to-daemon wire protocol over UDP (the fabric between hosts), defined once.
//
// One UDP datagram = one packet:
//
//   PacketHeader            fixed 64 bytes: version, sender/receiver NIC addresses and
//                           epochs, the piggybacked acknowledgement (cumulative + selective),
//                           the sender's window base, the MAC algorithm and the sender's
//                           packet number
//   Record * record_count   each: RecordHeader (8 bytes) + `length` payload bytes; a record
//                           is one reliable message or a fragment of one
//   MAC                     kMacBytes: the tag of an AEAD (MacAlg) with an empty message and
//                           everything before it as associated data; nothing is encrypted
//
// The AEAD key is not the cluster key but a per-sender subkey, keyed BLAKE2b (cluster key)
// of kSubkeyContext, the algorithm, src_node and src_epoch; the nonce is packet_number, a
// counter from 1 for each sender epoch. A daemon restarts with its counter at 1 but with a
// fresh random epoch, hence a fresh subkey, so no (key, nonce) pair is ever used twice
// (which would break GCM and Poly1305). The receiver derives the same subkey from the header
// (unauthenticated until the tag checks: wrong values give a wrong key and a failed tag).
//
// All fields little-endian (the supported hosts are), fixed width, no pointers. A packet
// whose lengths do not add up exactly, whose version or magic differ, whose MAC does not
// verify, or whose sender is not in the fabric map is dropped and counted; nothing in it is
// acted upon.
//
// Sequence numbers are per (sender epoch, receiver epoch) channel and start at 1; 0 means
// "none". An epoch is a random 64-bit number a daemon draws at start-up: a peer that sees a
// new epoch knows the other side restarted and discards the channel's state. A starting
// daemon announces its epoch (kFlagAnnounce), so peers do that before new traffic arrives.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace nicemu::abi::wire {

inline constexpr uint32_t kMagic = 0x4E464142;  // "NFAB"
// 6: selective-ack extension record (kSack); 5: kFlagAnnounce; 4: 1024-record window; 3: 512; 2: AEAD tag, packet number (1: BLAKE2b MAC)
inline constexpr uint8_t kVersion = 6;

// Largest UDP payload we send: below a 1500-byte Ethernet MTU minus IPv4/IPv6 and UDP
// headers, so no packet is IP-fragmented (a lost fragment loses the whole datagram).
inline constexpr size_t kMaxPacket = 1400;
inline constexpr size_t kMacBytes = 16;  // AEAD tag (AES-GCM and Poly1305 alike)
inline constexpr size_t kKeyBytes = 32;  // cluster key and derived subkeys
inline constexpr size_t kNonceBytes = 12;  // packet_number little-endian, then 4 zero bytes

// The AEAD that made a packet's tag (PacketHeader::mac_alg). Any other value: dropped.
enum class MacAlg : uint8_t {
  kAes256Gcm = 1,         // where the CPU has AES-NI and PCLMUL: fastest
  kChaCha20Poly1305 = 2,  // IETF variant, 96-bit nonce: everywhere
};
// The subkey derivation's context, padded with zeros to 32 bytes; then the MacAlg byte,
// src_node (4 bytes) and src_epoch (8 bytes), little-endian: 45 bytes of BLAKE2b input.
inline constexpr char kSubkeyContext[32] = "nicemu fabric packet subkey v2";

// Records a sender may have unacknowledged on one channel; the receiver buffers this many
// out-of-order records, so it can always hold what the sender may send (credit-based flow
// control: no record is ever sent that the receiver would have to drop for lack of room).
inline constexpr uint32_t kWindow = 1024;

enum PacketFlags : uint8_t {
  kFlagAckRequested = 1,  // the sender wants an ack soon (window getting full, or a probe)
  // A daemon that just started tells the nodes of its map its new epoch: no records, ack and
  // base 0, dst_epoch 0. A receiver that knew an earlier epoch of the sender starts its
  // channel over at once (fails what it had outstanding towards the old incarnation), before
  // a new job's first message can be caught in that; a receiver that knew nothing of the
  // sender ignores it (no channel is made for it). Sent a few times (UDP may drop it).
  kFlagAnnounce = 2,
};

struct PacketHeader {
  uint32_t magic;
  uint8_t version;
  uint8_t flags;          // PacketFlags
  uint16_t length;        // whole packet, header to MAC inclusive
  uint32_t src_node;      // sender's NIC address (must be in the receiver's fabric map)
  uint32_t dst_node;      // receiver's NIC address
  uint64_t src_epoch;     // sender's incarnation
  uint64_t dst_epoch;     // receiver's incarnation as the sender knows it (0 = unknown yet)
  uint32_t ack;           // every record with seq < ack was received (cumulative)
  uint32_t base;          // sender will never (re)send a record below this seq: records it
                          // gave up on (peer silent past the retry budget) are skipped
  uint64_t sack;          // bit i set: record ack + 1 + i was received (selective)
  uint16_t record_count;
  uint8_t mac_alg;        // MacAlg
  uint8_t reserved0;
  uint32_t reserved1;
  uint64_t packet_number; // the AEAD nonce: from 1 per sender epoch, never reused
};
static_assert(sizeof(PacketHeader) == 64);
static_assert(offsetof(PacketHeader, src_node) == 8 && offsetof(PacketHeader, length) == 6);
static_assert(offsetof(PacketHeader, src_epoch) == 16 && offsetof(PacketHeader, ack) == 32);
static_assert(offsetof(PacketHeader, sack) == 40 && offsetof(PacketHeader, record_count) == 48);
static_assert(offsetof(PacketHeader, mac_alg) == 50 && offsetof(PacketHeader, packet_number) == 56);
static_assert(std::is_trivially_copyable_v<PacketHeader>);

enum RecordFlags : uint8_t {
  kRecordMore = 1,    // more fragments of the same message follow (segmentation)
  kRecordPacked = 2,  // several small whole messages, each as u16 length + bytes (coalescing)
};
// Messages up to this size are packed together into records; larger ones get records of
// their own (and fragments when longer than a record).
inline constexpr size_t kPackMax = 256;

// The kinds of messages carried. Payloads are the daemons' own message structures
// (nicemu/abi/daemon_protocol.h for datagram matching), validated by the receiver as if they
// came from a local socket.
enum class RecordType : uint8_t {
  kCtl = 1,    // a daemon-to-daemon control message (DgramIncoming, DgramMatched, ...)
  kProbe = 2,  // empty keep-alive, sent to a peer that went silent to learn if it is back
  // Unsequenced (seq 0, flags 0): the selective acks beyond the header's 64-bit bitmap, a
  // bitmap whose bit i (byte i / 8, bit i % 8) says record ack + 65 + i was received; 1 to
  // kSackExtMax bytes, at most one per packet. Anything else is a malformed packet.
  kSack = 3,
};

struct RecordHeader {
  uint32_t seq;
  uint16_t length;  // payload bytes after this header
  uint8_t type;     // RecordType
  uint8_t flags;    // RecordFlags
};
static_assert(sizeof(RecordHeader) == 8);

inline constexpr size_t kMaxRecordPayload = kMaxPacket - sizeof(PacketHeader) - sizeof(RecordHeader) - kMacBytes;
// Messages are reassembled up to this size; longer ones are refused at the sender and a
// fragment stream growing beyond it at the receiver is a protocol error (dropped, counted).
inline constexpr size_t kMaxMessage = 64 * 1024;
static_assert(kMaxRecordPayload >= 1024, "a datagram record must hold any control message");
// The header's selective-ack bitmap covers the 64 records after the cumulative ack, the
// extension the rest of the window: together every record the receiver may hold.
inline constexpr size_t kSackExtMax = (kWindow - 64) / 8;
static_assert(kWindow >= 64 && kWindow % 8 == 0);
static_assert(sizeof(PacketHeader) + sizeof(RecordHeader) + kSackExtMax + kMacBytes <= kMaxPacket);
static_assert(kMaxMessage <= 0xFFFF * 64, "fragment count stays small");

}  // namespace nicemu::abi::wire
