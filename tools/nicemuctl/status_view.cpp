#include "status_view.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

namespace nicemu::tools {

using nlohmann::json;

namespace {

// Fields are read defensively: a daemon of another version may lack or add some.
uint64_t u64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) return static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
  if (it->is_number_float()) return static_cast<uint64_t>(std::max(0.0, it->get<double>()));
  return 0;
}

std::string str(const json& j, const char* key, const char* fallback = "?") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

const json& array(const json& j, const char* key) {
  static const json empty = json::array();
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

std::string hex32(uint64_t v) { return fmt::format("{:#010x}", v); }

// Columns of text, widths from the widest cell; numeric columns are right-aligned.
class Table {
 public:
  struct Column {
    std::string name;
    bool right = false;
  };
  explicit Table(std::vector<Column> cols) : cols_(std::move(cols)) {}

  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }

  void print(std::FILE* out, int indent, bool header = true) const {
    std::vector<size_t> w(cols_.size(), 0);
    if (header)
      for (size_t c = 0; c < cols_.size(); ++c) w[c] = cols_[c].name.size();
    for (const auto& r : rows_)
      for (size_t c = 0; c < cols_.size() && c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
    auto line = [&](auto cell) {
      std::string s(static_cast<size_t>(indent), ' ');
      for (size_t c = 0; c < cols_.size(); ++c) {
        const std::string& v = cell(c);
        bool last = c + 1 == cols_.size();
        if (cols_[c].right)
          s += fmt::format("{:>{}}", v, w[c]);
        else
          s += last ? v : fmt::format("{:<{}}", v, w[c]);
        if (!last) s += "  ";
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      fmt::print(out, "{}\n", s);
    };
    static const std::string none;
    if (header) line([&](size_t c) -> const std::string& { return cols_[c].name; });
    for (const auto& r : rows_) line([&](size_t c) -> const std::string& { return c < r.size() ? r[c] : none; });
  }

 private:
  std::vector<Column> cols_;
  std::vector<std::vector<std::string>> rows_;
};

constexpr int kLabelWidth = 13;

void field(std::FILE* out, const char* label, const std::string& value) {
  fmt::print(out, "  {:<{}}{}\n", label, kLabelWidth, value);
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  for (v /= 1024; v >= 1024 && u + 1 < std::size(kUnits); v /= 1024) ++u;
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

std::string format_duration(double seconds) {
  auto s = static_cast<uint64_t>(std::max(0.0, seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

void print_status(std::FILE* out, const json& node) {
  fmt::print(out, "nic {}\n", u64(node, "nic_addr"));
  field(out, "device", str(node, "device_type"));
  // Added by nicemuctl from the torus setting (add_mesh_coordinates), not by the daemon.
  if (auto m = node.find("mesh"); m != node.end() && m->is_object()) {
    if (m->contains("x"))
      field(out, "mesh", fmt::format("({}, {}, {}) on the {} torus", u64(*m, "x"), u64(*m, "y"), u64(*m, "z"),
                                     str(*m, "torus")));
    else
      field(out, "mesh", "outside the " + str(*m, "torus") + " torus (NICEMU_TORUS)");
  }
  field(out, "pid", std::to_string(u64(node, "pid")));
  field(out, "socket", str(node, "socket"));
  double up = node.contains("uptime_s") && node["uptime_s"].is_number() ? node["uptime_s"].get<double>() : 0;
  field(out, "uptime", format_duration(up));

  const json& creds = array(node, "credentials");
  if (creds.empty()) {
    field(out, "credentials", "none");
  } else {
    fmt::print(out, "  credentials\n");
    Table t({{"PTAG", true}, {"COOKIE"}, {"UID", true}});
    for (const auto& c : creds)
      t.add({std::to_string(u64(c, "ptag")), hex32(u64(c, "cookie")), std::to_string(u64(c, "uid"))});
    t.print(out, 4);
  }

  const json& cdms = array(node, "cdms");
  if (cdms.empty()) {
    field(out, "CDMs", "none attached");
  } else {
    fmt::print(out, "  CDMs\n");
    Table t({{"ATTACH", true},
             {"PID", true},
             {"INST", true},
             {"PTAG", true},
             {"COOKIE"},
             {"REGS", true},
             {"CQS", true},
             {"MBOXES", true},
             {"HEAP", true},
             {"STATE"}});
    for (const auto& c : cdms) {
      bool alive = !c.contains("alive") || c["alive"] == true;
      t.add({std::to_string(u64(c, "attach_id")), std::to_string(u64(c, "pid")), std::to_string(u64(c, "inst_id")),
             std::to_string(u64(c, "ptag")), hex32(u64(c, "cookie")), std::to_string(u64(c, "registrations")),
             std::to_string(u64(c, "cqs")), std::to_string(u64(c, "mailboxes")), format_bytes(u64(c, "heap_bytes")),
             alive ? "alive" : "dead"});
    }
    t.print(out, 4);
  }

  // MSGQ segments (one per domain with members on this node); listed only when there are some.
  const json& msgqs = array(node, "msgq");
  if (!msgqs.empty()) {
    fmt::print(out, "  MSGQ segments\n");
    Table t({{"PTAG", true},
             {"COOKIE"},
             {"MEMBERS", true},
             {"RX", true},
             {"TX", true},
             {"BYTES", true},
             {"DELIVERED", true},
             {"MALFORMED", true},
             {"VOIDED", true}});
    for (const auto& m : msgqs)
      t.add({std::to_string(u64(m, "ptag")), hex32(u64(m, "cookie")), std::to_string(u64(m, "members")),
             std::to_string(u64(m, "rx_connections")), std::to_string(u64(m, "tx_connections")),
             format_bytes(u64(m, "bytes")), std::to_string(u64(m, "delivered")), std::to_string(u64(m, "malformed")),
             std::to_string(u64(m, "voided"))});
    t.print(out, 4);
  }

  // Where the kernel refused cross-memory attach (docs/decisions.md): shown once it happened.
  if (auto x = node.find("xmem_fallback"); x != node.end() && x->is_object() &&
      (u64(*x, "peers") || u64(*x, "posts") || u64(*x, "daemon_ops") || u64(*x, "daemon_refused")))
    field(out, "xmem refused",
          fmt::format("{} peers, {} posts through the daemon, {} run here; {} of the daemon's own copies refused",
                      u64(*x, "peers"), u64(*x, "posts"), u64(*x, "daemon_ops"), u64(*x, "daemon_refused")));

  // The ofi fabric (docs/fabric.md): PUT/GET its CDMs did rank to rank over libfabric.
  if (auto o = node.find("ofi"); o != node.end() && o->is_object() && o->value("enabled", false))
    field(out, "ofi fabric",
          fmt::format("provider {}: {} PUT/GET, {} rank to rank, {} errors; {} addresses published, {} handed out",
                      str(*o, "provider"), u64(*o, "ops"), format_bytes(u64(*o, "bytes")), u64(*o, "errors"),
                      o->contains("directory") ? u64((*o)["directory"], "published") : 0,
                      o->contains("directory") ? u64((*o)["directory"], "answered") : 0));

  // The UDP fabric to other hosts (docs/fabric.md), when the daemon runs with a map.
  if (auto f = node.find("fabric"); f != node.end() && f->is_object()) {
    field(out, "fabric", fmt::format("udp port {}, epoch {:#x}, {} nodes in the map", u64(*f, "port"), u64(*f, "epoch"),
                                     u64(*f, "nodes_in_map")));
    field(out, "data plane", str(*f, "data_plane"));
    const json& peers = array(*f, "peers");
    if (!peers.empty()) {
      Table t({{"PEER", true},
               {"ENDPOINT"},
               {"STATE"},
               {"QUEUED", true},
               {"SENT", true},
               {"RECEIVED", true},
               {"RETRANSMITS", true},
               {"DUPLICATES", true},
               {"ABANDONED", true}});
      for (const auto& p : peers)
        t.add({std::to_string(u64(p, "nic_addr")), str(p, "endpoint"), str(p, "state"),
               std::to_string(u64(p, "queued_records")), std::to_string(u64(p, "messages_sent")),
               std::to_string(u64(p, "messages_received")), std::to_string(u64(p, "retransmits")),
               std::to_string(u64(p, "duplicates")), std::to_string(u64(p, "messages_abandoned"))});
      t.print(out, 4);
    }
  }

  auto it = node.find("counters");
  if (it != node.end() && it->is_object() && !it->empty()) {
    fmt::print(out, "  counters\n");
    // Three name/value pairs per line, in the daemon's (stable, sorted) key order.
    constexpr size_t kPerLine = 3;
    Table t({{""}, {"", true}, {""}, {"", true}, {""}, {"", true}});
    std::vector<std::string> row;
    for (const auto& [name, value] : it->items()) {
      row.push_back(name);
      row.push_back(value.dump());
      if (row.size() == 2 * kPerLine) t.add(std::exchange(row, {}));
    }
    if (!row.empty()) t.add(std::move(row));
    t.print(out, 4, false);
  }
}

// "-" for a job credential; "id 7 grants uid:1000,job:42" for a DRC credential.
std::string drc_text(const json& c) {
  if (!c.contains("drc")) return "-";
  std::string s = "id " + std::to_string(u64(c["drc"], "id")) + " grants ";
  std::string g;
  for (const auto& e : c["drc"].value("grants", json::array())) g += (g.empty() ? "" : ",") + e.get<std::string>();
  return s + (g.empty() ? "none" : g);
}

void print_credentials(std::FILE* out, const std::vector<json>& nodes) {
  Table t({{"NIC", true}, {"PTAG", true}, {"COOKIE"}, {"COOKIE(DEC)", true}, {"UID", true}, {"CDMS", true}, {"DRC"}});
  for (const auto& n : nodes) {
    for (const auto& c : array(n, "credentials")) {
      uint64_t ptag = u64(c, "ptag"), cookie = u64(c, "cookie");
      size_t users = 0;
      for (const auto& d : array(n, "cdms"))
        if (u64(d, "ptag") == ptag && u64(d, "cookie") == cookie) ++users;
      t.add({std::to_string(u64(n, "nic_addr")), std::to_string(ptag), hex32(cookie), std::to_string(cookie),
             std::to_string(u64(c, "uid")), std::to_string(users), drc_text(c)});
    }
  }
  if (t.empty())
    fmt::print(out, "no credentials on {} node{}\n", nodes.size(), nodes.size() == 1 ? "" : "s");
  else
    t.print(out, 0);
}

}  // namespace nicemu::tools
