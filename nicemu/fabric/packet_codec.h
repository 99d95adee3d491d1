// Packets on the wire (nicemu/abi/wire_protocol.h): sealing with the cluster key's MAC and
// the receiver's checks. A packet passes check() only if every length adds up exactly, the
// magic and version are ours, and the keyed BLAKE2b MAC over all of it verifies; only then
// is anything in it looked at. The cluster key file holds the 32-byte key as 64 hex digits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "nicemu/abi/wire_protocol.h"

namespace nicemu::fabric {

class PacketAuth {
 public:
  explicit PacketAuth(const uint8_t (&key)[abi::wire::kKeyBytes]);
  ~PacketAuth();
  // Writes the MAC of pkt[0, len) at pkt + len.
  void seal(uint8_t* pkt, size_t len) const;
  // Constant-time comparison of the MAC at pkt + len.
  bool verify(const uint8_t* pkt, size_t len) const;

 private:
  uint8_t key_[abi::wire::kKeyBytes];
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
PacketError check_packet(const uint8_t* p, size_t n, const PacketAuth& auth, abi::wire::PacketHeader& h);

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

}  // namespace nicemu::fabric
