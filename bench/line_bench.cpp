// line_bench: the floor that cross-core cache-line transfers put under a same-host message,
// for the two shapes that matter when nicemu is compared with UCX's shared-memory transport.
//   one_line   the message and its "it is there" flag share one 64-byte line, as in a FIFO
//              element of UCX posix: the receiver spins on the line and has the payload.
//   two_lines  the flag is in one line and the payload in another, written payload first, as
//              an SMSG message (mailbox slot) and its remote CQ event: the receiver spins on
//              the event's line and then reads the slot, a second transfer that cannot
//              start before the first has arrived.
// Two threads pinned to two CPUs ping-pong 8-byte messages; one-way latency is half the
// round trip. Rounds alternate the two shapes, and the ratio two_lines / one_line of each
// round is printed with the median, since a VM's cross-core cost changes from minute to
// minute (both shapes of a round see the same machine).
//   line_bench [--cpus A,B] [--iters N] [--rounds R]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

struct alignas(64) Line {
  std::atomic<uint64_t> flag{0};
  uint64_t payload = 0;
};

// One direction of a channel: the event line and the payload line (two_lines); one_line
// uses the event line for both. The lines are pages apart, as a CQ ring and a mailbox are,
// so the adjacent-line prefetcher cannot bring the slot along with the event.
struct Direction {
  Line event;
  char gap1[4096 - sizeof(Line)];
  Line slot;
  char gap2[4096 - sizeof(Line)];
};

struct Shared {
  Direction to_b, to_a;
};

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

inline void send(Direction& d, uint64_t seq, bool two_lines) {
  if (two_lines) {
    d.slot.payload = seq * 3;
    d.slot.flag.store(seq, std::memory_order_release);  // the slot's own sequence word
    d.event.flag.store(seq, std::memory_order_release);
  } else {
    d.event.payload = seq * 3;
    d.event.flag.store(seq, std::memory_order_release);
  }
}

inline uint64_t receive(Direction& d, uint64_t seq, bool two_lines) {
  while (d.event.flag.load(std::memory_order_acquire) != seq) {
  }
  if (!two_lines) return d.event.payload;
  // The receiver learns of the message from the event, then reads the slot.
  while (d.slot.flag.load(std::memory_order_acquire) != seq) {
  }
  return d.slot.payload;
}

// Round trips from thread A; returns one-way ns.
double run(int cpu_a, int cpu_b, uint64_t iters, bool two_lines) {
  auto* s = new Shared;
  uint64_t bad = 0;
  std::thread b([&] {
    pin(cpu_b);
    for (uint64_t i = 1; i <= iters; ++i) {
      if (receive(s->to_b, i, two_lines) != i * 3) ++bad;
      send(s->to_a, i, two_lines);
    }
  });
  pin(cpu_a);
  const uint64_t warm = iters / 10;
  std::chrono::steady_clock::time_point t0;
  for (uint64_t i = 1; i <= iters; ++i) {
    if (i == warm + 1) t0 = std::chrono::steady_clock::now();
    send(s->to_b, i, two_lines);
    if (receive(s->to_a, i, two_lines) != i * 3) ++bad;
  }
  const auto t1 = std::chrono::steady_clock::now();
  b.join();
  delete s;
  if (bad) std::fprintf(stderr, "line_bench: %llu payloads wrong\n", static_cast<unsigned long long>(bad));
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / double(iters - warm) / 2;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cpus = "0,1";
  uint64_t iters = 1'000'000;
  unsigned rounds = 7;
  CLI::App app{"line_bench: one-way latency of a message in one cache line against two (flag, then payload)"};
  app.add_option("--cpus", cpus, "CPUs of the two threads (default 0,1)");
  app.add_option("--iters", iters, "round trips per run (a tenth of them untimed first)")
      ->check(CLI::Range(uint64_t{100}, uint64_t{1'000'000'000}));
  app.add_option("--rounds", rounds, "rounds, each one run of both shapes")->check(CLI::Range(1u, 1000u));
  CLI11_PARSE(app, argc, argv);
  int a = 0, b = 1;
  if (std::sscanf(cpus.c_str(), "%d,%d", &a, &b) != 2) {
    std::fprintf(stderr, "line_bench: --cpus wants A,B\n");
    return 2;
  }
  std::vector<double> one, two, ratio;
  std::printf("round  one_line_ns  two_lines_ns  ratio\n");
  for (unsigned r = 0; r < rounds; ++r) {
    // Alternate which shape goes first, so neither always meets the machine first.
    const bool two_first = r % 2;
    double t_two = two_first ? run(a, b, iters, true) : 0;
    const double t_one = run(a, b, iters, false);
    if (!two_first) t_two = run(a, b, iters, true);
    one.push_back(t_one);
    two.push_back(t_two);
    ratio.push_back(t_two / t_one);
    std::printf("%5u  %11.1f  %12.1f  %5.2f\n", r + 1, t_one, t_two, t_two / t_one);
  }
  std::printf("median %10.1f  %12.1f  %5.2f (median of the per-round ratios)\n", median(one), median(two), median(ratio));
  return 0;
}
