// fabric_bench: the UDP fabric's message rate and coalescing, transport alone. Two
// UdpFabric endpoints (NIC addresses 0 and 1) on loopback in one process and one thread:
// endpoint 0 sends N messages of SIZE bytes to endpoint 1 as fast as its window and
// backlog allow, both event loops are polled in turn, and the run ends when endpoint 1 has
// every message, in order. Prints messages/s, MB/s, UDP packets each way and messages per
// packet (the coalescing factor). Both ends share one core, so the rate is per core.
//   fabric_bench [--messages N] [--size BYTES] [--port P] [--uring auto|off]
//                [--mac auto|aes256gcm|chacha20poly1305]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <spdlog/spdlog.h>

#include "nicemu/daemon/stats_page.h"
#include "nicemu/daemon/transport/udp_fabric.h"

using namespace nicemu;

int main(int argc, char** argv) {
  uint64_t messages = 200000;
  size_t size = 64;
  uint16_t port = 0;
  std::string uring = "auto";
  std::string mac = "auto";
  CLI::App app{"fabric_bench: UDP fabric message rate between two endpoints on loopback"};
  app.add_option("--messages", messages, "messages to send")->check(CLI::Range(1ull, 100'000'000ull));
  app.add_option("--size", size, "bytes per message")->check(CLI::Range(1ul, 60'000ul));
  app.add_option("--port", port, "first UDP port (default: derived from the pid)");
  app.add_option("--uring", uring, "receive path")->check(CLI::IsMember({"auto", "off"}));
  app.add_option("--mac", mac, "packet AEAD")->check(CLI::IsMember({"auto", "aes256gcm", "chacha20poly1305"}));
  CLI11_PARSE(app, argc, argv);
  if (port == 0) port = static_cast<uint16_t>(21000 + (getpid() % 1000) * 2);
  spdlog::set_level(spdlog::level::warn);

  std::string map_text = fabric::generate({"127.0.0.1"}, 2, port);
  uint8_t key[abi::wire::kKeyBytes];
  for (size_t i = 0; i < sizeof key; ++i) key[i] = static_cast<uint8_t>(i);
  asio::io_context io_a(1), io_b(1);
  daemon::StatsPage page_a("", 0), page_b("", 1);
  uint64_t received = 0, bad_order = 0;
  std::vector<uint8_t> msg(size, 0x5a);
  daemon::UdpFabric a(io_a, 0, fabric::FabricMap::parse(map_text, "bench"), key, page_a,
                      [](uint32_t, const uint8_t*, size_t) {}, uring != "off", fabric::parse_mac_alg(mac));
  daemon::UdpFabric b(
      io_b, 1, fabric::FabricMap::parse(map_text, "bench"), key, page_b,
      [&](uint32_t, const uint8_t* m, size_t n) {
        uint64_t seq;
        std::memcpy(&seq, m, sizeof seq);
        if (n != size || seq != received) ++bad_order;
        ++received;
      },
      uring != "off", fabric::parse_mac_alg(mac));
  a.start();
  b.start();
  namespace nc = abi::counters::node;
  auto t0 = std::chrono::steady_clock::now();
  uint64_t sent = 0;
  while (received < messages) {
    // Offer messages until the channel pushes back (window and backlog full).
    while (sent < messages) {
      uint64_t seq = sent;
      std::memcpy(msg.data(), &seq, std::min(sizeof seq, size));
      if (!a.send(1, msg.data(), msg.size())) break;
      ++sent;
    }
    io_b.poll();
    io_a.poll();
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) break;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t pa = page_a.node(nc::fabric_tx_packets).value(), pb = page_b.node(nc::fabric_tx_packets).value();
  uint64_t rtx = page_a.node(nc::fabric_retransmits).value();
  std::printf("%-10s %-8s %12s %10s %12s %12s %10s %8s\n", "receive", "size", "messages", "Mmsg/s", "MB/s",
              "pkts a->b", "pkts b->a", "msg/pkt");
  std::printf("%-10s %-8zu %12lu %10.3f %12.1f %12lu %10lu %8.1f\n", uring == "off" ? "recvmmsg" : "io_uring", size,
              static_cast<unsigned long>(received), received / s / 1e6, received * size / s / 1e6,
              static_cast<unsigned long>(pa), static_cast<unsigned long>(pb), pa ? double(received) / pa : 0.0);
  std::printf("retransmitted records: %lu; out of order or wrong size: %lu\n", static_cast<unsigned long>(rtx),
              static_cast<unsigned long>(bad_order));
  return received == messages && bad_order == 0 ? 0 : 1;
}
