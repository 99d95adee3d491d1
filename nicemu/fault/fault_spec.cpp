#include "nicemu/fault/fault_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

namespace nicemu::fault {

namespace af = abi::fault;

namespace {

constexpr uint32_t kFma = (1u << af::kFmaPut) | (1u << af::kFmaGet) | (1u << af::kAmo);
constexpr uint32_t kRdma = (1u << af::kRdmaPut) | (1u << af::kRdmaGet);
// "any" is every transaction; registrations and datagrams are failed only when named (kinds
// reg, datagram), so a spec written before they could be keeps its meaning and its replays.
constexpr uint32_t kAll = ((1u << af::kReg) - 1) & ~(1u << af::kDatagram);

bool kind_mask(std::string_view s, uint32_t& out) {
  if (s == "any") return out = kAll, true;
  if (s == "fma") return out = kFma, true;
  if (s == "rdma") return out = kRdma, true;
  for (uint32_t k = 0; k < af::kKinds; ++k)
    if (s == af::kKindNames[k]) return out = 1u << k, true;
  return false;
}

std::string mask_name(uint32_t m) {
  if (m == kAll) return "any";
  if (m == kFma) return "fma";
  if (m == kRdma) return "rdma";
  for (uint32_t k = 0; k < af::kKinds; ++k)
    if (m == (1u << k)) return af::kKindNames[k];
  return "";
}

bool action_of(std::string_view s, uint8_t& out) {
  for (uint8_t a = 1; a < af::kLinkDown; ++a)  // link_down has its own syntax
    if (s == af::kActionNames[a]) return out = a, true;
  return false;
}

bool parse_u64(std::string_view s, uint64_t& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}
bool parse_u32(std::string_view s, uint32_t& v) {
  uint64_t x;
  if (!parse_u64(s, x) || x > UINT32_MAX) return false;
  v = static_cast<uint32_t>(x);
  return true;
}
// A probability 0..1 as parts per million ("0.1", "1", "5%").
bool parse_prob(std::string_view s, uint32_t& ppm) {
  bool pct = !s.empty() && s.back() == '%';
  if (pct) s.remove_suffix(1);
  double d;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(d)) return false;
  if (pct) d /= 100;
  if (d < 0 || d > 1) return false;
  ppm = static_cast<uint32_t>(std::lround(d * af::kPpm));
  return true;
}
bool parse_range(std::string_view s, uint64_t& a, uint64_t& b) {
  size_t dots = s.find("..");
  if (dots == std::string_view::npos) return parse_u64(s, a) && (b = a, true);
  return parse_u64(s.substr(0, dots), a) && parse_u64(s.substr(dots + 2), b) && a <= b;
}
bool parse_peer(std::string_view s, uint32_t& peer) {
  if (s == "*") return peer = af::kAnyPeer, true;
  return parse_u32(s, peer) && peer != af::kAnyPeer;
}

std::string prob_text(uint32_t ppm) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", ppm / double(af::kPpm));
  return b;
}

}  // namespace

af::Config default_config() {
  af::Config c{};
  c.enabled = 0;
  c.ordering = af::kOrderAuto;
  c.reorder_window = 16;
  c.delay_min_us = 100;
  c.delay_max_us = 2000;
  c.retransmit_us = 200;
  c.error_done_ppm = af::kPpm / 2;
  c.max_retrans = 16;
  return c;
}

bool valid_config(const af::Config& c, std::string& error) {
  auto fail = [&](const char* what) { return error = what, false; };
  if (c.rule_count > af::kMaxRules || c.nth_count > af::kMaxNth || c.link_count > af::kMaxLinks)
    return fail("too many rules, nth hooks or link windows");
  if (c.ordering > af::kOrderRelaxed) return fail("unknown ordering");
  if (c.reorder_ppm > af::kPpm || c.error_done_ppm > af::kPpm) return fail("probability above 1");
  if (c.delay_min_us > c.delay_max_us || c.delay_max_us > 60000000) return fail("bad delay range (max 60 s)");
  if (c.retransmit_us > 60000000) return fail("retransmit delay above 60 s");
  if (c.reorder_window == 0 || c.reorder_window > 4096) return fail("window must be 1..4096");
  if (c.max_retrans == 0 || c.max_retrans > 65535) return fail("max_retrans must be 1..65535");
  for (uint32_t i = 0; i < c.rule_count; ++i) {
    const af::Rule& r = c.rules[i];
    if (r.kind_mask == 0 || r.kind_mask >> af::kKinds || r.ppm > af::kPpm || r.action == af::kNone ||
        r.action >= af::kLinkDown)
      return fail("malformed rule");
  }
  for (uint32_t i = 0; i < c.nth_count; ++i) {
    const af::NthHook& h = c.nth[i];
    if (h.kind_mask == 0 || h.kind_mask >> af::kKinds || h.n == 0 || h.action == af::kNone ||
        h.action >= af::kLinkDown)
      return fail("malformed nth hook");
  }
  for (uint32_t i = 0; i < c.link_count; ++i)
    if (c.links[i].down_ms > c.links[i].up_ms) return fail("link window ends before it starts");
  return true;
}

std::vector<std::string> hardware_notes(const af::Config& c) {
  std::vector<std::string> notes;
  if (c.ordering == af::kOrderDefault || c.ordering == af::kOrderRelaxed)
    notes.push_back(std::string("stress, beyond the hardware: ordering=") + af::kOrderingNames[c.ordering] +
                    " also reorders posts made strict by GNI_DLVMODE_IN_ORDER or GNI_MEM_STRICT_PI_ORDERING, "
                    "which Gemini/Aries keep in order (ordering=auto follows them)");
  auto rule_notes = [&](uint32_t mask, uint8_t action, const std::string& text) {
    if (mask == (1u << af::kDatagram) && (action == af::kDup || action == af::kDelay))
      notes.push_back("no effect: " + text +
                      " (datagrams act on error and corrupt = GNI_POST_ERROR, drop and exhaust = GNI_POST_TIMEOUT)");
    else if (mask == (1u << af::kPacket) && (action == af::kError || action == af::kExhaust))
      notes.push_back("no effect: " + text + " (the fabric acts on packet drop, dup, delay and corrupt only)");
    else if ((mask & (1u << af::kReg)) && action != af::kError && action != af::kExhaust)
      notes.push_back("no effect on registrations: " + text +
                      " (reg acts on error = GNI_RC_ERROR_RESOURCE and exhaust = GNI_RC_ERROR_NOMEM only)");
  };
  for (uint32_t i = 0; i < c.rule_count && i < af::kMaxRules; ++i) {
    const af::Rule& r = c.rules[i];
    if (r.action < af::kActions)
      rule_notes(r.kind_mask, r.action, mask_name(r.kind_mask) + "." + af::kActionNames[r.action]);
  }
  for (uint32_t i = 0; i < c.nth_count && i < af::kMaxNth; ++i) {
    const af::NthHook& h = c.nth[i];
    if (h.action < af::kActions)
      rule_notes(h.kind_mask, h.action, "nth=" + mask_name(h.kind_mask) + ":" + std::to_string(h.n) + ":" +
                                            af::kActionNames[h.action]);
  }
  return notes;
}

bool parse_spec(std::string_view spec, af::Config& c, std::string& error, bool* seed_given) {
  std::vector<std::string_view> toks;
  size_t i = 0;
  while (i < spec.size()) {
    while (i < spec.size() && (spec[i] == ' ' || spec[i] == ',' || spec[i] == '\t' || spec[i] == '\n')) ++i;
    size_t j = i;
    while (j < spec.size() && spec[j] != ' ' && spec[j] != ',' && spec[j] != '\t' && spec[j] != '\n') ++j;
    if (j > i) toks.push_back(spec.substr(i, j - i));
    i = j;
  }
  // Counts past the arrays can only come from memory somebody scribbled on (a copy of a
  // page): never index with them. Found by fuzzing (fuzz/regressions/fault_page).
  c.rule_count = std::min(c.rule_count, af::kMaxRules);
  c.nth_count = std::min(c.nth_count, af::kMaxNth);
  c.link_count = std::min(c.link_count, af::kMaxLinks);
  // An explicit on/off (the last one) decides over the enabling by rules, so the canonical
  // text of a disabled configuration ("off seed=... reorder=0 ...", to_spec) parses back
  // disabled. Found by fuzzing (fuzz/regressions/fault_spec).
  int explicit_enabled = -1;
  for (std::string_view t : toks) {
    auto bad = [&] { return error = "bad fault token '" + std::string(t) + "'", false; };
    if (t == "on") { c.enabled = 1, explicit_enabled = 1; continue; }
    if (t == "off") { c.enabled = 0, explicit_enabled = 0; continue; }
    size_t eq = t.find('=');
    if (eq == std::string_view::npos) return bad();
    std::string_view key = t.substr(0, eq), val = t.substr(eq + 1);
    uint64_t a, b;
    if (key == "seed") {
      if (!parse_u64(val, c.seed)) return bad();
      if (seed_given) *seed_given = true;
    } else if (key == "ordering") {
      bool ok = false;
      for (uint32_t o = 0; o <= af::kOrderRelaxed; ++o)
        if (val == af::kOrderingNames[o]) c.ordering = o, ok = true;
      if (!ok) return bad();
    } else if (key == "reorder") {
      if (!parse_prob(val, c.reorder_ppm)) return bad();
      c.enabled = 1;
    } else if (key == "window") {
      if (!parse_u32(val, c.reorder_window) || c.reorder_window == 0 || c.reorder_window > 4096) return bad();
    } else if (key == "delay_us") {
      if (!parse_range(val, a, b) || b > 60000000) return bad();
      c.delay_min_us = static_cast<uint32_t>(a);
      c.delay_max_us = static_cast<uint32_t>(b);
    } else if (key == "retransmit_us") {
      if (!parse_u32(val, c.retransmit_us) || c.retransmit_us > 60000000) return bad();
    } else if (key == "error_done") {
      if (!parse_prob(val, c.error_done_ppm)) return bad();
    } else if (key == "max_retrans") {
      if (!parse_u32(val, c.max_retrans) || c.max_retrans == 0 || c.max_retrans > 65535) return bad();
    } else if (key == "nth") {
      // KIND:N:ACTION
      size_t c1 = val.find(':'), c2 = val.rfind(':');
      if (c1 == std::string_view::npos || c2 == c1) return bad();
      af::NthHook h{};
      if (!kind_mask(val.substr(0, c1), h.kind_mask) || !parse_u64(val.substr(c1 + 1, c2 - c1 - 1), h.n) ||
          h.n == 0 || !action_of(val.substr(c2 + 1), h.action))
        return bad();
      if (c.nth_count >= af::kMaxNth) return error = "too many nth hooks", false;
      c.nth[c.nth_count++] = h;
      c.enabled = 1;
    } else if (key == "link_down") {
      // PEER@A..Bms
      size_t at = val.find('@');
      if (at == std::string_view::npos || !val.ends_with("ms")) return bad();
      af::LinkWindow w{};
      if (!parse_peer(val.substr(0, at), w.peer) ||
          !parse_range(val.substr(at + 1, val.size() - at - 3), w.down_ms, w.up_ms) || w.down_ms == w.up_ms)
        return bad();
      if (c.link_count >= af::kMaxLinks) return error = "too many link windows", false;
      c.links[c.link_count++] = w;
      c.enabled = 1;
    } else {
      // KIND.ACTION=P[@PEER]
      size_t dot = key.find('.');
      if (dot == std::string_view::npos) return bad();
      af::Rule r{};
      r.peer = af::kAnyPeer;
      std::string_view p = val;
      if (size_t at = val.find('@'); at != std::string_view::npos) {
        if (!parse_peer(val.substr(at + 1), r.peer)) return bad();
        p = val.substr(0, at);
      }
      if (!kind_mask(key.substr(0, dot), r.kind_mask) || !action_of(key.substr(dot + 1), r.action) ||
          !parse_prob(p, r.ppm))
        return bad();
      // The same kind/action/peer again replaces the earlier rule (a live change of one knob).
      bool replaced = false;
      for (uint32_t k = 0; k < c.rule_count; ++k)
        if (c.rules[k].kind_mask == r.kind_mask && c.rules[k].action == r.action && c.rules[k].peer == r.peer)
          c.rules[k] = r, replaced = true;
      if (!replaced) {
        if (c.rule_count >= af::kMaxRules) return error = "too many rules", false;
        c.rules[c.rule_count++] = r;
      }
      c.enabled = 1;
    }
  }
  if (explicit_enabled >= 0) c.enabled = static_cast<uint32_t>(explicit_enabled);
  return valid_config(c, error);
}

std::string to_spec(const af::Config& c) {
  std::string s = c.enabled ? "on" : "off";
  s += " seed=" + std::to_string(c.seed);
  s += std::string(" ordering=") + af::kOrderingNames[c.ordering <= af::kOrderRelaxed ? c.ordering : 0];
  s += " reorder=" + prob_text(c.reorder_ppm);
  s += " window=" + std::to_string(c.reorder_window);
  s += " delay_us=" + std::to_string(c.delay_min_us) + ".." + std::to_string(c.delay_max_us);
  s += " retransmit_us=" + std::to_string(c.retransmit_us);
  s += " error_done=" + prob_text(c.error_done_ppm);
  s += " max_retrans=" + std::to_string(c.max_retrans);
  for (uint32_t i = 0; i < c.rule_count && i < af::kMaxRules; ++i) {
    const af::Rule& r = c.rules[i];
    s += " " + mask_name(r.kind_mask) + "." + af::kActionNames[r.action < af::kActions ? r.action : 0] + "=" +
         prob_text(r.ppm);
    if (r.peer != af::kAnyPeer) s += "@" + std::to_string(r.peer);
  }
  for (uint32_t i = 0; i < c.nth_count && i < af::kMaxNth; ++i)
    s += " nth=" + mask_name(c.nth[i].kind_mask) + ":" + std::to_string(c.nth[i].n) + ":" +
         af::kActionNames[c.nth[i].action < af::kActions ? c.nth[i].action : 0];
  for (uint32_t i = 0; i < c.link_count && i < af::kMaxLinks; ++i) {
    const af::LinkWindow& w = c.links[i];
    s += " link_down=" + (w.peer == af::kAnyPeer ? std::string("*") : std::to_string(w.peer)) + "@" +
         std::to_string(w.down_ms) + ".." + std::to_string(w.up_ms) + "ms";
  }
  return s;
}

}  // namespace nicemu::fault
