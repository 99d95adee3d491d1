// Packets on the wire (nicemu/abi/wire_protocol.h): sealing with an AEAD tag under a
// per-sender subkey of the cluster key, and the receiver's checks. A packet passes check()
// only if every length adds up exactly, the magic and version are ours, and its tag
// verifies; only then is anything in it looked at. The cluster key file holds the 32-byte
// key as 64 hex digits.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "nicemu/abi/wire_protocol.h"

namespace nicemu::fabric {

// The fabric_mac parameter: "auto" (AES-256-GCM where the CPU has AES-NI, else
// ChaCha20-Poly1305), "aes256gcm", "chacha20poly1305". Nothing for an unknown name.
std::optional<abi::wire::MacAlg> parse_mac_alg(std::string_view name);
const char* mac_alg_name(abi::wire::MacAlg a);
bool aes256gcm_available();  // AES-NI and PCLMUL (libsodium's implementation needs both)

class PacketAuth {
 public:
  // Seals with `alg`; throws std::runtime_error if this CPU cannot run it.
  PacketAuth(const uint8_t (&key)[abi::wire::kKeyBytes], abi::wire::MacAlg alg);
  // Seals with the best algorithm this CPU has.
  explicit PacketAuth(const uint8_t (&key)[abi::wire::kKeyBytes]);
  ~PacketAuth();
  PacketAuth(const PacketAuth&) = delete;
  PacketAuth& operator=(const PacketAuth&) = delete;

  abi::wire::MacAlg alg() const { return alg_; }
  // Sets the header's mac_alg to alg() and writes the tag over pkt[0, len) at pkt + len,
  // keyed by the header's src_node and src_epoch, nonce its packet_number (all read from
  // pkt at their wire offsets; len >= sizeof(PacketHeader)). The caller never reuses a
  // packet number within one epoch.
  void seal(uint8_t* pkt, size_t len);
  // Checks the tag at pkt + len with the algorithm the header names (false if unknown or
  // not available here). Constant-time comparison. Not const: derived subkeys are cached.
  bool verify(const uint8_t* pkt, size_t len);

  // Subkeys derived so far (each cache miss costs one): for tests and benchmarks.
  uint64_t derivations() const { return derivations_; }

 private:
  // A derived subkey ready for one algorithm: the AES key schedule and GHASH table
  // precomputed for GCM, the raw subkey for ChaCha20-Poly1305.
  struct Slot {
    uint64_t epoch = 0;
    uint32_t node = 0;
    uint8_t alg = 0;  // 0: empty
    alignas(16) unsigned char aes[512];  // crypto_aead_aes256gcm_state
    uint8_t key[abi::wire::kKeyBytes];
  };
  // Direct-mapped by (node, epoch, alg): bounded memory, no allocation per packet. A
  // forged header costs one derivation and evicts nothing (a slot is filled only once the
  // tag has verified).
  static constexpr size_t kCacheSlots = 64;

  void derive(Slot& s, uint32_t node, uint64_t epoch, abi::wire::MacAlg alg);
  static bool compute_or_check(const Slot& s, const uint8_t* pkt, size_t len, uint8_t* tag_out,
                               const uint8_t* tag_in);

  uint8_t key_[abi::wire::kKeyBytes];
  abi::wire::MacAlg alg_;
  bool aes_ok_;
  Slot tx_;       // the sender's own subkey (its node and epoch)
  Slot scratch_;  // a miss is derived here, moved into the cache once it verified
  std::array<Slot, kCacheSlots> cache_{};
  uint64_t derivations_ = 0;
};

// Reads a key file; throws std::runtime_error naming the file and the problem. Refuses a
// file readable by group or others (the key authenticates the whole cluster).
void load_key(const std::string& path, uint8_t (&key)[abi::wire::kKeyBytes]);
// Creates a key file with a fresh random key (mode 0600); false with errno text in `err`.
bool write_new_key(const std::string& path, std::string& err);

enum class PacketError : uint8_t { kOk, kShort, kBadMagic, kBadVersion, kBadLength, kBadMac, kBadRecords };
inline constexpr const char* kPacketErrorNames[] = {"ok", "short", "bad_magic", "bad_version",
                                                    "bad_length", "bad_mac", "bad_records"};

// Checks a received packet of `n` bytes and copies out its header.
PacketError check_packet(const uint8_t* p, size_t n, PacketAuth& auth, abi::wire::PacketHeader& h);

// Walks the records of a checked packet: f(const RecordHeader&, const uint8_t* payload).
template <typename F>
void for_each_record(const uint8_t* p, const abi::wire::PacketHeader& h, F&& f) {
  size_t off = sizeof(abi::wire::PacketHeader);
  for (uint16_t i = 0; i < h.record_count; ++i) {
    abi::wire::RecordHeader rh;
    std::memcpy(&rh, p + off, sizeof rh);
    f(rh, p + off + sizeof rh);
    off += sizeof rh + rh.length;
  }
}

// The selective-ack extension record of a checked packet (RecordType::kSack): its bitmap
// and length, or {nullptr, 0}.
inline std::pair<const uint8_t*, size_t> find_sack_ext(const uint8_t* p, const abi::wire::PacketHeader& h) {
  std::pair<const uint8_t*, size_t> r{nullptr, 0};
  for_each_record(p, h, [&](const abi::wire::RecordHeader& rh, const uint8_t* payload) {
    if (rh.type == static_cast<uint8_t>(abi::wire::RecordType::kSack)) r = {payload, rh.length};
  });
  return r;
}

}  // namespace nicemu::fabric
