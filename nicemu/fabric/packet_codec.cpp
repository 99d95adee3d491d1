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

static_assert(kKeyBytes == crypto_generichash_KEYBYTES);
static_assert(kKeyBytes == crypto_aead_aes256gcm_KEYBYTES && kKeyBytes == crypto_aead_chacha20poly1305_ietf_KEYBYTES);
static_assert(kMacBytes == crypto_aead_aes256gcm_ABYTES && kMacBytes == crypto_aead_chacha20poly1305_ietf_ABYTES);
static_assert(kNonceBytes == crypto_aead_aes256gcm_NPUBBYTES &&
              kNonceBytes == crypto_aead_chacha20poly1305_ietf_NPUBBYTES);

namespace {
void init_sodium() {
  if (sodium_init() < 0) throw std::runtime_error("libsodium failed to initialise");
}
template <typename T>
T load(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}
}  // namespace

bool aes256gcm_available() {
  init_sodium();
  return crypto_aead_aes256gcm_is_available() != 0;
}

std::optional<MacAlg> parse_mac_alg(std::string_view name) {
  if (name == "auto") return aes256gcm_available() ? MacAlg::kAes256Gcm : MacAlg::kChaCha20Poly1305;
  if (name == "aes256gcm") return MacAlg::kAes256Gcm;
  if (name == "chacha20poly1305") return MacAlg::kChaCha20Poly1305;
  return std::nullopt;
}

const char* mac_alg_name(MacAlg a) {
  switch (a) {
    case MacAlg::kAes256Gcm: return "aes256gcm";
    case MacAlg::kChaCha20Poly1305: return "chacha20poly1305";
  }
  return "unknown";
}

PacketAuth::PacketAuth(const uint8_t (&key)[kKeyBytes]) : PacketAuth(key, *parse_mac_alg("auto")) {}

PacketAuth::PacketAuth(const uint8_t (&key)[kKeyBytes], MacAlg alg) : alg_(alg) {
  static_assert(sizeof(Slot::aes) == sizeof(crypto_aead_aes256gcm_state));
  static_assert(alignof(crypto_aead_aes256gcm_state) <= 16);
  init_sodium();
  aes_ok_ = crypto_aead_aes256gcm_is_available() != 0;
  if (alg != MacAlg::kAes256Gcm && alg != MacAlg::kChaCha20Poly1305)
    throw std::runtime_error("fabric: unknown MAC algorithm");
  if (alg == MacAlg::kAes256Gcm && !aes_ok_)
    throw std::runtime_error("fabric: aes256gcm needs a CPU with AES-NI and PCLMUL; use chacha20poly1305");
  std::memcpy(key_, key, kKeyBytes);
}

PacketAuth::~PacketAuth() {
  sodium_memzero(key_, sizeof key_);
  sodium_memzero(&tx_, sizeof tx_);
  sodium_memzero(&scratch_, sizeof scratch_);
  sodium_memzero(cache_.data(), sizeof cache_);
}

void PacketAuth::derive(Slot& s, uint32_t node, uint64_t epoch, MacAlg alg) {
  uint8_t in[sizeof kSubkeyContext + 1 + 4 + 8];
  std::memcpy(in, kSubkeyContext, sizeof kSubkeyContext);
  in[sizeof kSubkeyContext] = static_cast<uint8_t>(alg);
  std::memcpy(in + sizeof kSubkeyContext + 1, &node, 4);  // little-endian hosts only (wire_protocol.h)
  std::memcpy(in + sizeof kSubkeyContext + 5, &epoch, 8);
  crypto_generichash(s.key, kKeyBytes, in, sizeof in, key_, kKeyBytes);
  if (alg == MacAlg::kAes256Gcm)
    crypto_aead_aes256gcm_beforenm(reinterpret_cast<crypto_aead_aes256gcm_state*>(s.aes), s.key);
  s.node = node;
  s.epoch = epoch;
  s.alg = static_cast<uint8_t>(alg);
  ++derivations_;
}

// Seals (tag_out) or verifies (tag_in) with the slot's algorithm; the message is empty,
// the packet is the associated data.
bool PacketAuth::compute_or_check(const Slot& s, const uint8_t* pkt, size_t len, uint8_t* tag_out,
                                  const uint8_t* tag_in) {
  uint8_t nonce[kNonceBytes] = {};
  std::memcpy(nonce, pkt + offsetof(PacketHeader, packet_number), 8);
  uint8_t none[1] = {};  // the (empty) message and ciphertext
  const auto* aes = reinterpret_cast<const crypto_aead_aes256gcm_state*>(s.aes);
  if (s.alg == static_cast<uint8_t>(MacAlg::kAes256Gcm)) {
    if (tag_out)
      return crypto_aead_aes256gcm_encrypt_detached_afternm(none, tag_out, nullptr, none, 0, pkt, len, nullptr, nonce,
                                                            aes) == 0;
    return crypto_aead_aes256gcm_decrypt_detached_afternm(none, nullptr, none, 0, tag_in, pkt, len, nonce, aes) == 0;
  }
  if (tag_out)
    return crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, tag_out, nullptr, none, 0, pkt, len, nullptr,
                                                              nonce, s.key) == 0;
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(none, nullptr, none, 0, tag_in, pkt, len, nonce, s.key) ==
         0;
}

void PacketAuth::seal(uint8_t* pkt, size_t len) {
  pkt[offsetof(PacketHeader, mac_alg)] = static_cast<uint8_t>(alg_);
  const auto node = load<uint32_t>(pkt, offsetof(PacketHeader, src_node));
  const auto epoch = load<uint64_t>(pkt, offsetof(PacketHeader, src_epoch));
  if (tx_.alg != static_cast<uint8_t>(alg_) || tx_.node != node || tx_.epoch != epoch) derive(tx_, node, epoch, alg_);
  compute_or_check(tx_, pkt, len, pkt + len, nullptr);
}

bool PacketAuth::verify(const uint8_t* pkt, size_t len) {
  const uint8_t a = pkt[offsetof(PacketHeader, mac_alg)];
  if (a == static_cast<uint8_t>(MacAlg::kAes256Gcm)) {
    if (!aes_ok_) return false;  // a GCM peer in a cluster that should pin chacha20poly1305
  } else if (a != static_cast<uint8_t>(MacAlg::kChaCha20Poly1305)) {
    return false;
  }
  const auto node = load<uint32_t>(pkt, offsetof(PacketHeader, src_node));
  const auto epoch = load<uint64_t>(pkt, offsetof(PacketHeader, src_epoch));
  // Direct-mapped: the mix spreads nodes and epochs over all slots.
  uint64_t h = (epoch ^ (uint64_t{node} << 8) ^ a) * 0x9E3779B97F4A7C15ull;
  Slot& s = cache_[h >> 58];
  static_assert(kCacheSlots == 64);
  if (s.alg == a && s.node == node && s.epoch == epoch) return compute_or_check(s, pkt, len, nullptr, pkt + len);
  derive(scratch_, node, epoch, static_cast<MacAlg>(a));
  if (!compute_or_check(scratch_, pkt, len, nullptr, pkt + len)) return false;
  std::memcpy(&s, &scratch_, sizeof s);
  return true;
}

PacketError check_packet(const uint8_t* p, size_t n, PacketAuth& auth, PacketHeader& h) {
  if (n < sizeof(PacketHeader) + kMacBytes) return PacketError::kShort;
  std::memcpy(&h, p, sizeof h);
  if (h.magic != kMagic) return PacketError::kBadMagic;
  if (h.version != kVersion) return PacketError::kBadVersion;
  if (h.length != n || n > kMaxPacket) return PacketError::kBadLength;
  // The tag first: record lengths of a forged packet are not worth parsing.
  if (!auth.verify(p, n - kMacBytes)) return PacketError::kBadMac;
  size_t off = sizeof(PacketHeader), end = n - kMacBytes;
  bool sack_ext = false;
  for (uint16_t i = 0; i < h.record_count; ++i) {
    RecordHeader rh;
    if (end - off < sizeof rh) return PacketError::kBadRecords;
    std::memcpy(&rh, p + off, sizeof rh);
    off += sizeof rh;
    if (rh.length > kMaxRecordPayload || end - off < rh.length) return PacketError::kBadRecords;
    if (rh.type == static_cast<uint8_t>(RecordType::kSack)) {
      // The selective-ack extension: one per packet, unsequenced, within its size.
      if (sack_ext || rh.seq != 0 || rh.flags != 0 || rh.length == 0 || rh.length > kSackExtMax)
        return PacketError::kBadRecords;
      sack_ext = true;
    } else if (rh.type != static_cast<uint8_t>(RecordType::kCtl) && rh.type != static_cast<uint8_t>(RecordType::kProbe)) {
      return PacketError::kBadRecords;
    }
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
