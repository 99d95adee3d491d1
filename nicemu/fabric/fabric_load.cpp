#include "nicemu/fabric/fabric_load.h"

#include <algorithm>

namespace nicemu::fabric {

namespace {
// The ack rate is taken over a sliding second, as two halves.
constexpr uint64_t kAckHalfUs = 500'000;
// A burst is this long at the budget's rate.
constexpr double kBurstS = 0.1;
}  // namespace

void FabricLoad::late_enter(uint64_t now_us) {
  ++late_;
  st_.most_late = std::max(st_.most_late, late_);
  check(now_us);
}

void FabricLoad::answered(uint64_t now_us, uint64_t& window, bool slow) {
  check(now_us);  // rolls the windows over to now
  if (window == window_) return;
  window = window_;
  ++answering_cur_;
  if (slow) {
    ++slow_cur_;
    check(now_us);  // a slow answer may complete the crowd
  }
}

void FabricLoad::own_late(uint64_t now_us, uint64_t late_us) {
  if (late_us < cfg_.own_late_us) return;
  // Bounded by the overload horizon: past it a dead peer must be seen again.
  enter(now_us, std::clamp(cfg_.own_late_hold_factor * late_us, cfg_.hold_us,
                           std::max(cfg_.hold_us, cfg_.overload_horizon_us)));
}

void FabricLoad::enter(uint64_t now_us, uint64_t hold_us) {
  hold_until_ = std::max(hold_until_, now_us + hold_us);
  if (!over_) {
    over_ = true;
    over_since_ = now_us;
    ++st_.overload_episodes;
  }
}

void FabricLoad::check(uint64_t now_us) {
  const uint64_t w = window_of(now_us);
  if (w != window_) {
    const bool next = w == window_ + 1;
    answering_prev_ = next ? answering_cur_ : 0;
    slow_prev_ = next ? slow_cur_ : 0;
    answering_cur_ = slow_cur_ = 0;
    window_ = w;
  }
  // Many late or slow together, and not a few late among many answering promptly (a failure
  // of some peers).
  const uint32_t answering = std::max(answering_cur_, answering_prev_);
  const uint64_t crowd = uint64_t{late_} + slow();
  if (crowd >= cfg_.crowd_min && 2 * crowd >= answering) enter(now_us, cfg_.hold_us);
}

bool FabricLoad::overloaded(uint64_t now_us) {
  check(now_us);
  if (over_ && now_us >= hold_until_) {
    over_ = false;
    st_.overloaded_us += hold_until_ > over_since_ ? hold_until_ - over_since_ : 0;
  }
  return over_;
}

void FabricLoad::acked(uint64_t records, uint64_t now_us) {
  refill(now_us);
  acked_cur_ += records;
}

void FabricLoad::refill(uint64_t now_us) {
  if (now_us >= acked_at_ + kAckHalfUs) {
    acked_prev_ = now_us >= acked_at_ + 2 * kAckHalfUs ? 0 : acked_cur_;
    acked_cur_ = 0;
    acked_at_ = now_us;
  }
  rate_ = cfg_.retransmit_floor_per_s + cfg_.ack_share * static_cast<double>(acked_prev_ + acked_cur_);
  const double burst = std::max(cfg_.burst_min, rate_ * kBurstS);
  if (tokens_ < 0) {
    tokens_ = burst;
    refilled_us_ = now_us;
  }
  if (now_us > refilled_us_) {
    tokens_ += static_cast<double>(now_us - refilled_us_) * 1e-6 * rate_;
    refilled_us_ = now_us;
  }
  tokens_ = std::min(tokens_, burst);
}

bool FabricLoad::take_retransmit(uint64_t now_us) {
  refill(now_us);
  if (tokens_ < 1) {
    ++st_.retransmits_deferred;
    return false;
  }
  tokens_ -= 1;
  ++st_.retransmits_granted;
  return true;
}

}  // namespace nicemu::fabric
