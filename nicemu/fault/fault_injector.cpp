#include "nicemu/fault/fault_injector.h"

#include <algorithm>

namespace nicemu::fault {

namespace af = abi::fault;

namespace {
// Salts: distinct draws of one decision.
constexpr uint64_t kSaltDelay = 0x40, kSaltDone = 0x41, kSaltReorder = 0x42, kSaltReorderDelay = 0x43;

bool in_mask(uint32_t mask, Kind k) { return (mask >> k) & 1u; }
}  // namespace

void Injector::configure(const Config& cfg, uint64_t stream, uint64_t epoch_ns) {
  cfg_ = cfg;
  // Counts from shared memory are untrusted: clamp them to the arrays.
  cfg_.rule_count = std::min(cfg_.rule_count, af::kMaxRules);
  cfg_.nth_count = std::min(cfg_.nth_count, af::kMaxNth);
  cfg_.link_count = std::min(cfg_.link_count, af::kMaxLinks);
  if (cfg_.delay_max_us < cfg_.delay_min_us) cfg_.delay_max_us = cfg_.delay_min_us;
  stream_ = stream;
  epoch_ns_ = epoch_ns;
  index_ = 0;
  std::fill(std::begin(nth_seen_), std::end(nth_seen_), 0);
}

uint32_t Injector::delay_between(uint64_t index, uint64_t salt) const {
  const uint64_t span = uint64_t{cfg_.delay_max_us} - cfg_.delay_min_us + 1;
  return cfg_.delay_min_us + static_cast<uint32_t>(draw(index, salt) % span);
}

bool Injector::link_down(uint32_t peer, uint64_t now_ns, uint64_t* up_ns) const {
  const uint64_t t_ms = now_ns > epoch_ns_ ? (now_ns - epoch_ns_) / 1000000 : 0;
  for (uint32_t i = 0; i < cfg_.link_count; ++i) {
    const af::LinkWindow& w = cfg_.links[i];
    if ((w.peer == af::kAnyPeer || w.peer == peer) && t_ms >= w.down_ms && t_ms < w.up_ms) {
      if (up_ns) *up_ns = epoch_ns_ + w.up_ms * 1000000;
      return true;
    }
  }
  return false;
}

bool Injector::selects(Kind kind) const {
  if (!cfg_.enabled || kind >= af::kKinds) return false;
  for (uint32_t i = 0; i < cfg_.rule_count && i < af::kMaxRules; ++i)
    if (in_mask(cfg_.rules[i].kind_mask, kind)) return true;
  for (uint32_t i = 0; i < cfg_.nth_count && i < af::kMaxNth; ++i)
    if (in_mask(cfg_.nth[i].kind_mask, kind)) return true;
  return false;
}

Decision Injector::decide(Kind kind, uint32_t peer, uint64_t now_ns) {
  Decision d;
  d.index = ++index_;
  if (!cfg_.enabled || kind >= af::kKinds) return d;
  uint64_t up_ns = 0;
  if (link_down(peer, now_ns, &up_ns)) {
    d.action = af::kLinkDown;
    d.delay_us = static_cast<uint32_t>(std::min<uint64_t>((up_ns - now_ns) / 1000 + 1, UINT32_MAX));
    return d;
  }
  Action a = af::kNone;
  for (uint32_t i = 0; i < cfg_.nth_count; ++i) {
    const af::NthHook& h = cfg_.nth[i];
    if (in_mask(h.kind_mask, kind) && ++nth_seen_[i] == h.n && a == af::kNone) a = static_cast<Action>(h.action);
  }
  for (uint32_t i = 0; a == af::kNone && i < cfg_.rule_count; ++i) {
    const af::Rule& r = cfg_.rules[i];
    if (!in_mask(r.kind_mask, kind) || (r.peer != af::kAnyPeer && r.peer != peer)) continue;
    if (draw(d.index, i) % af::kPpm < r.ppm) a = static_cast<Action>(r.action);
  }
  if (a >= af::kActions) a = af::kNone;
  d.action = a;
  switch (a) {
    case af::kDelay:
      d.delay_us = delay_between(d.index, kSaltDelay);
      break;
    case af::kDrop:
    case af::kCorrupt:
      d.delay_us = cfg_.retransmit_us;
      break;
    case af::kError:
      d.effect_done = draw(d.index, kSaltDone) % af::kPpm < cfg_.error_done_ppm;
      break;
    default:
      break;
  }
  return d;
}

uint32_t Injector::reorder_hold_us() const {
  if (!cfg_.enabled || cfg_.reorder_ppm == 0 || index_ == 0) return 0;
  if (draw(index_, kSaltReorder) % af::kPpm >= cfg_.reorder_ppm) return 0;
  return std::max<uint32_t>(1, delay_between(index_, kSaltReorderDelay));
}

}  // namespace nicemu::fault
