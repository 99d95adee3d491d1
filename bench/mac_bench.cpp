// mac_bench: the per-packet cost of authenticating a fabric packet, sealing at the sender
// plus verifying at the receiver, for the version-1 scheme (keyed BLAKE2b over the packet)
// and the version-2 AEADs (packet_codec.h; tag only, the packet as associated data), with
// the receiver's subkey cached, and the cost of a cache miss (one subkey derivation).
// Single-threaded, a fraction of a second per row.
//   mac_bench [--size BYTES] [--iterations N]
#include <sodium.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <CLI/CLI.hpp>

#include "nicemu/fabric/packet_codec.h"

using namespace nicemu;
namespace wire = abi::wire;

namespace {

template <typename F>
double ns_per(uint64_t n, F&& f) {
  f(uint64_t{0});  // warm up (and a first derivation)
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 1; i <= n; ++i) f(i);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  size_t size = 1384;
  uint64_t iterations = 20000;
  CLI::App app{"mac_bench: seal + verify cost per fabric packet"};
  app.add_option("--size", size, "packet bytes before the MAC")
      ->check(CLI::Range(sizeof(wire::PacketHeader), wire::kMaxPacket - wire::kMacBytes));
  app.add_option("--iterations", iterations, "packets per row")->check(CLI::Range(1ull, 100'000'000ull));
  CLI11_PARSE(app, argc, argv);
  if (sodium_init() < 0) return 1;

  uint8_t key[wire::kKeyBytes];
  randombytes_buf(key, sizeof key);
  std::vector<uint8_t> pkt(size + wire::kMacBytes);
  randombytes_buf(pkt.data(), pkt.size());
  wire::PacketHeader h{};
  h.magic = wire::kMagic;
  h.version = wire::kVersion;
  h.src_node = 1;
  h.src_epoch = 0x1234567;
  std::memcpy(pkt.data(), &h, sizeof h);
  uint64_t failures = 0;

  std::printf("%-38s %8s %12s\n", "scheme", "bytes", "ns/packet");
  double blake = ns_per(iterations, [&](uint64_t) {
    crypto_generichash(pkt.data() + size, wire::kMacBytes, pkt.data(), size, key, sizeof key);
    uint8_t mac[wire::kMacBytes];
    crypto_generichash(mac, sizeof mac, pkt.data(), size, key, sizeof key);
    failures += sodium_memcmp(mac, pkt.data() + size, sizeof mac) != 0;
  });
  std::printf("%-38s %8zu %12.0f\n", "v1 BLAKE2b seal+verify", size, blake);

  for (const char* name : {"aes256gcm", "chacha20poly1305"}) {
    auto alg = *fabric::parse_mac_alg(name);
    if (alg == wire::MacAlg::kAes256Gcm && !fabric::aes256gcm_available()) {
      std::printf("%-38s %8zu %12s\n", "v2 aes256gcm seal+verify", size, "no AES-NI");
      continue;
    }
    fabric::PacketAuth tx(key, alg), rx(key, alg);
    double both = ns_per(iterations, [&](uint64_t i) {
      std::memcpy(pkt.data() + offsetof(wire::PacketHeader, packet_number), &i, sizeof i);
      tx.seal(pkt.data(), size);
      failures += !rx.verify(pkt.data(), size);
    });
    std::printf("v2 %-35s %8zu %12.0f\n", (std::string(name) + " seal+verify").c_str(), size, both);
    // Every packet from a new (node, epoch): the receiver derives a subkey each time.
    uint64_t epoch = 1;
    double miss = ns_per(iterations / 4 + 1, [&](uint64_t) {
      ++epoch;
      std::memcpy(pkt.data() + offsetof(wire::PacketHeader, src_epoch), &epoch, sizeof epoch);
      failures += rx.verify(pkt.data(), size);  // forged: never verifies
    });
    std::printf("v2 %-35s %8zu %12.0f\n", (std::string(name) + " verify, cache miss").c_str(), size, miss);
    std::memcpy(pkt.data() + offsetof(wire::PacketHeader, src_epoch), &h.src_epoch, sizeof h.src_epoch);
  }
  if (failures) std::printf("unexpected results: %lu\n", static_cast<unsigned long>(failures));
  return failures ? 1 : 0;
}
