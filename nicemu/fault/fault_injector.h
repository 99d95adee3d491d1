// The fault injector: every decision about one transaction (drop, duplicate, delay, corrupt,
// transient error, SMSG retransmit exhaustion, link down, held for reordering) drawn from a
// seeded, counter-based generator. A decision is a pure function of (seed, stream, index of
// the decision, rule), so a run replays from its seed as long as each stream (one initiating
// CDM, or one link of the fabric) makes its decisions in the same order; no state is shared
// between streams, so processes need not coordinate.
//
// Callers: libugni's same-host paths (fault_engine in ugni/src), the daemon, and the UDP
// fabric's reliable channels (decide(kPacket, peer) per packet sent).
#pragma once
#include <cstdint>

#include "nicemu/abi/fault_layout.h"

namespace nicemu::fault {

using abi::fault::Action;
using abi::fault::Config;
using abi::fault::Kind;

struct Decision {
  Action action = abi::fault::kNone;
  uint32_t delay_us = 0;     // kDelay: how long to hold; kDrop/kCorrupt/kLinkDown: retransmit after
  bool effect_done = false;  // kError: the PUT/AMO was executed before the error was reported
  uint64_t index = 0;        // which decision of the stream this was (1-based), for logs
};

// splitmix64's finaliser: a good 64-bit mixer, so consecutive counters give independent draws.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class Injector {
 public:
  Injector() = default;
  // `stream` names the decision sequence (e.g. NIC address << 32 | inst_id); `epoch_ns` is the
  // CLOCK_MONOTONIC time link windows count from. Resets the decision counters.
  Injector(const Config& cfg, uint64_t stream, uint64_t epoch_ns) { configure(cfg, stream, epoch_ns); }
  void configure(const Config& cfg, uint64_t stream, uint64_t epoch_ns);

  bool enabled() const { return cfg_.enabled != 0; }
  const Config& config() const { return cfg_; }

  // The fate of the next transaction of `kind` to NIC address `peer` at `now_ns`.
  Decision decide(Kind kind, uint32_t peer, uint64_t now_ns);
  // Whether a rule or nth hook names `kind`: a caller that only then decides keeps the
  // decision stream of the other kinds (and their replays) as it was.
  bool selects(Kind kind) const;
  // For a transaction the ordering model lets later ones pass: how long the reorder engine
  // holds it (0: not held). Drawn for the transaction of the last decide().
  uint32_t reorder_hold_us() const;
  // Whether the link to `peer` is down at `now_ns`; if so, when it comes up (CLOCK_MONOTONIC).
  bool link_down(uint32_t peer, uint64_t now_ns, uint64_t* up_ns = nullptr) const;

  // A uniform draw in [0, 2^64) for decision `index` and `salt`; pure.
  uint64_t draw(uint64_t index, uint64_t salt) const {
    return mix64(cfg_.seed ^ mix64(stream_ ^ mix64(index * 0x100 + salt)));
  }

 private:
  uint32_t delay_between(uint64_t index, uint64_t salt) const;

  Config cfg_{};
  uint64_t stream_ = 0;
  uint64_t epoch_ns_ = 0;
  uint64_t index_ = 0;
  uint64_t nth_seen_[abi::fault::kMaxNth] = {};
};

}  // namespace nicemu::fault
