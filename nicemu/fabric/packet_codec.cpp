#include "nicemu/fabric/packet_codec.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace nicemu::fabric {

using namespace nicemu::abi::wire;

static_assert(kMacBytes >= crypto_generichash_BYTES_MIN && kMacBytes <= crypto_generichash_BYTES_MAX);
static_assert(kKeyBytes == crypto_generichash_KEYBYTES);

PacketAuth::PacketAuth(const uint8_t (&key)[kKeyBytes]) {
  if (sodium_init() < 0) throw std::runtime_error("libsodium failed to initialise");
  std::memcpy(key_, key, kKeyBytes);
}

PacketAuth::~PacketAuth() { sodium_memzero(key_, sizeof key_); }

void PacketAuth::seal(uint8_t* pkt, size_t len) const {
  crypto_generichash(pkt + len, kMacBytes, pkt, len, key_, kKeyBytes);
}

bool PacketAuth::verify(const uint8_t* pkt, size_t len) const {
  uint8_t mac[kMacBytes];
  crypto_generichash(mac, kMacBytes, pkt, len, key_, kKeyBytes);
  return sodium_memcmp(mac, pkt + len, kMacBytes) == 0;
}

PacketError check_packet(const uint8_t* p, size_t n, const PacketAuth& auth, PacketHeader& h) {
  if (n < sizeof(PacketHeader) + kMacBytes) return PacketError::kShort;
  std::memcpy(&h, p, sizeof h);
  if (h.magic != kMagic) return PacketError::kBadMagic;
  if (h.version != kVersion) return PacketError::kBadVersion;
  if (h.length != n || n > kMaxPacket) return PacketError::kBadLength;
  // The MAC first: record lengths of a forged packet are not worth parsing.
  if (!auth.verify(p, n - kMacBytes)) return PacketError::kBadMac;
  size_t off = sizeof(PacketHeader), end = n - kMacBytes;
  for (uint16_t i = 0; i < h.record_count; ++i) {
    RecordHeader rh;
    if (end - off < sizeof rh) return PacketError::kBadRecords;
    std::memcpy(&rh, p + off, sizeof rh);
    off += sizeof rh;
    if (rh.length > kMaxRecordPayload || end - off < rh.length) return PacketError::kBadRecords;
    if (rh.type != static_cast<uint8_t>(RecordType::kCtl) && rh.type != static_cast<uint8_t>(RecordType::kProbe))
      return PacketError::kBadRecords;
    off += rh.length;
  }
  return off == end ? PacketError::kOk : PacketError::kBadRecords;
}

void load_key(const std::string& path, uint8_t (&key)[kKeyBytes]) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::runtime_error("cluster key " + path + ": " + std::strerror(errno));
  if (st.st_mode & 077)
    throw std::runtime_error("cluster key " + path + " is readable by others (chmod 600 it)");
  std::ifstream f(path);
  std::string hex;
  f >> hex;
  size_t bin_len = 0;
  if (hex.size() != 2 * kKeyBytes ||
      sodium_hex2bin(key, kKeyBytes, hex.data(), hex.size(), nullptr, &bin_len, nullptr) != 0 ||
      bin_len != kKeyBytes)
    throw std::runtime_error("cluster key " + path + ": expected " + std::to_string(2 * kKeyBytes) +
                             " hex digits (make one with `nicemuctl keygen FILE`)");
}

bool write_new_key(const std::string& path, std::string& err) {
  if (sodium_init() < 0) {
    err = "libsodium failed to initialise";
    return false;
  }
  uint8_t key[kKeyBytes];
  randombytes_buf(key, sizeof key);
  char hex[2 * kKeyBytes + 1];
  sodium_bin2hex(hex, sizeof hex, key, sizeof key);
  sodium_memzero(key, sizeof key);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    err = path + ": " + std::strerror(errno);
    return false;
  }
  std::string text = std::string(hex) + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (!ok) err = path + ": " + std::strerror(errno);
  ::close(fd);
  sodium_memzero(hex, sizeof hex);
  return ok;
}

}  // namespace nicemu::fabric
