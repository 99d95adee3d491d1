// fabric_seal: seals fabric packets for fabric_packets.py (Python's standard library has no
// AES-GCM or ChaCha20-Poly1305), with the daemon's own code (nicemu/fabric/packet_codec.h).
// stdin: the cluster key as 64 hex digits on the first line, then one packet per line in
// hex, header and records without the MAC (src_node, src_epoch and packet_number already
// set: they pick the subkey and nonce). stdout: each packet sealed (tag appended), in hex.
//   fabric_seal [auto|aes256gcm|chacha20poly1305]
//   fabric_seal --wire-version      prints wire::kVersion (the script's packets follow it)
#include <sodium.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "nicemu/fabric/packet_codec.h"

namespace wire = nicemu::abi::wire;

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--wire-version") {
    std::printf("%u\n", unsigned{wire::kVersion});
    return 0;
  }
  auto alg = nicemu::fabric::parse_mac_alg(argc > 1 ? argv[1] : "auto");
  if (!alg) {
    std::fprintf(stderr, "fabric_seal: unknown algorithm %s\n", argv[1]);
    return 2;
  }
  std::string line;
  uint8_t key[wire::kKeyBytes];
  size_t n = 0;
  if (!std::getline(std::cin, line) ||
      sodium_hex2bin(key, sizeof key, line.data(), line.size(), nullptr, &n, nullptr) != 0 || n != sizeof key) {
    std::fprintf(stderr, "fabric_seal: first line must be the key in hex\n");
    return 2;
  }
  nicemu::fabric::PacketAuth auth(key, *alg);
  std::vector<uint8_t> pkt(2 * wire::kMaxPacket + wire::kMacBytes);
  std::vector<char> hex(2 * pkt.size() + 1);
  while (std::getline(std::cin, line)) {
    if (sodium_hex2bin(pkt.data(), pkt.size() - wire::kMacBytes, line.data(), line.size(), nullptr, &n, nullptr) != 0 ||
        n < sizeof(wire::PacketHeader)) {
      std::fprintf(stderr, "fabric_seal: bad packet line\n");
      return 2;
    }
    auth.seal(pkt.data(), n);
    sodium_bin2hex(hex.data(), hex.size(), pkt.data(), n + wire::kMacBytes);
    std::printf("%s\n", hex.data());
  }
  return 0;
}
