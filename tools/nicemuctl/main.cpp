// nicemuctl: inspect and control running nicemu daemons through their control sockets —
// status (text or JSON), job credentials (issue/grant/revoke/list), fault injection, shutdown — and read
// their counter pages: stats (text, JSON, Prometheus) and top (a live view).
// Exit status: 0 success, 1 a daemon was unreachable or refused, 2 bad usage.
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "counter_pages.h"
#include "counters_view.h"
#include "daemon_link.h"
#include "fault_cmd.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/fabric/fabric_map.h"
#include "nicemu/fabric/packet_codec.h"
#include "nicemu/common/torus.h"
#include "status_view.h"

namespace {

using nicemu::abi::ctl::Op;
using nicemu::tools::CtlError;
using nicemu::tools::Link;
using nlohmann::json;
namespace gni = nicemu::abi::gni;

struct Globals {
  nicemu::tools::Selection sel;
  double timeout_s = 5.0;

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  }
  std::vector<Link> connect(std::vector<std::string>* failures = nullptr) const {
    return nicemu::tools::connect_all(nicemu::tools::select_targets(sel), timeout(), failures);
  }
};

// Numbers in decimal or 0x-hex (cookies are usually written in hex). No octal: a cookie
// with a leading zero must not silently change value.
bool parse_u32(const std::string& s, uint32_t& out) {
  if (s.empty()) return false;
  bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  size_t pos = 0;
  unsigned long long v;
  try {
    v = std::stoull(s, &pos, hex ? 16 : 10);
  } catch (const std::exception&) {
    return false;
  }
  if (pos != s.size() || s[0] == '-' || s[0] == '+' || v > 0xFFFFFFFFull) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

CLI::Validator u32_validator(uint32_t lo, uint32_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        uint32_t v;
        if (!parse_u32(s, v)) return "'" + s + "' is not a decimal or 0x-hex 32-bit number";
        if (v < lo || v > hi) return fmt::format("{} is outside {}..{}", s, lo, hi);
        return {};
      },
      fmt::format("{}..{}", lo, hi));
}

uint32_t as_u32(const std::string& s) {
  uint32_t v = 0;
  parse_u32(s, v);  // already checked by the option's validator
  return v;
}

std::string cred_text(uint32_t ptag, uint32_t cookie) {
  return fmt::format("ptag {} cookie {:#010x} ({})", ptag, cookie, cookie);
}

// The refusal of a credential request, with the likely reason.
CtlError cred_refused(const Link& l, const char* what, int32_t rc) {
  const char* hint = "";
  switch (rc) {
    case gni::kPermissionError:
      hint = ": the credential belongs to another uid, or --uid is not yours (only root may act for others)";
      break;
    case gni::kInvalidParam:
      hint = ": ptag must be 1..255";
      break;
    case gni::kNoMatch:
      hint = ": no such credential on this node";
      break;
    default:
      break;
  }
  return CtlError(fmt::format("{}: {} refused: {}{}", l.target().label(), what, nicemu::tools::rc_name(rc), hint));
}

void warn(const std::string& msg) { fmt::print(stderr, "nicemuctl: {}\n", msg); }

// ---- status ----

// Each node's place on the emulated torus (nicemu/common/torus.h), as librca and
// PMI_Get_meshcoord report it: NICEMU_TORUS, else sized by the highest NIC address shown.
void add_mesh_coordinates(json& nodes) {
  uint64_t highest = 0;
  for (const auto& n : nodes)
    if (n.contains("nic_addr") && n["nic_addr"].is_number_unsigned()) highest = std::max(highest, n["nic_addr"].get<uint64_t>());
  std::string error;
  auto dims = nicemu::torus::from_env(highest + 1, &error);
  if (!dims) {
    warn("warning: " + error + "; mesh coordinates not shown");
    return;
  }
  const std::string torus = fmt::format("{}x{}x{}", dims->x, dims->y, dims->z);
  for (auto& n : nodes) {
    if (!n.contains("nic_addr") || !n["nic_addr"].is_number_unsigned()) continue;
    json mesh{{"torus", torus}};
    if (auto c = nicemu::torus::coord_of(*dims, n["nic_addr"].get<uint64_t>())) {
      mesh["x"] = c->x;
      mesh["y"] = c->y;
      mesh["z"] = c->z;
    }
    n["mesh"] = mesh;
  }
}

int cmd_status(const Globals& g, bool as_json) {
  std::vector<std::string> failures;
  std::vector<Link> links = g.connect(&failures);
  json nodes = json::array();
  for (Link& l : links) {
    try {
      nodes.push_back(l.status());
    } catch (const CtlError& e) {
      warn(std::string("warning: ") + e.what());
      failures.push_back(e.what());
    }
  }
  if (nodes.empty()) throw CtlError("no nicemu daemon answered the status request");
  add_mesh_coordinates(nodes);
  if (as_json) {
    json doc{{"nodes", nodes}};
    if (!failures.empty()) doc["unreachable"] = failures;
    fmt::print("{}\n", doc.dump(2));
    return 0;
  }
  bool first = true;
  for (const auto& n : nodes) {
    if (!std::exchange(first, false)) fmt::print("\n");
    nicemu::tools::print_status(stdout, n);
  }
  return 0;
}

// ---- stats, top ----

// Snapshots of the counter pages of the selected daemons; unreadable pages are reported
// (and appended to `problems`) and skipped. Throws if none can be read.
std::vector<nicemu::tools::NodeSnapshot> read_pages(const Globals& g, std::vector<std::string>* problems = nullptr) {
  std::vector<nicemu::tools::NodeSnapshot> out;
  for (const auto& t : nicemu::tools::select_targets(g.sel)) {
    try {
      out.push_back(nicemu::tools::read_counter_page(nicemu::ctl::stats_path(t.socket)));
    } catch (const CtlError& e) {
      if (problems)
        problems->push_back(e.what());
      else
        warn(std::string("warning: ") + e.what());
    }
  }
  if (out.empty()) throw CtlError("no counter page could be read (is a nicemu daemon running in this run dir?)");
  return out;
}

enum class StatsFormat { kText, kJson, kPrometheus };

int cmd_stats(const Globals& g, StatsFormat f, bool all) {
  auto nodes = read_pages(g);
  switch (f) {
    case StatsFormat::kJson:
      fmt::print("{}\n", nicemu::tools::counters_json(nodes).dump(2));
      break;
    case StatsFormat::kPrometheus:
      fmt::print("{}", nicemu::tools::counters_prometheus(nodes));
      break;
    case StatsFormat::kText: {
      bool first = true;
      for (const auto& n : nodes) {
        if (!std::exchange(first, false)) fmt::print("\n");
        nicemu::tools::print_counters(stdout, n, all);
      }
      break;
    }
  }
  return 0;
}

// A frame every interval: the rates between two reads of the pages. Clears the screen
// between frames on a terminal; --iterations bounds the frames (for scripts and tests).
int cmd_top(const Globals& g, double interval_s, unsigned iterations, bool no_clear) {
  const bool tty = ::isatty(STDOUT_FILENO) && !no_clear;
  auto prev = read_pages(g);
  for (unsigned i = 0; iterations == 0 || i < iterations; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)));
    std::vector<std::string> problems;
    auto cur = read_pages(g, &problems);
    std::string frame = nicemu::tools::top_frame(prev, cur, interval_s, problems);
    if (tty) fmt::print("\x1b[H\x1b[2J");
    else if (i > 0) fmt::print("\n");
    fmt::print("{}", frame);
    std::fflush(stdout);
    prev = std::move(cur);
  }
  return 0;
}

// ---- cred ----

struct CredOptions {
  uint32_t uid = static_cast<uint32_t>(getuid());
  int64_t gid = -1;  // -1: for the user alone
  std::string ptag, cookie;
  bool as_json = false;
  bool export_vars = false;
};

int cmd_cred_issue(const Globals& g, const CredOptions& o) {
  std::vector<Link> links = g.connect();
  uint32_t want_ptag = o.ptag.empty() ? 0 : as_u32(o.ptag);  // 0: the daemon chooses
  uint32_t want_cookie = o.cookie.empty() ? 0 : as_u32(o.cookie);
  auto rep = links[0].cred(Op::kCredIssue, o.uid, want_ptag, want_cookie, o.gid);
  if (rep.r.rc != gni::kSuccess) throw cred_refused(links[0], "cred issue", rep.r.rc);
  for (size_t i = 1; i < links.size(); ++i) {
    auto gr = links[i].cred(Op::kCredGrant, o.uid, rep.ptag, rep.cookie, o.gid);
    if (gr.r.rc == gni::kSuccess) continue;
    CtlError err = cred_refused(links[i], "cred grant", gr.r.rc);
    // A credential the daemons chose is new everywhere: take it back so no node is left
    // holding half a job's credential. One given explicitly may have existed before.
    if (want_ptag == 0 && want_cookie == 0) {
      for (size_t k = 0; k < i; ++k) links[k].cred(Op::kCredRevoke, o.uid, rep.ptag, rep.cookie);
      throw CtlError(fmt::format("{} (the new credential was revoked again)", err.what()));
    }
    throw CtlError(
        fmt::format("{} ({} is left on the {} node(s) before it)", err.what(), cred_text(rep.ptag, rep.cookie), i));
  }
  const char* prefix = o.export_vars ? "export " : "";
  fmt::print("{}PMI_GNI_PTAG={}\n{}PMI_GNI_COOKIE={}\n", prefix, rep.ptag, prefix, rep.cookie);
  return 0;
}

int cmd_cred_grant(const Globals& g, const CredOptions& o) {
  std::vector<Link> links = g.connect();
  uint32_t ptag = as_u32(o.ptag), cookie = as_u32(o.cookie);
  int status = 0;
  for (Link& l : links) {
    try {
      auto rep = l.cred(Op::kCredGrant, o.uid, ptag, cookie, o.gid);
      if (rep.r.rc != gni::kSuccess) throw cred_refused(l, "cred grant", rep.r.rc);
      fmt::print("{}: granted {} to uid {}\n", l.target().label(), cred_text(ptag, cookie), o.uid);
    } catch (const CtlError& e) {
      warn(e.what());
      status = 1;
    }
  }
  return status;
}

int cmd_cred_revoke(const Globals& g, const CredOptions& o) {
  std::vector<Link> links = g.connect();
  uint32_t ptag = as_u32(o.ptag), cookie = as_u32(o.cookie);
  int status = 0;
  size_t revoked = 0;
  for (Link& l : links) {
    try {
      // The daemon checks the requester's own uid (SO_PEERCRED); root may revoke any.
      auto rep = l.cred(Op::kCredRevoke, static_cast<uint32_t>(getuid()), ptag, cookie);
      if (rep.r.rc == gni::kNoMatch) {
        fmt::print("{}: {} not present\n", l.target().label(), cred_text(ptag, cookie));
        continue;
      }
      if (rep.r.rc != gni::kSuccess) throw cred_refused(l, "cred revoke", rep.r.rc);
      fmt::print("{}: revoked {}\n", l.target().label(), cred_text(ptag, cookie));
      ++revoked;
    } catch (const CtlError& e) {
      warn(e.what());
      status = 1;
    }
  }
  if (revoked == 0 && status == 0) {
    warn(fmt::format("{} is not held by you on any selected node", cred_text(ptag, cookie)));
    status = 1;
  }
  return status;
}

int cmd_cred_list(const Globals& g, const CredOptions& o) {
  std::vector<Link> links = g.connect();
  std::vector<json> nodes;
  for (Link& l : links) {
    try {
      nodes.push_back(l.status());
    } catch (const CtlError& e) {
      warn(std::string("warning: ") + e.what());
    }
  }
  if (nodes.empty()) throw CtlError("no nicemu daemon answered the status request");
  if (o.as_json) {
    json creds = json::array();
    for (const auto& n : nodes)
      for (const auto& c : n.value("credentials", json::array())) {
        json e{{"nic_addr", n.value("nic_addr", 0u)},
               {"ptag", c.value("ptag", 0u)},
               {"cookie", c.value("cookie", json(nullptr))},
               {"uid", c.value("uid", 0u)},
               {"gid", c.value("gid", json(nullptr))}};
        if (c.contains("drc")) e["drc"] = c["drc"];  // DRC id and grants (libdrc)
        creds.push_back(e);
      }
    fmt::print("{}\n", json{{"credentials", creds}}.dump(2));
    return 0;
  }
  nicemu::tools::print_credentials(stdout, nodes);
  return 0;
}

// ---- shutdown ----

// The daemon unlinks its socket as it stops; a socket that still answers after the
// timeout belongs to a daemon that did not stop.
bool wait_gone(const std::string& socket, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::access(socket.c_str(), F_OK) != 0 && errno == ENOENT) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

int cmd_shutdown(const Globals& g, bool no_wait) {
  std::vector<Link> links = g.connect();
  int status = 0;
  for (Link& l : links) {
    try {
      l.shutdown();
      if (!no_wait && !wait_gone(l.target().socket, g.timeout()))
        throw CtlError(fmt::format("{}: accepted the shutdown but still runs after {} ms", l.target().label(),
                                   g.timeout().count()));
      fmt::print("{}: {}\n", l.target().label(), no_wait ? "shutdown requested" : "stopped");
    } catch (const CtlError& e) {
      warn(e.what());
      status = 1;
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "nicemuctl: inspect and control the nicemu daemons (emulated Cray NICs) of this host.\n"
      "By default every daemon in the run dir is addressed; --node or --socket pick one.\n"
      "Exit status: 0 success, 1 no daemon reachable or a daemon refused, 2 bad usage.",
      "nicemuctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand

  Globals g;
  app.add_option("--rundir", g.sel.rundir,
                 "directory of the daemons' sockets (default: $NICEMU_RUNDIR, /run/nicemu as root, "
                 "else /tmp/nicemu-UID)")
      ->type_name("DIR");
  auto* socket_opt =
      app.add_option("--socket", g.sel.socket, "talk to the daemon at this socket only")->type_name("PATH");
  auto* node_opt = app.add_option("--node", g.sel.nodes, "talk to the daemon of this NIC address (repeatable)")
                       ->type_name("ADDR")
                       ->type_size(1)
                       ->expected(1)
                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  socket_opt->excludes(node_opt);
  app.add_option("--timeout", g.timeout_s, "seconds to wait for a daemon's reply (and for shutdown)")
      ->type_name("SEC")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  bool status_json = false;
  auto* status = app.add_subcommand("status", "node, credentials, attached CDMs and counters of each daemon");
  status->add_flag("--json", status_json, "print {\"nodes\":[...]}, the daemons' status objects, as one JSON document");

  bool stats_json = false, stats_prom = false, stats_all = false;
  auto* stats = app.add_subcommand(
      "stats", "counters of each daemon, read from its counter page (RUNDIR/nic-ADDR.stats) without stopping it");
  auto* sj = stats->add_flag("--json", stats_json, "print {\"nodes\":[...]} as one JSON document");
  auto* sp = stats->add_flag("--prometheus", stats_prom,
                             "print the Prometheus text exposition format (for a node exporter's textfile collector)");
  sj->excludes(sp);
  stats->add_flag("--all", stats_all, "text: also list the counters that are zero");

  double top_interval = 1.0;
  unsigned top_iterations = 0;
  bool top_once = false, top_no_clear = false;
  auto* top = app.add_subcommand("top", "live view of the counters: rates per node and per CDM, refreshed every second");
  top->add_option("--interval", top_interval, "seconds between frames")
      ->type_name("SEC")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  top->add_option("--iterations", top_iterations, "stop after N frames (default: until interrupted)")->type_name("N");
  top->add_flag("--once", top_once, "one frame (the rates over one interval), then exit");
  top->add_flag("--no-clear", top_no_clear, "do not clear the screen between frames");

  CredOptions co;
  // --uid and --gid: whom a credential is for (issue, grant).
  auto add_owner = [&](CLI::App* sub) {
    sub->add_option("--uid", co.uid, "user the credential is for (default: yours)")->type_name("UID");
    sub->add_option("--gid", co.gid, "also let processes of this group (their effective gid) use it")
        ->type_name("GID")
        ->check(CLI::Range(int64_t{0}, int64_t{0xFFFFFFFE}));
  };
  // The required --ptag and --cookie of an existing credential (grant, revoke).
  auto add_existing = [&](CLI::App* sub) {
    sub->add_option("--ptag", co.ptag, "ptag")->required()->type_name("N")->check(u32_validator(1, 255));
    sub->add_option("--cookie", co.cookie, "cookie (decimal or 0x-hex)")
        ->required()
        ->type_name("N")
        ->check(u32_validator(0, 0xFFFFFFFF));
  };
  auto* cred = app.add_subcommand("cred", "job credentials (ptag/cookie)");
  cred->require_subcommand(1);
  auto* issue =
      cred->add_subcommand("issue",
                           "issue a credential on the first selected daemon and grant it on the others; prints\n"
                           "PMI_GNI_PTAG=... and PMI_GNI_COOKIE=... lines (use: export $(nicemuctl cred issue))");
  add_owner(issue);
  issue->add_option("--ptag", co.ptag, "ptag to use (default: chosen by the daemon)")
      ->type_name("N")
      ->check(u32_validator(1, 255));
  issue->add_option("--cookie", co.cookie, "cookie to use (default: chosen by the daemon)")
      ->type_name("N")
      ->check(u32_validator(1, 0xFFFFFFFF));
  issue->add_flag("--export", co.export_vars, "prefix the lines with 'export ' (for eval)");

  auto* grant = cred->add_subcommand("grant", "grant an existing credential on the selected daemons");
  add_existing(grant);
  add_owner(grant);

  auto* revoke = cred->add_subcommand("revoke", "revoke a credential on the selected daemons");
  add_existing(revoke);

  auto* list = cred->add_subcommand("list", "credentials held by each daemon");
  list->add_flag("--json", co.as_json, "print {\"credentials\":[...]} as JSON");

  bool no_wait = false;
  auto* shutdown = app.add_subcommand("shutdown", "stop the selected daemons (attached clients see the NIC go down)");
  shutdown->add_flag("--no-wait", no_wait, "return once the daemons accepted, without waiting for them to exit");

  std::vector<std::string> fault_words;
  bool fault_json = false;
  auto* fault = app.add_subcommand("fault", "fault injection and reordering (docs/fault-injection.md)");
  fault->require_subcommand(1);
  auto* fshow = fault->add_subcommand("show", "print the configuration in force (with its seed)");
  fshow->add_flag("--json", fault_json, "print {\"nodes\":[...]} as JSON");
  auto* fset = fault->add_subcommand("set", "change knobs on top of the current configuration, e.g.\n"
                                            "  nicemuctl fault set seed=42 smsg.drop=0.1 smsg.dup=0.05 reorder=0.5");
  fset->add_option("spec", fault_words, "tokens of the fault spec")->required()->expected(1, -1);
  auto* freset = fault->add_subcommand("reset", "replace the configuration (defaults, then the tokens given)");
  freset->add_option("spec", fault_words, "tokens of the fault spec")->expected(0, -1);
  auto* foff = fault->add_subcommand("off", "stop injecting (rules are kept: 'fault set on' resumes)");
  for (auto* sub : {fset, freset, foff}) sub->add_flag("--json", fault_json, "print the result as JSON");

  // Multi-host setup (docs/fabric.md): the cluster key and the fabric map.
  std::string key_file;
  auto* keygen = app.add_subcommand("keygen", "create a cluster key file for the UDP fabric (mode 0600; copy it to "
                                              "every host, then nicemu --fabric-key FILE)");
  keygen->add_option("FILE", key_file, "key file to create (must not exist)")->required();
  auto* fabric_cmd = app.add_subcommand("fabric", "fabric map (NIC address -> host:port) for nicemu --fabric");
  fabric_cmd->require_subcommand(1);
  std::vector<std::string> gen_hosts;
  uint32_t gen_per_host = 1, gen_first = 0;
  uint16_t gen_port = 7700;
  auto* gen = fabric_cmd->add_subcommand("gen", "print a fabric map for a host list: PER_HOST consecutive NIC "
                                                "addresses per host, on ports PORT, PORT+1, ...");
  gen->add_option("HOSTS", gen_hosts, "host names or IPv4 addresses, in NIC address order")->required();
  gen->add_option("--per-host", gen_per_host, "emulated nodes (daemons) per host")->check(CLI::Range(1u, 4096u));
  gen->add_option("--port", gen_port, "UDP port of the first daemon of each host")->check(CLI::Range(1, 65535));
  gen->add_option("--first-nic", gen_first, "NIC address of the first node");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (keygen->parsed()) {
    std::string err;
    if (!nicemu::fabric::write_new_key(key_file, err)) {
      warn("keygen: " + err);
      return 1;
    }
    return 0;
  }
  if (gen->parsed()) {
    if (uint32_t{gen_port} + gen_per_host - 1 > 65535) {
      warn("fabric gen: ports run past 65535");
      return 2;
    }
    std::fputs(nicemu::fabric::generate(gen_hosts, gen_per_host, gen_port, gen_first).c_str(), stdout);
    return 0;
  }
  try {
    if (status->parsed()) return cmd_status(g, status_json);
    if (stats->parsed())
      return cmd_stats(g, stats_json ? StatsFormat::kJson : stats_prom ? StatsFormat::kPrometheus : StatsFormat::kText,
                       stats_all);
    if (top->parsed()) return cmd_top(g, top_interval, top_once ? 1 : top_iterations, top_no_clear);
    if (issue->parsed()) return cmd_cred_issue(g, co);
    if (grant->parsed()) return cmd_cred_grant(g, co);
    if (revoke->parsed()) return cmd_cred_revoke(g, co);
    if (list->parsed()) return cmd_cred_list(g, co);
    if (shutdown->parsed()) return cmd_shutdown(g, no_wait);
    if (fault->parsed()) {
      using nicemu::tools::FaultVerb;
      FaultVerb v = fshow->parsed() ? FaultVerb::kShow : fset->parsed() ? FaultVerb::kSet
                  : freset->parsed() ? FaultVerb::kReset : FaultVerb::kOff;
      (void)foff;
      std::vector<Link> links = g.connect();
      return nicemu::tools::cmd_fault(links, v, fault_words, fault_json);
    }
  } catch (const CtlError& e) {
    warn(e.what());
    return 1;
  }
  return 2;
}
