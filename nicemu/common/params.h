// The one parameter table: every setting of the daemon, the libraries and the launcher,
// with its default, config-file key, command-line flag, environment variable and a one-line
// doc. `nicemu --help-config`, the default /etc/nicemu/nicemu.toml, the settings section of
// nicemu(8) and docs/configuration.md are all rendered from it (params_render.h), so a
// setting is documented once, here, and a removed one disappears everywhere.
//
// Header-only and constexpr, so libugni can take its defaults and bounds from it without
// linking anything.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace nicemu::params {

enum class Type : uint8_t { kUint, kString, kBool, kChoice, kPath };

// Who reads a setting (a bit set).
enum Users : uint8_t {
  kDaemon = 1,     // nicemu
  kLibrary = 2,    // libugni (and the libraries on it)
  kLauncher = 4,   // nicemu-run
  kCtl = 8,        // nicemuctl
};

struct Param {
  std::string_view name = {};          // canonical name; the config key when there is one
  Type type = Type::kString;
  std::string_view default_text = {};  // as the user would write it (or how it is derived)
  std::string_view config_key = {};    // key in nicemu.toml ("" = not a config-file setting)
  std::string_view flag = {};          // daemon command-line flag ("" = none)
  std::string_view env = {};           // environment variable ("" = none)
  uint64_t min = 0, max = 0;      // kUint bounds (inclusive)
  std::string_view choices = {};  // kChoice: values separated by '|'
  uint8_t users = kDaemon;
  bool live = false;              // re-applied by the daemon on SIGHUP
  std::string_view doc = {};
};

// Order is the order of the rendered documentation.
inline constexpr Param kTable[] = {
    {.name = "node", .type = Type::kUint, .default_text = "0", .config_key = "node", .flag = "--node",
     .max = 0xFFFFFFFF, .doc = "NIC address of this emulated node (the template unit passes its instance name)"},
    {.name = "config", .type = Type::kPath, .default_text = "", .flag = "--config",
     .doc = "toml file to read settings from; command-line flags take precedence over it"},
    {.name = "rundir", .type = Type::kPath, .default_text = "/run/nicemu for root (and for clients when daemons run there), else /tmp/nicemu-UID",
     .config_key = "rundir", .flag = "--rundir", .env = "NICEMU_RUNDIR", .users = kDaemon | kLibrary | kLauncher | kCtl,
     .doc = "directory of the daemons' control sockets and counter pages; clients and tools look there too"},
    {.name = "socket", .type = Type::kPath, .default_text = "RUNDIR/nic-NODE.sock", .config_key = "socket",
     .flag = "--socket", .doc = "control socket path of this daemon"},
    {.name = "log_level", .type = Type::kChoice, .default_text = "info", .config_key = "log_level",
     .flag = "--log-level", .choices = "trace|debug|info|warn|error|critical|off", .live = true,
     .doc = "daemon log threshold (logs go to stderr, i.e. the journal under systemd)"},
    {.name = "device", .type = Type::kChoice, .default_text = "aries", .config_key = "device", .flag = "--device",
     .choices = "aries|gemini", .doc = "device type reported to clients (GNI_GetDeviceType)"},
    {.name = "region_size_mb", .type = Type::kUint, .default_text = "256", .config_key = "region_size_mb",
     .flag = "--region-size-mb", .min = 16, .max = 65536,
     .doc = "shared-memory region per attached CDM, MiB (CQ rings, SMSG mailboxes, BTE ring)"},
    {.name = "bte_channels", .type = Type::kUint, .default_text = "2", .config_key = "bte_channels",
     .flag = "--bte-channels", .min = 1, .max = 64,
     .doc = "BTE (RDMA) engine channels: worker threads that move GNI_PostRdma data"},
    {.name = "bte_poll_us", .type = Type::kUint, .default_text = "0", .config_key = "bte_poll_us",
     .flag = "--bte-poll-us", .max = 1000,
     .doc = "microseconds the BTE engine keeps polling its rings after a request before it sleeps until a "
            "doorbell; 0 = sleep at once"},
    {.name = "allow_any_credential", .type = Type::kBool, .default_text = "false",
     .config_key = "allow_any_credential", .flag = "--allow-any-credential",
     .doc = "accept attaches with credentials that were never issued (single-user test setups only)"},
    {.name = "max_cdms_per_process", .type = Type::kUint, .default_text = "123", .config_key = "max_cdms_per_process",
     .flag = "--max-cdms-per-process", .min = 1, .max = 1ull << 24,
     .doc = "limit on CDMs attached (GNI_CdmAttach) of one process on this node (beyond: GNI_RC_ERROR_RESOURCE); "
            "default: the FMA descriptors an Aries NIC leaves to user CDMs, one per attach (docs/decisions.md)"},
    {.name = "max_cdms_per_credential", .type = Type::kUint, .default_text = "4096", .config_key = "max_cdms_per_credential",
     .flag = "--max-cdms-per-credential", .min = 1, .max = 1ull << 24,
     .doc = "limit on CDMs attached (GNI_CdmAttach) of all processes of one job credential on this node (beyond: GNI_RC_ERROR_RESOURCE)"},
    {.name = "max_registrations_per_process", .type = Type::kUint, .default_text = "16384", .config_key = "max_registrations_per_process",
     .flag = "--max-registrations-per-process", .min = 1, .max = 1ull << 24,
     .doc = "limit on live memory registrations of one process on this node (beyond: GNI_RC_ERROR_RESOURCE); libugni counts them against room the daemon grants in steps of 256"},
    {.name = "max_registrations_per_credential", .type = Type::kUint, .default_text = "262144", .config_key = "max_registrations_per_credential",
     .flag = "--max-registrations-per-credential", .min = 1, .max = 1ull << 24,
     .doc = "limit on memory registrations of all processes of one job credential on this node (beyond: GNI_RC_ERROR_RESOURCE), counted as the room granted to each process (up to 256 beyond its live ones)"},
    {.name = "max_cqs_per_process", .type = Type::kUint, .default_text = "1024", .config_key = "max_cqs_per_process",
     .flag = "--max-cqs-per-process", .min = 1, .max = 1ull << 24,
     .doc = "limit on completion queues of one process on this node (beyond: GNI_RC_ERROR_RESOURCE)"},
    {.name = "max_cqs_per_credential", .type = Type::kUint, .default_text = "65536", .config_key = "max_cqs_per_credential",
     .flag = "--max-cqs-per-credential", .min = 1, .max = 1ull << 24,
     .doc = "limit on completion queues of all processes of one job credential on this node (beyond: GNI_RC_ERROR_RESOURCE)"},
    {.name = "max_mailboxes_per_process", .type = Type::kUint, .default_text = "65536", .config_key = "max_mailboxes_per_process",
     .flag = "--max-mailboxes-per-process", .min = 1, .max = 1ull << 24,
     .doc = "limit on SMSG mailboxes in its regions of one process on this node (beyond: GNI_RC_ERROR_RESOURCE)"},
    {.name = "max_mailboxes_per_credential", .type = Type::kUint, .default_text = "1048576", .config_key = "max_mailboxes_per_credential",
     .flag = "--max-mailboxes-per-credential", .min = 1, .max = 1ull << 24,
     .doc = "limit on SMSG mailboxes in its regions of all processes of one job credential on this node (beyond: GNI_RC_ERROR_RESOURCE)"},
    {.name = "max_datagrams_per_process", .type = Type::kUint, .default_text = "1024", .config_key = "max_datagrams_per_process",
     .flag = "--max-datagrams-per-process", .min = 1, .max = 1ull << 24,
     .doc = "limit on session datagram posts of one process on this node not yet consumed (beyond: GNI_EpPostData* returns GNI_RC_ERROR_RESOURCE)"},
    {.name = "max_datagrams_per_credential", .type = Type::kUint, .default_text = "65536", .config_key = "max_datagrams_per_credential",
     .flag = "--max-datagrams-per-credential", .min = 1, .max = 1ull << 24,
     .doc = "limit on pending session datagram posts of all processes of one job credential on this node (beyond: the post finishes GNI_POST_TERMINATED)"},
    {.name = "fabric", .type = Type::kPath, .default_text = "", .config_key = "fabric", .flag = "--fabric",
     .doc = "fabric map (toml: NIC address -> host:port) to reach daemons on other hosts over UDP; none = this host only"},
    {.name = "fabric_key", .type = Type::kPath, .default_text = "/etc/nicemu/fabric.key", .config_key = "fabric_key",
     .flag = "--fabric-key",
     .doc = "cluster key (nicemuctl keygen) that authenticates every fabric packet; same file on every host, mode 0600"},
    {.name = "fabric_io_uring", .type = Type::kChoice, .default_text = "auto", .config_key = "fabric_io_uring",
     .flag = "--fabric-io-uring", .choices = "auto|all|off",
     .doc = "fabric data plane: io_uring multishot recvmsg where the kernel allows, sends with sendmmsg (auto); sends "
            "through io_uring too (all); recvmmsg and sendmmsg (off)"},
    {.name = "fabric_mac", .type = Type::kChoice, .default_text = "auto", .config_key = "fabric_mac",
     .flag = "--fabric-mac", .choices = "auto|aes256gcm|chacha20poly1305",
     .doc = "AEAD whose tag authenticates the fabric packets this daemon sends: aes256gcm where the CPU has "
            "AES-NI (auto), else chacha20poly1305; a daemon verifies either, but GCM only with AES-NI, so a "
            "cluster with hosts lacking it pins chacha20poly1305 everywhere"},
    {.name = "fabric_data", .type = Type::kChoice, .default_text = "udp", .config_key = "fabric_data",
     .flag = "--fabric-data", .choices = "udp|ofi",
     .doc = "how this node's ranks move data to other hosts: through the daemons over the UDP fabric (udp), or "
            "FMA/RDMA PUT and GET rank to rank over libfabric (ofi; libugni built with libfabric; the rest still "
            "through the daemons, which stay the control plane: docs/fabric.md)"},
    {.name = "ofi_provider", .type = Type::kString, .default_text = "tcp;ofi_rxm", .config_key = "ofi_provider",
     .flag = "--ofi-provider",
     .doc = "with fabric_data = ofi: the libfabric provider the ranks open (fi_info -p syntax; FI_PROVIDER in a "
            "rank's environment overrides it); tcp has no authentication: untrusted networks keep udp"},
    {.name = "poll_us", .type = Type::kUint, .default_text = "0", .config_key = "poll_us", .flag = "--poll-us",
     .max = 100000,
     .doc = "adaptive polling: after handling work the daemon's loop keeps polling for this many microseconds "
            "before it sleeps (lower latency across hosts where a core is to spare; 0 sleeps at once, the right "
            "choice when ranks spin on every core)"},
    {.name = "stats_interval_ms", .type = Type::kUint, .default_text = "250", .config_key = "stats_interval_ms",
     .flag = "--stats-interval-ms", .min = 10, .max = 60000, .live = true,
     .doc = "how often the daemon copies the per-CDM counters of its clients into its counter page"},
    {.name = "fault", .type = Type::kString, .default_text = "off", .config_key = "fault", .flag = "--fault",
     .live = true, .doc = "fault injection and reordering at start, e.g. 'seed=42 smsg.drop=0.1 reorder=0.5' "
            "(docs/fault-injection.md); changed live with nicemuctl fault"},
    {.name = "spin_us", .type = Type::kUint, .default_text = "100", .env = "NICEMU_SPIN_US", .max = 999999,
     .users = kLibrary,
     .doc = "microseconds a blocking wait (CQ, AMO lock) spins before it sleeps on a futex"},
    {.name = "rdma_direct", .type = Type::kUint, .default_text = "1", .env = "NICEMU_RDMA_DIRECT", .max = 1,
     .users = kLibrary,
     .doc = "1: a same-host GNI_PostRdma runs in the initiating process (one cross-memory copy) when none of "
            "the CDM's queued RDMA posts is in flight; 0: every post goes to the daemon's BTE engine"},
    {.name = "client_ofi_post_timeout_ms", .type = Type::kUint, .default_text = "5000",
     .env = "NICEMU_OFI_POST_TIMEOUT_MS", .min = 100, .max = 600000, .users = kLibrary,
     .doc = "with fabric_data = ofi on a provider that may hold a post forever (udp;ofi_rxd): milliseconds "
            "after which a post's events come as for a failed connection (TRANSIENT, PEER_GONE if the target "
            "died), and later posts to that target go through a fresh endpoint"},
    {.name = "client_ofi_mr_mode", .type = Type::kString, .default_text = "",
     .env = "NICEMU_OFI_MR_MODE", .users = kLibrary,
     .doc = "with fabric_data = ofi, for tests: memory registration modes the port acts as if the provider "
            "demanded, comma-separated: prov_key (keys a peer cannot compute, asked of the target), local "
            "(a registration's descriptor on every local buffer, checked); an unknown word keeps the CDM on "
            "the daemons' path"},
    {.name = "client_socket", .type = Type::kPath, .default_text = "derived from NICEMU_NODE", .env = "NICEMU_SOCKET",
     .users = kLibrary, .doc = "control socket of the daemon a process attaches to"},
    {.name = "client_node", .type = Type::kUint, .default_text = "first of PMI_GNI_LOC_ADDR, else the lowest in RUNDIR",
     .env = "NICEMU_NODE", .max = 0xFFFFFFFF, .users = kLibrary,
     .doc = "NIC address whose daemon a process attaches to"},
    {.name = "torus", .type = Type::kString, .default_text = "the job's node count in three sides as close as its divisors allow",
     .env = "NICEMU_TORUS", .users = kLibrary | kCtl,
     .doc = "sides XxYxZ (each 1..65535) of the emulated 3-D torus that PMI_Get_meshcoord, PMI_Get_max_dimension, "
            "librca and nicemuctl status place NIC addresses on (docs/cray-pe.md)"},
    {.name = "daemon_binary", .type = Type::kPath, .default_text = "nicemu next to nicemu-run, else from PATH",
     .env = "NICEMU_DAEMON", .users = kLauncher, .doc = "daemon executable nicemu-run starts when none runs"},
};

// The row called `name`; naming a row that does not exist fails to compile when used in a
// constant expression (and returns the first row otherwise, which tests rule out).
constexpr const Param& param(std::string_view name) {
  for (const Param& p : kTable)
    if (p.name == name) return p;
  throw "no such parameter";  // not a constant expression: a compile error in constexpr use
}

constexpr const Param* find(std::string_view name) {
  for (const Param& p : kTable)
    if (p.name == name) return &p;
  return nullptr;
}

constexpr const Param* find_config_key(std::string_view key) {
  for (const Param& p : kTable)
    if (!p.config_key.empty() && p.config_key == key) return &p;
  return nullptr;
}

constexpr std::optional<uint64_t> parse_uint_text(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

constexpr uint64_t default_uint(const Param& p) { return *parse_uint_text(p.default_text); }

// A kUint parameter from its environment variable: the value when set, a number and in
// range; otherwise the table's default. For the libraries (no diagnostics channel: a
// malformed value is ignored, as before the table existed).
inline uint64_t env_uint(const Param& p) {
  if (!p.env.empty())
    if (const char* v = std::getenv(p.env.data()); v && *v)
      if (auto x = parse_uint_text(v); x && *x >= p.min && *x <= p.max) return *x;
  return default_uint(p);
}

// Compile-time checks of the table itself.
consteval bool table_is_consistent() {
  for (const Param& p : kTable) {
    if (p.name.empty() || p.doc.empty()) return false;
    if (p.type == Type::kUint) {
      if (p.min > p.max) return false;
      // A numeric default that is a number must lie in range (derived ones are prose).
      if (auto d = parse_uint_text(p.default_text); d && (*d < p.min || *d > p.max)) return false;
    }
    if (p.type == Type::kChoice && p.choices.empty()) return false;
    if (p.live && !(p.users & kDaemon)) return false;
    if (!p.config_key.empty() && p.config_key != p.name) return false;
    for (const Param& q : kTable) {
      if (&p == &q) continue;
      if (p.name == q.name || (!p.flag.empty() && p.flag == q.flag) || (!p.env.empty() && p.env == q.env))
        return false;
    }
  }
  return true;
}
static_assert(table_is_consistent());

}  // namespace nicemu::params
