// nicemu-run: the single-host launcher and PMI server (design decision 8). Starts or finds
// the emulated nodes' daemons, obtains the job credential, runs N ranks under a PMI-1
// server with the Cray environment (PMI_GNI_*, ALPS_APP_PE), and cleans up.
#include <fcntl.h>
#include <poll.h>
#include <csignal>
#include <cerrno>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "daemons.h"
#include "job.h"
#include "nicemu/common/placement.h"
#include "nicemu/ctl/ctl_client.h"
#include "signal_pipe.h"

namespace {

// Descriptors 0-2 must be open, or pipes and sockets made later would land on them.
void ensure_stdio_open() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
}

// --daemons-only: the job environment for an external launcher, then wait for the signal
// to stop. Ranks attach to the first node (NICEMU_NODE) unless a wrapper such as
// tools/lib/nicemu-rank places them over NICEMU_NODES.
int serve_daemons(const nicemu::run::JobConfig& cfg, const std::string& env_file,
                  nicemu::run::SignalPipe& signals) {
  if (!cfg.nic) {
    fmt::print(stderr, "nicemu-run: --daemons-only needs the daemons (not --no-nic)\n");
    return 1;
  }
  std::string env = fmt::format("NICEMU_RUNDIR={}\nPMI_GNI_PTAG={}\nPMI_GNI_COOKIE={}\nPMI_GNI_DEV_ID=0\n",
                                cfg.nic->rundir, cfg.nic->ptag, cfg.nic->cookie);
  env += fmt::format("PMI_GNI_LOC_ADDR={}\nNICEMU_NODE={}\n", cfg.nic->node_addrs.front(),
                     cfg.nic->node_addrs.front());
  // Every node, for tools/lib/nicemu-rank, which places each rank on one of them.
  std::string all;
  for (uint32_t a : cfg.nic->node_addrs) all += (all.empty() ? "" : ",") + std::to_string(a);
  env += fmt::format("NICEMU_NODES={}\n", all);
  if (env_file.empty()) {
    fmt::print("{}", env);
    std::fflush(stdout);
  } else {
    // Written whole under a temporary name, then renamed: a reader never sees half a file.
    const std::string tmp = env_file + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f || std::fputs(env.c_str(), f) < 0 || std::fclose(f) != 0 || std::rename(tmp.c_str(), env_file.c_str()) != 0) {
      fmt::print(stderr, "nicemu-run: cannot write {}\n", env_file);
      return 1;
    }
  }
  for (;;) {
    struct pollfd p{signals.fd(), POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return 1;
    for (int sig : signals.drain())
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nicemu::run;
  ensure_stdio_open();

  CLI::App app{
      "nicemu-run: run N ranks on emulated Cray nodes under a PMI-1 server.\n"
      "Exit status: 0 when every rank exits 0; else the first failing rank's status\n"
      "(128+N for signal N), the PMI_Abort code, 124 on --timeout, 127 if the program\n"
      "cannot be run, 1 on launcher errors.",
      "nicemu-run"};
  JobConfig cfg;
  std::string rundir = nicemu::ctl::default_rundir();
  std::string log_level = "warn";
  bool no_nic = false;
  auto* np_opt = app.add_option("-n,--np", cfg.np, "number of ranks (required unless --daemons-only)")
                     ->check(CLI::Range(1, 1 << 20));
  app.add_option("--nodes", cfg.nodes, "number of emulated nodes; ranks are placed in blocks")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  auto* per_node_opt = app.add_option("--ranks-per-node", cfg.ranks_per_node,
                                      "place ranks in blocks of this many per node (aprun -N) instead of\n"
                                      "blocks of equal size; needs --nodes * this >= -n")
                           ->check(CLI::Range(1, 1 << 20));
  app.add_option("--rundir", rundir, "directory of the daemons' sockets")->capture_default_str();
  app.add_option("--log-level", log_level, "launcher and daemon log level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  std::string fabric_mode;
  app.add_option("--fabric", fabric_mode,
                 "udp: put every node on a host of its own (own run directory; the daemons talk over UDP on "
                 "loopback, as across a cluster; every operation crosses them, docs/fabric.md); ofi: the same, "
                 "with FMA/RDMA PUT and GET between ranks over libfabric (provider: FI_PROVIDER, else tcp;ofi_rxm)")
      ->check(CLI::IsMember({"udp", "ofi"}));
  app.add_flag("--no-nic", no_nic,
               "PMI only: start no daemons and set no PMI_GNI_* variables");
  app.add_option("--timeout", cfg.timeout_s, "kill the job after SECONDS (exit status 124)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--tag-output,!--no-tag-output", cfg.tag_output,
               "prefix each output line with \"[rank] \" (default on)");
  app.add_flag("--pmi-port", cfg.pmi_over_tcp,
               "ranks reach the PMI server over TCP (PMI_PORT/PMI_ID) instead of PMI_FD");
  bool daemons_only = false;
  std::string env_file;
  app.add_flag("--daemons-only", daemons_only,
               "start the daemons and issue a job credential, print the environment an\n"
               "external launcher (mpirun, mpiexec) must pass to the ranks, and keep them\n"
               "until SIGTERM/SIGINT; no program is run (docs/launchers.md)");
  app.add_option("--env-file", env_file,
                 "with --daemons-only: write the environment (KEY=VALUE lines) to this file\n"
                 "instead of stdout, once the daemons are ready");
  int place_rank = -1;
  auto* place_opt = app.add_option("--place", place_rank,
                                   "print the node index (from 0) that RANK of -n ranks is placed on over\n"
                                   "--nodes (and --ranks-per-node), and exit: nothing is started;\n"
                                   "launchers' rank wrappers (tools/lib/nicemu-rank) ask this")
                       ->check(CLI::NonNegativeNumber);
  app.footer("Usage: nicemu-run [options] -n N [--] program [arguments...]\n"
             "       nicemu-run --daemons-only [--nodes K] [--env-file FILE]\n"
             "       nicemu-run --place RANK -n N [--nodes K] [--ranks-per-node M]\n");
  // Everything from the program on belongs to the program (its own -n, --help, ...):
  // prefix_command() leaves it in remaining().
  app.prefix_command();
  try {
    app.parse(argc, argv);
    cfg.command = app.remaining();
    if (!cfg.command.empty() && cfg.command.front() == "--") cfg.command.erase(cfg.command.begin());
    if (!daemons_only && np_opt->count() == 0) throw CLI::RequiredError("-n");
    if (place_opt->count()) {
      if (place_rank >= cfg.np)
        throw CLI::ValidationError("--place", fmt::format("rank {} is not below -n {}", place_rank, cfg.np));
      if (daemons_only || !cfg.command.empty())
        throw CLI::ValidationError("--place", "takes no program and no --daemons-only");
    } else if (cfg.command.empty() && !daemons_only) {
      throw CLI::RequiredError("program");
    }
    if (per_node_opt->count() && static_cast<long long>(cfg.ranks_per_node) * cfg.nodes < cfg.np)
      throw CLI::ValidationError("--ranks-per-node",
                                 fmt::format("{} node(s) of {} rank(s) cannot hold {} ranks", cfg.nodes,
                                             cfg.ranks_per_node, cfg.np));
    // Separate run directories per node cannot be described by one NICEMU_RUNDIR.
    if (daemons_only && !fabric_mode.empty())
      throw CLI::ValidationError("--fabric", "cannot be combined with --daemons-only");
    if (!cfg.command.empty() && cfg.command.front().size() > 1 && cfg.command.front()[0] == '-')
      throw CLI::ExtrasError({cfg.command.front()});
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (place_opt->count()) {
    fmt::print("{}\n", nicemu::placement::node_of_rank(place_rank, cfg.np, cfg.nodes, cfg.ranks_per_node));
    return 0;
  }

  auto logger = spdlog::stderr_color_mt("nicemu-run");
  logger->set_pattern("nicemu-run: %^%l%$: %v");
  logger->set_level(spdlog::level::from_str(log_level));
  spdlog::set_default_logger(logger);

  // Handlers first: a Ctrl-C while daemons start still ends in an orderly cleanup.
  std::optional<SignalPipe> signals;
  try {
    signals.emplace();
  } catch (const std::exception& e) {
    fmt::print(stderr, "nicemu-run: {}\n", e.what());
    return kExitLaunchFailure;
  }

  std::unique_ptr<DaemonSet> daemons;
  std::optional<JobCredential> cred;
  int status = kExitLaunchFailure;
  try {
    if (!no_nic) {
      daemons = !fabric_mode.empty() ? DaemonSet::start_fabric(cfg.nodes, rundir, log_level, fabric_mode)
                                     : DaemonSet::start_or_find(cfg.nodes, rundir, log_level);
      if (static_cast<int>(daemons->nodes().size()) < cfg.nodes)
        throw std::runtime_error(fmt::format("{} node(s) requested, {} available",
                                             cfg.nodes, daemons->nodes().size()));
      cred = daemons->issue_credential(::getuid());
      NicEnv nic;
      nic.ptag = cred->ptag;
      nic.cookie = cred->cookie;
      nic.rundir = daemons->rundir();
      for (int n = 0; n < cfg.nodes; ++n) nic.node_addrs.push_back(daemons->nodes()[n].nic_addr);
      if (!fabric_mode.empty())
        for (int n = 0; n < cfg.nodes; ++n) nic.node_rundirs.push_back(daemons->nodes()[n].rundir);
      cfg.nic = std::move(nic);
      spdlog::info("credential ptag {} cookie {:#x} on {} node(s)", cred->ptag, cred->cookie,
                   cfg.nodes);
    }
    status = daemons_only ? serve_daemons(cfg, env_file, *signals) : run_job(cfg, *signals);
  } catch (const std::exception& e) {
    fmt::print(stderr, "nicemu-run: {}\n", e.what());
    if (!no_nic && !daemons)
      fmt::print(stderr, "nicemu-run: (use --no-nic to run a PMI-only job without daemons)\n");
    status = kExitLaunchFailure;
  }

  // Always: give the credential back and stop the daemons this run started.
  if (cred) {
    try {
      daemons->revoke_credential(*cred);
    } catch (const std::exception& e) {
      spdlog::warn("revoking the job credential: {}", e.what());
    }
  }
  daemons.reset();
  return status;
}
