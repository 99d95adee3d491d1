#include "counters_view.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include <fmt/core.h>

#include "nicemu/abi/counters_layout.h"

namespace nicemu::tools {

namespace ac = nicemu::abi::counters;
using nlohmann::json;

namespace {

template <size_t N>
json named(const ac::CounterInfo (&info)[N], const std::vector<uint64_t>& v) {
  json o = json::object();
  for (size_t i = 0; i < N && i < v.size(); ++i) o[info[i].name] = v[i];
  return o;
}

template <size_t N>
void print_named(std::FILE* out, const ac::CounterInfo (&info)[N], const std::vector<uint64_t>& v, bool all,
                 const char* indent) {
  bool any = false;
  for (size_t i = 0; i < N && i < v.size(); ++i) {
    if (!all && v[i] == 0) continue;
    fmt::print(out, "{}{:<26} {}\n", indent, info[i].name, v[i]);
    any = true;
  }
  if (!any) fmt::print(out, "{}(all zero)\n", indent);
}

std::string uptime_text(uint64_t started_unix_ns) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  double s = now > started_unix_ns ? double(now - started_unix_ns) / 1e9 : 0.0;
  if (s < 120) return fmt::format("{:.1f}s", s);
  if (s < 7200) return fmt::format("{:.1f}m", s / 60);
  return fmt::format("{:.1f}h", s / 3600);
}

// Prometheus text format escaping (label values: \ " newline; HELP: \ newline).
std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
std::string escape_help(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

struct Family {
  std::string name, type, help;
  std::vector<std::pair<std::string, std::string>> samples;  // label set text, value
};

class Exposition {
 public:
  Family& family(const std::string& name, ac::Kind kind, const std::string& help) {
    auto it = index_.find(name);
    if (it != index_.end()) return families_[it->second];
    index_[name] = families_.size();
    families_.push_back(Family{name, kind == ac::kGauge ? "gauge" : "counter", help, {}});
    return families_.back();
  }
  std::string text() const {
    std::string out;
    for (const Family& f : families_) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, escape_help(f.help), f.name, f.type);
      for (const auto& [labels, value] : f.samples) out += fmt::format("{}{{{}}} {}\n", f.name, labels, value);
    }
    return out;
  }

 private:
  std::vector<Family> families_;
  std::map<std::string, size_t> index_;
};

std::string labels(std::initializer_list<std::pair<const char*, std::string>> l) {
  std::string out;
  for (const auto& [k, v] : l) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}=\"{}\"", k, escape_label(v));
  }
  return out;
}

// Counters end in _total (the exposition format's convention), gauges do not.
std::string metric(const char* prefix, const ac::CounterInfo& c) {
  return fmt::format("{}{}{}", prefix, c.name, c.kind == ac::kCounter ? "_total" : "");
}

uint64_t sum(const std::vector<uint64_t>& v, std::initializer_list<ac::cdm::Counter> which) {
  uint64_t s = 0;
  for (auto c : which)
    if (c < v.size()) s += v[c];
  return s;
}

struct Rates {
  double posts = 0, bytes = 0, smsg = 0, events = 0, errors = 0;
  uint64_t error_total = 0;
  bool known = false;
};

uint64_t errors_of(const std::vector<uint64_t>& v) {
  uint64_t s = 0;
  for (uint32_t i = 0; i < ac::kErrorClasses; ++i)
    if (ac::kErrorBase + i < v.size()) s += v[ac::kErrorBase + i];
  return s;
}

Rates rates(const std::vector<uint64_t>* a, uint64_t ta, const std::vector<uint64_t>& b, uint64_t tb) {
  using namespace ac::cdm;
  Rates r;
  r.error_total = errors_of(b);
  if (!a || tb <= ta) return r;
  double dt = double(tb - ta) / 1e9;
  auto d = [&](std::initializer_list<Counter> w) {
    uint64_t x = sum(*a, w), y = sum(b, w);
    return y >= x ? double(y - x) / dt : 0.0;
  };
  r.posts = d({fma_put_posts, fma_get_posts, amo_posts, rdma_posts, cq_write_posts});
  r.bytes = d({fma_put_bytes, fma_get_bytes, rdma_bytes, smsg_send_bytes});
  r.smsg = d({smsg_sends});
  r.events = d({cq_local_events, cq_remote_events});
  uint64_t ea = errors_of(*a);
  r.errors = r.error_total >= ea ? double(r.error_total - ea) / dt : 0.0;
  r.known = true;
  return r;
}

std::string rate_text(double v, bool known) {
  if (!known) return "-";
  if (v >= 1e9) return fmt::format("{:.1f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.1f}M", v / 1e6);
  if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

void print_counters(std::FILE* out, const NodeSnapshot& s, bool all) {
  fmt::print(out, "nic {}  daemon pid {}  {}  up {}  ({})\n", s.nic_addr, s.daemon_pid,
             s.running ? "running" : "NOT RUNNING (stale page)", uptime_text(s.started_unix_ns), s.page);
  fmt::print(out, "  node\n");
  print_named(out, ac::kNodeInfo, s.node, true, "    ");
  fmt::print(out, "  all CDMs (including detached ones)\n");
  print_named(out, ac::kCdmInfo, s.totals, all, "    ");
  for (const CdmSnapshot& c : s.cdms) {
    fmt::print(out, "  cdm attach {}  pid {}  uid {}  inst {}  ptag {}  cookie {:#x}\n", c.attach_id, c.pid, c.uid,
               c.inst_id, c.ptag, c.cookie);
    print_named(out, ac::kCdmInfo, c.v, all, "    ");
  }
  for (const LinkSnapshot& l : s.links) {
    fmt::print(out, "  link to nic {}\n", l.peer_addr);
    print_named(out, ac::kLinkInfo, l.v, true, "    ");
  }
}

json counters_json(const std::vector<NodeSnapshot>& nodes) {
  json arr = json::array();
  for (const NodeSnapshot& s : nodes) {
    json cdms = json::array();
    for (const CdmSnapshot& c : s.cdms)
      cdms.push_back({{"attach_id", c.attach_id},
                      {"pid", c.pid},
                      {"uid", c.uid},
                      {"inst_id", c.inst_id},
                      {"ptag", c.ptag},
                      {"cookie", c.cookie},
                      {"attached_unix_ns", c.attached_unix_ns},
                      {"counters", named(ac::kCdmInfo, c.v)}});
    json links = json::array();
    for (const LinkSnapshot& l : s.links) links.push_back({{"peer", l.peer_addr}, {"counters", named(ac::kLinkInfo, l.v)}});
    arr.push_back({{"nic_addr", s.nic_addr},
                   {"daemon_pid", s.daemon_pid},
                   {"running", s.running},
                   {"page", s.page},
                   {"started_unix_ns", s.started_unix_ns},
                   {"counters", named(ac::kNodeInfo, s.node)},
                   {"totals", named(ac::kCdmInfo, s.totals)},
                   {"cdms", cdms},
                   {"links", links}});
  }
  return json{{"nodes", arr}};
}

std::string counters_prometheus(const std::vector<NodeSnapshot>& nodes) {
  Exposition x;
  for (const NodeSnapshot& s : nodes) {
    std::string nic = std::to_string(s.nic_addr);
    x.family("nicemu_up", ac::kGauge, "1 if the node's daemon is running, 0 for a stale counter page")
        .samples.emplace_back(labels({{"nic", nic}}), s.running ? "1" : "0");
    if (!s.running) continue;
    x.family("nicemu_start_time_seconds", ac::kGauge, "start time of the node's daemon, seconds since the epoch")
        .samples.emplace_back(labels({{"nic", nic}}), fmt::format("{:.3f}", double(s.started_unix_ns) / 1e9));
    for (size_t i = 0; i < std::size(ac::kNodeInfo) && i < s.node.size(); ++i)
      x.family(metric("nicemu_node_", ac::kNodeInfo[i]), ac::kNodeInfo[i].kind, ac::kNodeInfo[i].help)
          .samples.emplace_back(labels({{"nic", nic}}), std::to_string(s.node[i]));
    for (size_t i = 0; i < std::size(ac::kCdmInfo) && i < s.totals.size(); ++i)
      x.family(metric("nicemu_", ac::kCdmInfo[i]), ac::kCdmInfo[i].kind,
               std::string(ac::kCdmInfo[i].help) + ", all CDMs of the node")
          .samples.emplace_back(labels({{"nic", nic}}), std::to_string(s.totals[i]));
  }
  // Per-CDM and per-link series after the node-wide ones (families stay contiguous).
  for (const NodeSnapshot& s : nodes) {
    if (!s.running) continue;
    std::string nic = std::to_string(s.nic_addr);
    for (const CdmSnapshot& c : s.cdms) {
      std::string l = labels({{"nic", nic},
                              {"attach", std::to_string(c.attach_id)},
                              {"pid", std::to_string(c.pid)},
                              {"inst", std::to_string(c.inst_id)},
                              {"ptag", std::to_string(c.ptag)}});
      for (size_t i = 0; i < std::size(ac::kCdmInfo) && i < c.v.size(); ++i)
        x.family(metric("nicemu_cdm_", ac::kCdmInfo[i]), ac::kCdmInfo[i].kind,
                 std::string(ac::kCdmInfo[i].help) + ", per attached CDM")
            .samples.emplace_back(l, std::to_string(c.v[i]));
    }
    for (const LinkSnapshot& k : s.links) {
      std::string l = labels({{"nic", nic}, {"peer", std::to_string(k.peer_addr)}});
      for (size_t i = 0; i < std::size(ac::kLinkInfo) && i < k.v.size(); ++i)
        x.family(metric("nicemu_link_", ac::kLinkInfo[i]), ac::kLinkInfo[i].kind, ac::kLinkInfo[i].help)
            .samples.emplace_back(l, std::to_string(k.v[i]));
    }
  }
  return x.text();
}

std::string top_frame(const std::vector<NodeSnapshot>& prev, const std::vector<NodeSnapshot>& cur,
                      double interval_s, const std::vector<std::string>& problems) {
  auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32];
  std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&now));
  std::string out = fmt::format("nicemu top  {}  {} node(s), every {:.1f} s (Ctrl-C quits)\n\n", when, cur.size(),
                                interval_s);
  out += fmt::format("{:<8} {:>8} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "NIC", "PID", "CDMs", "posts/s",
                     "bytes/s", "smsg/s", "events/s", "errors/s", "errors");
  for (const NodeSnapshot& s : cur) {
    const NodeSnapshot* p = nullptr;
    for (const auto& q : prev)
      if (q.page == s.page && q.daemon_pid == s.daemon_pid) p = &q;
    Rates r = rates(p ? &p->totals : nullptr, p ? p->refreshed_ns : 0, s.totals, s.refreshed_ns);
    out += fmt::format("{:<8} {:>8} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}{}\n", s.nic_addr, s.daemon_pid,
                       s.node.size() > ac::node::cdms_attached ? s.node[ac::node::cdms_attached] : 0,
                       rate_text(r.posts, r.known), rate_text(r.bytes, r.known), rate_text(r.smsg, r.known),
                       rate_text(r.events, r.known), rate_text(r.errors, r.known), r.error_total,
                       s.running ? "" : "  (not running)");
    for (const CdmSnapshot& c : s.cdms) {
      const CdmSnapshot* pc = nullptr;
      if (p)
        for (const auto& q : p->cdms)
          if (q.attach_id == c.attach_id) pc = &q;
      Rates rc = rates(pc ? &pc->v : nullptr, pc ? pc->refreshed_ns : 0, c.v, c.refreshed_ns);
      std::string who = fmt::format("  {}/{}", c.inst_id, c.ptag);
      out += fmt::format("{:<8} {:>8} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", who, c.pid, "", rate_text(rc.posts, rc.known),
                         rate_text(rc.bytes, rc.known), rate_text(rc.smsg, rc.known), rate_text(rc.events, rc.known),
                         rate_text(rc.errors, rc.known), rc.error_total);
    }
  }
  out += "\n(CDM rows: inst/ptag and the process; posts = FMA, AMO, RDMA and CQ-write posts; bytes include SMSG)\n";
  for (const auto& m : problems) out += "warning: " + m + "\n";
  return out;
}

}  // namespace nicemu::tools
