// What one daemon sees of the load on all its reliable channels at once (one FabricLoad per
// daemon, shared by every channel it owns): the part of liveness and retransmission that a
// single channel cannot judge alone.
//
// Liveness under overload. One channel cannot tell a dead peer from a peer whose daemon
// gets no CPU: both acknowledge nothing. The daemon can: one peer silent while the others
// answer is a failure; many peers late together, or this daemon's own loop running late,
// is a starved host (hundreds of daemons on two CPUs), where every peer answers seconds
// late. A channel counts itself *late* while records are in flight and its peer has
// acknowledged nothing for half its horizon; a channel *answers* when an ack makes progress
// (counted once per channel per window), and answers *slowly* when its smoothed round trip
// is over a sixteenth of its configured horizon (its own horizon already stretched by round
// trips: seconds of queueing on a host, never a healthy path). The daemon is *overloaded*
// while at least `crowd_min` channels are late or answered slowly and they are no fewer
// than half the channels that answered, in the last window or the one before, or while its
// own loop ran `own_late_us` late; the state holds for `hold_us` after the condition was
// last seen (a burst of answers must not end it for the channels still waiting), after the
// loop's lateness for `own_late_hold_factor` times it if longer (a loop seconds late comes
// in bursts seconds apart: the state must not lapse between them). Slow
// answers count because with hundreds of peers on a starved host only a few are silent at
// once while the rest answer seconds late: "one silent while the others answer" is a failure
// only if the others answer promptly. A channel whose silence overlapped an overloaded
// period, or that is silent while the daemon is overloaded, gets `overload_horizon_us`
// (bounded: a dead peer on a starved host is still declared down by then) until it answers
// once: the state lapsing between bursts of this daemon's lateness does not take down at
// once the peers that were kept up through it. Otherwise the channel's own horizon is the
// verdict.
//
// Retransmission budget. Records whose own timer ran out are resent only against a token
// bucket shared by all channels: `retransmit_floor_per_s` plus `ack_share` of the records
// this daemon's peers acknowledged per second (what the fabric demonstrably carries), at
// most a tenth of a second of that rate (at least `burst_min`) in one burst. A timer
// expiry without a token is put off by the record's own timeout (the channel counts it
// deferred); fast retransmits (the peer's selective acks prove it answers) and records the
// kernel refused are not budgeted. So thousands of backed-off channels offer what the
// daemon's peers process, not ten times more.
//
// No clock, no sockets: callers pass the time.
#pragma once
#include <algorithm>
#include <cstdint>

namespace nicemu::fabric {

struct LoadConfig {
  uint32_t crowd_min = 4;                  // late channels at least, to call it overload
  uint64_t hold_us = 2'000'000;            // overload holds this long after last seen
  uint64_t overload_horizon_us = 20'000'000;  // a channel's horizon while overloaded
  uint64_t own_late_us = 250'000;          // this daemon's loop this late: overloaded
  uint64_t own_late_hold_factor = 8;       // ... held this many times as long (at least hold_us)
  uint64_t answer_window_us = 1'000'000;   // answering channels are counted per window
  double retransmit_floor_per_s = 100;     // timer retransmissions always allowed
  double ack_share = 0.25;                 // plus this share of records acknowledged per s
  double burst_min = 32;                   // tokens a quiet daemon may spend at once
};

struct LoadStats {
  uint64_t overload_episodes = 0;   // times the daemon entered the overloaded state
  uint64_t overloaded_us = 0;       // time spent in it (counted when it ends)
  uint64_t retransmits_granted = 0, retransmits_deferred = 0;
  uint32_t most_late = 0;           // the most channels late at once
};

class FabricLoad {
 public:
  explicit FabricLoad(LoadConfig cfg = {}) : cfg_(cfg) {}
  const LoadConfig& config() const { return cfg_; }

  // --- liveness ---
  void late_enter(uint64_t now_us);
  void late_leave() {
    if (late_ > 0) --late_;
  }
  // A channel's ack made progress; `window` is the channel's note of the window it last
  // answered in (so each channel counts once per window); `slow`: its round trips are long.
  void answered(uint64_t now_us, uint64_t& window, bool slow = false);
  // This daemon served a channel `late_us` after the channel's own deadline.
  void own_late(uint64_t now_us, uint64_t late_us);
  // Whether the daemon is overloaded at `now_us` (see the top of this file).
  bool overloaded(uint64_t now_us);
  // The horizon for a channel whose own (unloaded) horizon is `base_us` and whose peer has
  // been silent since `silent_since_us`: stretched if the daemon is overloaded now or was
  // at any time since (hold_until_ is when the last overloaded period ended).
  uint64_t horizon(uint64_t base_us, uint64_t now_us, uint64_t silent_since_us) {
    const bool excused = overloaded(now_us) || silent_since_us < hold_until_;
    return excused && cfg_.overload_horizon_us > base_us ? cfg_.overload_horizon_us : base_us;
  }
  uint32_t late() const { return late_; }
  // Channels that answered slowly in the current window or the one before (the larger).
  uint32_t slow() const { return std::max(slow_cur_, slow_prev_); }

  // --- retransmission budget ---
  // Records the peers acknowledged (new ones), which size the budget.
  void acked(uint64_t records, uint64_t now_us);
  // One timer retransmission: true (and a token spent) if the budget allows it now.
  bool take_retransmit(uint64_t now_us);
  // Tokens per second the budget refills at, as of the last refill.
  double rate_per_s() const { return rate_; }

  const LoadStats& stats() const { return st_; }

 private:
  void check(uint64_t now_us);
  void enter(uint64_t now_us, uint64_t hold_us);  // overloaded from now, held that long
  void refill(uint64_t now_us);
  uint64_t window_of(uint64_t now_us) const { return now_us / cfg_.answer_window_us + 1; }

  LoadConfig cfg_;
  uint32_t late_ = 0;
  // Channels that answered in the current window and the one before.
  uint64_t window_ = 0;
  uint32_t answering_cur_ = 0, answering_prev_ = 0;
  uint32_t slow_cur_ = 0, slow_prev_ = 0;  // of those, the ones answering slowly
  bool over_ = false;
  uint64_t over_since_ = 0, hold_until_ = 0;
  // Token bucket; the ack rate over a sliding second (two half windows).
  double tokens_ = -1, rate_ = 0;
  uint64_t refilled_us_ = 0;
  uint64_t acked_cur_ = 0, acked_prev_ = 0, acked_at_ = 0;
  LoadStats st_;
};

}  // namespace nicemu::fabric
