// Fuzz target: the receive path of the UDP fabric (nicemu/fabric): check_packet (lengths,
// magic, version, AEAD tag, record walk) and, for packets that pass, what UdpFabric does
// with them: the reliable channel's on_peer_base / on_ack (with a selective-ack extension) /
// on_record and reassembly.
//
// Input: one mode byte, then packets as [u16 little-endian length][bytes]. Mode bit 0 set:
// the harness writes the packet's length field and seals it with the test key (as a peer
// holding the cluster key would; the header's src_node, src_epoch and packet_number as the
// fuzzer wrote them pick the subkey and nonce), so the fuzzer gets past the MAC; clear: the bytes are
// checked as they came (a forger without the key). One channel lives for the whole input,
// with a few messages of its own in flight so acknowledgements have something to act on.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_driver.h"
#include "nicemu/fabric/packet_codec.h"
#include "nicemu/fabric/reliable_channel.h"

namespace wire = nicemu::abi::wire;
using nicemu::fabric::PacketError;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint8_t key[wire::kKeyBytes] = {1, 2, 3, 4, 5, 6, 7, 8};
  static nicemu::fabric::PacketAuth auth(key);
  if (size < 1) return 0;
  const bool seal = data[0] & 1;
  size_t off = 1;

  size_t delivered = 0;
  nicemu::fabric::ReliableChannel ch(nicemu::fabric::ChannelConfig{},
                                     [&](wire::RecordType, const uint8_t* msg, size_t len) {
                                       if (len > 0 && msg == nullptr) std::abort();
                                       ++delivered;
                                     });
  uint64_t now = 1000;
  const char hello[] = "fuzz";
  for (int i = 0; i < 3; ++i) ch.send(wire::RecordType::kCtl, hello, sizeof hello);
  std::vector<uint8_t> out(wire::kMaxPacket);
  uint16_t count = 0;
  ch.fill(now, out.data(), out.size(), count);

  std::vector<uint8_t> pkt;
  while (size - off >= 2) {
    size_t len = data[off] | size_t{data[off + 1]} << 8;
    off += 2;
    if (len > size - off) len = size - off;
    pkt.assign(data + off, data + off + len);
    off += len;
    if (seal) {
      if (pkt.size() + wire::kMacBytes > wire::kMaxPacket || pkt.size() < sizeof(wire::PacketHeader)) continue;
      const uint16_t total = static_cast<uint16_t>(pkt.size() + wire::kMacBytes);
      std::memcpy(pkt.data() + offsetof(wire::PacketHeader, length), &total, sizeof total);
      pkt.resize(total);
      auth.seal(pkt.data(), total - wire::kMacBytes);
    }
    wire::PacketHeader h;
    PacketError e = nicemu::fabric::check_packet(pkt.data(), pkt.size(), auth, h);
    if (e != PacketError::kOk) continue;
    if (h.length != pkt.size()) std::abort();  // check_packet accepted a wrong length
    now += 100;
    ch.peer_heard();
    ch.on_peer_base(h.base);
    const auto [ext, ext_len] = nicemu::fabric::find_sack_ext(pkt.data(), h);
    if (ext_len > wire::kSackExtMax) std::abort();  // check_packet accepted an oversized extension
    ch.on_ack(h.ack, h.sack, now, ext, ext_len);
    nicemu::fabric::for_each_record(pkt.data(), h, [&](const wire::RecordHeader& rh, const uint8_t* payload) {
      if (rh.type != static_cast<uint8_t>(wire::RecordType::kCtl)) return;
      ch.on_record(rh, payload);
    });
    ch.fill(now, out.data(), out.size(), count);
  }
  return 0;
}
