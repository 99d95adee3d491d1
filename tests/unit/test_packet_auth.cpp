// The fabric packet AEAD (nicemu/fabric/packet_codec.h): seal and verify with both
// algorithms; any change to the packet, the subkey inputs (src_node, src_epoch), the nonce
// (packet number) or the algorithm byte fails; the subkey cache under many senders.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "nicemu/fabric/packet_codec.h"

using namespace nicemu::fabric;
using namespace nicemu::abi::wire;

namespace {

const uint8_t kKey[kKeyBytes] = {9, 8, 7, 6, 5, 4, 3, 2, 1};

// A packet of `payload` bytes in one record, sealed by `auth`; returns its total length.
size_t make_packet(PacketAuth& auth, uint8_t* pkt, uint32_t node, uint64_t epoch, uint64_t pn, size_t payload = 40) {
  PacketHeader h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.src_node = node;
  h.dst_node = 99;
  h.src_epoch = epoch;
  h.packet_number = pn;
  h.record_count = 1;
  RecordHeader rh{1, static_cast<uint16_t>(payload), static_cast<uint8_t>(RecordType::kCtl), 0};
  const size_t len = sizeof h + sizeof rh + payload;
  h.length = static_cast<uint16_t>(len + kMacBytes);
  std::memcpy(pkt, &h, sizeof h);
  std::memcpy(pkt + sizeof h, &rh, sizeof rh);
  for (size_t i = 0; i < payload; ++i) pkt[sizeof h + sizeof rh + i] = static_cast<uint8_t>(i * 13);
  auth.seal(pkt, len);
  return len + kMacBytes;
}

std::vector<MacAlg> algorithms() {
  std::vector<MacAlg> v{MacAlg::kChaCha20Poly1305};
  if (aes256gcm_available()) v.push_back(MacAlg::kAes256Gcm);
  return v;
}

template <typename T>
void put(uint8_t* pkt, size_t off, T v) {
  std::memcpy(pkt + off, &v, sizeof v);
}

}  // namespace

TEST_CASE("packet AEAD: round trip, every flipped bit fails") {
  for (MacAlg alg : algorithms()) {
    CAPTURE(mac_alg_name(alg));
    PacketAuth tx(kKey, alg), rx(kKey, MacAlg::kChaCha20Poly1305);  // the receiver verifies any it can
    uint8_t pkt[kMaxPacket];
    const size_t n = make_packet(tx, pkt, 3, 0xABCDEF, 1);
    CHECK(pkt[offsetof(PacketHeader, mac_alg)] == static_cast<uint8_t>(alg));
    PacketHeader h;
    REQUIRE(check_packet(pkt, n, rx, h) == PacketError::kOk);
    CHECK(h.packet_number == 1);
    size_t failed = 0;
    for (size_t bit = 0; bit < n * 8; ++bit) {
      pkt[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      failed += !rx.verify(pkt, n - kMacBytes);
      pkt[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
    CHECK(failed == n * 8);
    CHECK(rx.verify(pkt, n - kMacBytes));
    // Another cluster key.
    const uint8_t other[kKeyBytes] = {1};
    PacketAuth wrong(other, MacAlg::kChaCha20Poly1305);
    CHECK_FALSE(wrong.verify(pkt, n - kMacBytes));
  }
}

TEST_CASE("packet AEAD: subkey inputs, nonce and algorithm byte are bound") {
  for (MacAlg alg : algorithms()) {
    CAPTURE(mac_alg_name(alg));
    PacketAuth tx(kKey, alg), rx(kKey);
    uint8_t pkt[kMaxPacket];
    const size_t n = make_packet(tx, pkt, 3, 0xABCDEF, 7);
    REQUIRE(rx.verify(pkt, n - kMacBytes));
    auto fails_with = [&](auto edit) {
      uint8_t copy[kMaxPacket];
      std::memcpy(copy, pkt, n);
      edit(copy);
      return !rx.verify(copy, n - kMacBytes);
    };
    CHECK(fails_with([](uint8_t* p) { put<uint64_t>(p, offsetof(PacketHeader, src_epoch), 0xABCDEE); }));
    CHECK(fails_with([](uint8_t* p) { put<uint32_t>(p, offsetof(PacketHeader, src_node), 4); }));
    CHECK(fails_with([](uint8_t* p) { put<uint64_t>(p, offsetof(PacketHeader, packet_number), 8); }));
    CHECK(fails_with([](uint8_t* p) { put<uint64_t>(p, offsetof(PacketHeader, packet_number), 7ull << 32); }));
    // Unknown algorithm ids, and the other algorithm (its tag differs even for equal inputs).
    for (int a : {0, 3, 0x81, 0xFF})
      CHECK(fails_with([a](uint8_t* p) { p[offsetof(PacketHeader, mac_alg)] = static_cast<uint8_t>(a); }));
    const uint8_t other = static_cast<uint8_t>(alg == MacAlg::kAes256Gcm ? MacAlg::kChaCha20Poly1305 : MacAlg::kAes256Gcm);
    CHECK(fails_with([other](uint8_t* p) { p[offsetof(PacketHeader, mac_alg)] = other; }));
    // The same packet number from a sender with another epoch (a restart): another tag.
    uint8_t again[kMaxPacket];
    PacketAuth restarted(kKey, alg);
    make_packet(restarted, again, 3, 0xABCDF0, 7);
    CHECK(std::memcmp(again + n - kMacBytes, pkt + n - kMacBytes, kMacBytes) != 0);
    CHECK(rx.verify(again, n - kMacBytes));
  }
}

TEST_CASE("packet AEAD: algorithm names and the fabric_mac choices") {
  CHECK(parse_mac_alg("chacha20poly1305") == MacAlg::kChaCha20Poly1305);
  CHECK(parse_mac_alg("aes256gcm") == MacAlg::kAes256Gcm);
  CHECK(parse_mac_alg("auto") == (aes256gcm_available() ? MacAlg::kAes256Gcm : MacAlg::kChaCha20Poly1305));
  CHECK_FALSE(parse_mac_alg("blake2b").has_value());
  CHECK(std::string(mac_alg_name(MacAlg::kAes256Gcm)) == "aes256gcm");
  if (!aes256gcm_available()) CHECK_THROWS(PacketAuth(kKey, MacAlg::kAes256Gcm));
}

TEST_CASE("packet AEAD: the subkey cache under many senders") {
  for (MacAlg alg : algorithms()) {
    CAPTURE(mac_alg_name(alg));
    PacketAuth rx(kKey);
    // 300 (node, epoch) pairs, more than the cache holds, each sealed by its own sender.
    struct Sender {
      std::vector<uint8_t> pkt;
    };
    std::vector<Sender> senders;
    std::mt19937_64 rng(11);
    for (uint32_t i = 0; i < 300; ++i) {
      PacketAuth tx(kKey, alg);
      Sender s;
      s.pkt.resize(kMaxPacket);
      const uint32_t node = i % 20;  // several epochs per node, as after restarts
      s.pkt.resize(make_packet(tx, s.pkt.data(), node, rng() | 1, i + 1, 8 + i % 100));
      senders.push_back(std::move(s));
    }
    PacketHeader h;
    for (int round = 0; round < 3; ++round)
      for (auto& s : senders) CHECK(check_packet(s.pkt.data(), s.pkt.size(), rx, h) == PacketError::kOk);
    // Every pair was derived at least once, and a cache miss costs exactly one derivation.
    CHECK(rx.derivations() >= senders.size());
    CHECK(rx.derivations() <= 3 * senders.size());
    // A few senders verify from the cache: no derivation once they are in it.
    const uint64_t before = rx.derivations();
    for (int i = 0; i < 100; ++i) CHECK(rx.verify(senders[5].pkt.data(), senders[5].pkt.size() - kMacBytes));
    CHECK(rx.derivations() <= before + 1);
    // Forged packets (any node and epoch, no valid tag) cost one derivation each and evict
    // nothing: the cached sender still verifies without a derivation.
    for (int i = 0; i < 500; ++i) {
      std::vector<uint8_t> f = senders[5].pkt;
      put<uint64_t>(f.data(), offsetof(PacketHeader, src_epoch), rng());
      put<uint32_t>(f.data(), offsetof(PacketHeader, src_node), static_cast<uint32_t>(rng()));
      CHECK_FALSE(rx.verify(f.data(), f.size() - kMacBytes));
    }
    const uint64_t after_forgeries = rx.derivations();
    CHECK(rx.verify(senders[5].pkt.data(), senders[5].pkt.size() - kMacBytes));
    CHECK(rx.derivations() == after_forgeries);
  }
}

TEST_CASE("packet AEAD: a sender's own subkey follows its header") {
  PacketAuth tx(kKey, MacAlg::kChaCha20Poly1305), rx(kKey);
  uint8_t pkt[kMaxPacket];
  for (uint64_t pn = 1; pn <= 50; ++pn) {
    const size_t n = make_packet(tx, pkt, 1, pn % 2 ? 111 : 222, pn);
    CHECK(rx.verify(pkt, n - kMacBytes));
  }
}
