// fabric_memory: what the UDP fabric costs in memory per peer (issue 46). One measured
// UdpFabric endpoint (NIC address 0, this process, io_uring as in a daemon) and PEERS peer
// endpoints (NIC addresses 1..PEERS, a child process, one thread polling them all) on
// loopback: an all-to-all where endpoint 0 sends BYTES to every peer and every peer BYTES
// to it, in messages of MSG bytes (32 KiB: an RDMA piece). Then everything idles for
// IDLE_MS. Prints the measured process's resident memory (VmRSS, and its anonymous part)
// with the endpoint started and no peer yet, after the all-to-all (everything delivered and
// acknowledged) and after the idle spell, per peer and in all; where the fabric's status
// names each channel's resident bytes (resident_bytes), their sum too.
//   fabric_memory [--peers N] [--bytes B] [--msg M] [--idle-ms T] [--port P]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "nicemu/daemon/stats_page.h"
#include "nicemu/daemon/transport/udp_fabric.h"

using namespace nicemu;
using Clock = std::chrono::steady_clock;

namespace {

// Liveness is not what is measured: on a loaded 2-CPU host one thread serving 255 peer
// endpoints can leave a peer silent past the 1.8 s default, and a channel gone down drops
// what it holds. 60 s here.
fabric::ChannelConfig channel_config() {
  fabric::ChannelConfig c;
  c.silent_after_us = 60'000'000;
  return c;
}

// kB of a /proc/self/status field (VmRSS, RssAnon).
uint64_t status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') return std::stoull(line.substr(n + 1));
  return 0;
}

// Sum of the channels' resident_bytes in the fabric's status (0 where the build has none).
uint64_t channels_resident(const daemon::UdpFabric& f, bool& known) {
  uint64_t sum = 0;
  known = false;
  const nlohmann::json st = f.status();
  for (const auto& p : st["peers"])
    if (p.contains("resident_bytes")) {
      known = true;
      sum += p["resident_bytes"].get<uint64_t>();
    }
  return sum;
}

// Streams `bytes` to each of `to` in `msg`-byte messages (first 8 bytes: the message's
// number), as the backlog takes them; `left[i]` counts what is still to send to to[i].
struct Streamer {
  daemon::UdpFabric& f;
  std::vector<uint32_t> to;
  std::vector<uint64_t> left;
  std::vector<uint64_t> seq;
  std::vector<uint8_t> buf;
  Streamer(daemon::UdpFabric& fab, std::vector<uint32_t> peers, uint64_t bytes, size_t msg)
      : f(fab), to(std::move(peers)), left(to.size(), bytes), seq(to.size(), 0), buf(msg, 0x5a) {}
  bool offer() {
    bool all = true;
    for (size_t i = 0; i < to.size(); ++i) {
      while (left[i] > 0) {
        const size_t n = std::min<uint64_t>(left[i], buf.size());
        std::memcpy(buf.data(), &seq[i], sizeof seq[i]);
        if (!f.send(to[i], buf.data(), n)) break;
        left[i] -= n;
        ++seq[i];
      }
      all = all && left[i] == 0;
    }
    return all;
  }
};

// Received bytes and messages in order from each NIC address.
struct Sink {
  std::vector<uint64_t> bytes, next;
  uint64_t bad = 0;
  explicit Sink(size_t nics) : bytes(nics, 0), next(nics, 0) {}
  void operator()(uint32_t from, const uint8_t* m, size_t n) {
    uint64_t s = 0;
    std::memcpy(&s, m, std::min(sizeof s, n));
    if (from >= next.size() || s != next[from]) {
      ++bad;
      return;
    }
    ++next[from];
    bytes[from] += n;
  }
};

bool drained(const daemon::UdpFabric& f) {
  const nlohmann::json st = f.status();
  uint64_t up = 0;
  for (const auto& p : st["peers"]) {
    if (p["queued_records"].get<uint64_t>() != 0) return false;
    up += p["state"] == "up";
  }
  return up == st["peers"].size();  // a channel gone down has nothing queued either
}

void child(const std::string& map_text, const uint8_t (&key)[abi::wire::kKeyBytes], uint32_t peers, uint64_t bytes,
           size_t msg, int ready_fd) {
  asio::io_context io(1);
  std::vector<std::unique_ptr<daemon::StatsPage>> pages;
  std::vector<std::unique_ptr<daemon::UdpFabric>> eps;
  std::vector<std::unique_ptr<Streamer>> st;
  for (uint32_t nic = 1; nic <= peers; ++nic) {
    pages.push_back(std::make_unique<daemon::StatsPage>("", nic));
    eps.push_back(std::make_unique<daemon::UdpFabric>(io, nic, fabric::FabricMap::parse(map_text, "bench"), key,
                                                      *pages.back(), [](uint32_t, const uint8_t*, size_t) {}, false,
                                                      std::nullopt, channel_config()));
    eps.back()->start();
    st.push_back(std::make_unique<Streamer>(*eps.back(), std::vector<uint32_t>{0}, bytes, msg));
  }
  // Every peer listens before endpoint 0 sends (else its first records go unanswered).
  const char ok = 1;
  if (write(ready_fd, &ok, 1) != 1) _exit(1);
  close(ready_fd);
  // Runs until the parent stops it (SIGTERM): its peers keep acknowledging meanwhile.
  for (;;) {
    bool all = true;
    for (auto& s : st) all = s->offer() && all;
    io.run_for(std::chrono::milliseconds(all ? 50 : 1));
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t peers = 255;
  uint64_t bytes = 1 << 20;
  size_t msg = 32 * 1024;
  uint64_t idle_ms = 1000;
  uint16_t port = 0;
  CLI::App app{"fabric_memory: the UDP fabric's resident memory per peer after an all-to-all and after idling"};
  app.add_option("--peers", peers, "peer endpoints")->check(CLI::Range(1u, 1000u));
  app.add_option("--bytes", bytes, "bytes each way per peer")->check(CLI::Range(0ull, 1ull << 34));
  app.add_option("--msg", msg, "bytes per message")->check(CLI::Range(8ul, 60'000ul));
  app.add_option("--idle-ms", idle_ms, "idle spell after the all-to-all");
  app.add_option("--port", port, "first UDP port (default: derived from the pid)");
  CLI11_PARSE(app, argc, argv);
  if (port == 0) port = static_cast<uint16_t>(30000 + (getpid() % 100) * 300);
  spdlog::set_level(spdlog::level::warn);
  const std::string map_text = fabric::generate({"127.0.0.1"}, peers + 1, port);
  uint8_t key[abi::wire::kKeyBytes];
  for (size_t i = 0; i < sizeof key; ++i) key[i] = static_cast<uint8_t>(i * 7 + 1);

  int ready[2];
  if (pipe(ready) != 0) {
    std::perror("fabric_memory: pipe");
    return 1;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fabric_memory: fork");
    return 1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlives the measurement
    close(ready[0]);
    child(map_text, key, peers, bytes, msg, ready[1]);
    _exit(0);
  }
  close(ready[1]);
  char ok_byte = 0;
  if (read(ready[0], &ok_byte, 1) != 1) {
    std::fprintf(stderr, "fabric_memory: the peers' process failed to start\n");
    waitpid(pid, nullptr, 0);
    return 1;
  }
  auto stop_child = [&] {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  };
  asio::io_context io(1);
  daemon::StatsPage page("", 0);
  Sink sink(peers + 1);
  daemon::UdpFabric ep(io, 0, fabric::FabricMap::parse(map_text, "bench"), key, page, std::ref(sink), true, std::nullopt,
                      channel_config());
  ep.start();
  io.run_for(std::chrono::milliseconds(200));  // the peers' sockets bound, the announces out
  const uint64_t rss0 = status_kb("VmRSS"), anon0 = status_kb("RssAnon");

  std::vector<uint32_t> all;
  for (uint32_t nic = 1; nic <= peers; ++nic) all.push_back(nic);
  Streamer out(ep, all, bytes, msg);
  const auto t0 = Clock::now();
  bool ok = false;
  while (Clock::now() - t0 < std::chrono::seconds(600)) {
    const bool sent = out.offer();
    io.run_for(std::chrono::milliseconds(1));
    bool in = true;
    for (uint32_t nic = 1; nic <= peers && in; ++nic) in = sink.bytes[nic] == bytes;
    if (sent && in && drained(ep)) {
      ok = true;
      break;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  // Let the last acks settle (a few round trips), well inside the idle release.
  io.run_for(std::chrono::milliseconds(20));
  bool known = false;
  const uint64_t rss1 = status_kb("VmRSS"), anon1 = status_kb("RssAnon");
  const uint64_t ch1 = channels_resident(ep, known);
  const auto t1 = Clock::now();
  while (Clock::now() - t1 < std::chrono::milliseconds(idle_ms)) io.run_for(std::chrono::milliseconds(10));
  const uint64_t rss2 = status_kb("VmRSS"), anon2 = status_kb("RssAnon");
  const uint64_t ch2 = channels_resident(ep, known);
  stop_child();

  auto mib = [](uint64_t kb) { return static_cast<double>(kb) / 1024.0; };
  auto per = [&](uint64_t kb, uint64_t base) { return kb > base ? static_cast<double>(kb - base) / peers : 0.0; };
  std::printf("fabric_memory: %u peers, %llu bytes each way per peer in %zu-byte messages, all-to-all in %.1f s%s\n",
              peers, static_cast<unsigned long long>(bytes), msg, secs, ok ? "" : " (INCOMPLETE)");
  std::printf("%-26s %10s %10s %14s %16s\n", "", "VmRSS MiB", "anon MiB", "anon KiB/peer", "channels KiB/peer");
  std::printf("%-26s %10.1f %10.1f %14s %16s\n", "endpoint, no peer yet", mib(rss0), mib(anon0), "-", "-");
  auto row = [&](const char* what, uint64_t rss, uint64_t anon, uint64_t ch) {
    char chs[32] = "n/a";
    if (known) std::snprintf(chs, sizeof chs, "%.1f", static_cast<double>(ch) / 1024.0 / peers);
    std::printf("%-26s %10.1f %10.1f %14.1f %16s\n", what, mib(rss), mib(anon), per(anon, anon0), chs);
  };
  row("after the all-to-all", rss1, anon1, ch1);
  char idle[64];
  std::snprintf(idle, sizeof idle, "after %llu ms idle", static_cast<unsigned long long>(idle_ms));
  row(idle, rss2, anon2, ch2);
  if (sink.bad) std::printf("messages out of order or unexpected: %llu\n", static_cast<unsigned long long>(sink.bad));
  return ok && sink.bad == 0 ? 0 : 1;
}
