// nicemu: the daemon that emulates one node's NIC. One process per emulated node.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include "nicemu/abi/gni_values.h"
#include "nicemu/ctl/ctl_client.h"
#include "nicemu/daemon/control_server.h"
#include "nicemu/daemon/node.h"

namespace {

struct Options {
  uint32_t node = 0;
  std::string config;
  std::string socket;
  std::string rundir;
  std::string log_level = "info";
  std::string device = "aries";
  uint64_t region_mb = nicemu::abi::kDefaultRegionSize >> 20;
  bool allow_any_credential = false;
  uint32_t bte_channels = 2;
};

// Settings from a toml file; command-line flags given explicitly take precedence.
void apply_config(const std::string& path, Options& o, const CLI::App& app) {
  toml::table t = toml::parse_file(path);
  auto set = [&](const char* key, const char* flag, auto& field) {
    using T = std::remove_reference_t<decltype(field)>;
    if (app.count(flag) > 0) return;
    if (auto v = t[key].value<T>()) field = *v;
  };
  set("node", "--node", o.node);
  set("socket", "--socket", o.socket);
  set("rundir", "--rundir", o.rundir);
  set("log_level", "--log-level", o.log_level);
  set("device", "--device", o.device);
  set("region_size_mb", "--region-size-mb", o.region_mb);
  set("allow_any_credential", "--allow-any-credential", o.allow_any_credential);
  set("bte_channels", "--bte-channels", o.bte_channels);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"nicemu: emulated Gemini/Aries NIC daemon (one per emulated node)"};
  app.add_option("--node", o.node, "NIC address of this emulated node");
  app.add_option("--config", o.config, "toml configuration file")->check(CLI::ExistingFile);
  app.add_option("--socket", o.socket, "control socket path (default: RUNDIR/nic-ADDR.sock)");
  app.add_option("--rundir", o.rundir, "directory for control sockets (default: $NICEMU_RUNDIR, /run/nicemu as root, else /tmp/nicemu-UID)");
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error, critical, off");
  app.add_option("--device", o.device, "device type reported to clients: aries or gemini");
  app.add_option("--region-size-mb", o.region_mb, "shared-memory region per attached CDM, MiB (CQ rings and mailboxes)");
  app.add_flag("--allow-any-credential", o.allow_any_credential,
               "accept attaches with credentials that were never issued (single-user test setups)");
  app.add_option("--bte-channels", o.bte_channels,
                 "BTE (RDMA) engine channels: worker threads that move GNI_PostRdma data (default 2)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!o.config.empty()) apply_config(o.config, o, app);
  } catch (const std::exception& e) {
    std::cerr << "nicemu: config " << o.config << ": " << e.what() << "\n";
    return 2;
  }

  auto logger = spdlog::stderr_color_mt("nicemu");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [nic {}] [%^%l%$] %v", o.node));
  auto lvl = spdlog::level::from_str(o.log_level);
  if (lvl == spdlog::level::off && o.log_level != "off") {
    std::cerr << "nicemu: unknown log level '" << o.log_level << "'\n";
    return 2;
  }
  spdlog::set_level(lvl);

  if (o.device != "aries" && o.device != "gemini") {
    std::cerr << "nicemu: --device must be aries or gemini\n";
    return 2;
  }
  if (o.region_mb < 16 || o.region_mb > 65536) {
    std::cerr << "nicemu: --region-size-mb must be between 16 and 65536\n";
    return 2;
  }
  if (o.bte_channels < 1 || o.bte_channels > 64) {
    std::cerr << "nicemu: --bte-channels must be between 1 and 64\n";
    return 2;
  }
  if (o.rundir.empty()) o.rundir = nicemu::ctl::default_rundir();
  if (o.socket.empty()) o.socket = nicemu::ctl::socket_path(o.rundir, o.node);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(o.socket).parent_path(), ec);

  // A socket that answers belongs to a running daemon; one that does not is stale.
  {
    nicemu::ctl::Connection probe;
    if (probe.connect(o.socket)) {
      spdlog::error("another daemon already serves {}", o.socket);
      return 1;
    }
    ::unlink(o.socket.c_str());
  }

  nicemu::daemon::NodeConfig cfg;
  cfg.nic_addr = o.node;
  cfg.device_type = o.device == "aries" ? nicemu::abi::gni::kDeviceAries : nicemu::abi::gni::kDeviceGemini;
  cfg.region_size = o.region_mb << 20;
  cfg.allow_any_credential = o.allow_any_credential;
  cfg.socket_path = o.socket;
  cfg.rundir = o.rundir;
  cfg.bte_channels = o.bte_channels;

  try {
    asio::io_context io(1);
    nicemu::daemon::Node node(cfg);
    nicemu::daemon::ControlServer server(io, node, o.socket);
    asio::signal_set signals(io, SIGTERM, SIGINT);
    signals.async_wait([&](const asio::error_code& e, int sig) {
      if (e) return;
      spdlog::info("signal {}: shutting down; attached clients will see the NIC go down", sig);
      node.shutdown();
      server.stop();
      io.stop();
    });
    ::signal(SIGPIPE, SIG_IGN);
    server.start();
    spdlog::info("NIC address {} ({}) listening on {}", o.node, o.device, o.socket);
    io.run();
  } catch (const std::exception& e) {
    spdlog::error("fatal: {}", e.what());
    ::unlink(o.socket.c_str());
    return 1;
  }
  spdlog::info("stopped");
  return 0;
}
