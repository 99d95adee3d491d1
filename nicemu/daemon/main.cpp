// nicemu: the daemon that emulates one node's NIC. One process per emulated node.
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <functional>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "nicemu/abi/gni_values.h"
#include "nicemu/common/params_render.h"
#include "nicemu/ctl/ctl_client.h"
#include "nicemu/daemon/control_server.h"
#include "nicemu/daemon/node.h"
#include "nicemu/fault/fault_page.h"
#include "nicemu/daemon/settings.h"
#include "nicemu/daemon/transport/udp_fabric.h"
#include "nicemu/fabric/fabric_map.h"
#include "nicemu/fabric/packet_codec.h"

namespace {

namespace params = nicemu::params;

// Applies the log level; false if the name is unknown (the table's choices rule that out
// for validated settings).
bool set_log_level(const std::string& name) {
  auto lvl = spdlog::level::from_str(name);
  if (lvl == spdlog::level::off && name != "off") return false;
  spdlog::set_level(lvl);
  return true;
}

// The stats timer: copies the clients' counter blocks into the page every interval.
// The daemon's event loop. With a polling window, after each piece of work the loop keeps
// looking for more (non-blocking epoll) for `window` before it sleeps: a reply that comes
// back within the window costs no wake-up. Without one it sleeps at once.
void run_loop(asio::io_context& io, std::chrono::microseconds window) {
  if (window.count() == 0) {
    io.run();
    return;
  }
  auto guard = asio::make_work_guard(io);
  auto last = std::chrono::steady_clock::now();
  while (!io.stopped()) {
    if (io.poll() > 0) {
      last = std::chrono::steady_clock::now();
      continue;
    }
    if (std::chrono::steady_clock::now() - last < window) {
      sched_yield();  // let a rank on this CPU run: polling must not starve it
      continue;
    }
    if (io.run_one() == 0) break;  // stopped
    last = std::chrono::steady_clock::now();
  }
}

class StatsTimer {
 public:
  StatsTimer(asio::io_context& io, nicemu::daemon::Node& node, uint64_t interval_ms)
      : timer_(io), node_(node), interval_(interval_ms) {}
  void start() { arm(); }
  void stop() { timer_.cancel(); }
  void set_interval(uint64_t ms) { interval_ = std::chrono::milliseconds(ms); }

 private:
  void arm() {
    timer_.expires_after(interval_);
    timer_.async_wait([this](const asio::error_code& e) {
      if (e) return;
      node_.refresh_counters();
      arm();
    });
  }
  asio::steady_timer timer_;
  nicemu::daemon::Node& node_;
  std::chrono::milliseconds interval_;
};

}  // namespace

int main(int argc, char** argv) {
  nicemu::daemon::Settings settings;
  std::string help_config;
  CLI::App app{"nicemu: emulated Gemini/Aries NIC daemon (one per emulated node)"};
  settings.add_options(app);
  app.add_option("--help-config", help_config,
                 "print every setting (from the parameter table) and exit; FORMAT is text, toml (a default "
                 "config file), markdown or scdoc")
      ->type_name("FORMAT")
      ->expected(0, 1)
      ->default_str("text");
  CLI11_PARSE(app, argc, argv);
  // A reload (SIGHUP) that arrives while the daemon starts must not kill it: ignored until
  // the handler below takes over.
  ::signal(SIGHUP, SIG_IGN);
  // One connection per client process of this node and per process elsewhere on the host
  // that talks to it (an all-to-all of N ranks: N), plus memfds while attaching: the
  // usual soft limit of 1024 is below what a large job needs (issue 24).
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }

  if (app.count("--help-config") > 0) {
    auto f = params::format_from_name(help_config.empty() ? "text" : help_config);
    if (!f) {
      std::cerr << "nicemu: --help-config: unknown format '" << help_config << "' (text, toml, markdown, scdoc)\n";
      return 2;
    }
    std::cout << params::render(*f);
    return 0;
  }

  try {
    settings.resolve();
  } catch (const std::exception& e) {
    std::cerr << "nicemu: " << e.what() << "\n";
    return 2;
  }
  const uint32_t node_addr = static_cast<uint32_t>(settings.uint("node"));
  const std::string device = settings.str("device");

  auto logger = spdlog::stderr_color_mt("nicemu");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [nic {}] [%^%l%$] %v", node_addr));
  if (!set_log_level(settings.str("log_level"))) {
    std::cerr << "nicemu: unknown log level '" << settings.str("log_level") << "'\n";
    return 2;
  }

  std::string rundir = settings.str("rundir");
  if (rundir.empty()) rundir = nicemu::ctl::daemon_rundir();
  std::string socket = settings.str("socket");
  if (socket.empty()) socket = nicemu::ctl::socket_path(rundir, node_addr);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(socket).parent_path(), ec);

  // A socket that answers belongs to a running daemon; one that does not is stale.
  {
    nicemu::ctl::Connection probe;
    if (probe.connect(socket)) {
      spdlog::error("another daemon already serves {}", socket);
      return 1;
    }
    ::unlink(socket.c_str());
  }

  nicemu::daemon::NodeConfig cfg;
  cfg.nic_addr = node_addr;
  cfg.device_type = device == "aries" ? nicemu::abi::gni::kDeviceAries : nicemu::abi::gni::kDeviceGemini;
  cfg.region_size = settings.uint("region_size_mb") << 20;
  cfg.allow_any_credential = settings.flag("allow_any_credential");
  cfg.socket_path = socket;
  cfg.rundir = rundir;
  cfg.bte_channels = static_cast<uint32_t>(settings.uint("bte_channels"));
  cfg.bte_poll_us = static_cast<uint32_t>(settings.uint("bte_poll_us"));
  cfg.stats_path = nicemu::ctl::stats_path(socket);
  cfg.fault_path = nicemu::fault::page_path(socket);
  // Beside the socket, as the counter page: RUNDIR/nic-ADDR.cred (credential_table.h).
  cfg.cred_path = (socket.ends_with(".sock") ? socket.substr(0, socket.size() - 5) : socket) + ".cred";
  cfg.fault_spec = settings.str("fault");
  cfg.fabric_data = settings.str("fabric_data") == "ofi" ? nicemu::abi::ctl::kFabricDataOfi : nicemu::abi::ctl::kFabricDataUdp;
  cfg.ofi_provider = settings.str("ofi_provider");
  if (cfg.ofi_provider.size() >= nicemu::abi::ctl::kOfiProviderMax) {
    spdlog::error("ofi_provider: longer than {} characters", nicemu::abi::ctl::kOfiProviderMax - 1);
    return 2;
  }
  cfg.limits = nicemu::daemon::ResourceLimits::from([&](const std::string& n) { return settings.uint(n); });

  try {
    asio::io_context io(1);
    nicemu::daemon::Node node(cfg);
    nicemu::daemon::ControlServer server(io, node, socket);
    StatsTimer stats_timer(io, node, settings.uint("stats_interval_ms"));
    node.start_timers(io);
    // Other hosts: only with a fabric map, and never without the cluster key.
    std::unique_ptr<nicemu::daemon::UdpFabric> fabric;
    if (std::string map_path = settings.str("fabric"); !map_path.empty()) {
      std::string key_path = settings.str("fabric_key");
      if (key_path.empty()) key_path = std::string(nicemu::params::param("fabric_key").default_text);
      uint8_t key[nicemu::abi::wire::kKeyBytes];
      nicemu::fabric::load_key(key_path, key);
      fabric = std::make_unique<nicemu::daemon::UdpFabric>(
          io, node_addr, nicemu::fabric::FabricMap::load(map_path), key, node.stats(),
          [&node](uint32_t from, const uint8_t* m, size_t n) { node.port().deliver(from, m, n); },
          settings.str("fabric_io_uring") != "off", nicemu::fabric::parse_mac_alg(settings.str("fabric_mac")));
      std::memset(key, 0, sizeof key);
      node.set_fabric(fabric.get());
      fabric->set_fault_config(&node.fault_config());
      if (settings.str("fabric_io_uring") == "all") fabric->use_uring_send();
      fabric->start();
    }
    asio::signal_set signals(io, SIGTERM, SIGINT);
    signals.async_wait([&](const asio::error_code& e, int sig) {
      if (e) return;
      spdlog::info("signal {}: shutting down; attached clients will see the NIC go down", sig);
      node.shutdown();
      node.set_fabric(nullptr);
      if (fabric) fabric->stop();
      server.stop();
      stats_timer.stop();
      io.stop();
    });
    // SIGHUP: re-read the config file and apply the live settings (params.h marks them).
    asio::signal_set hup(io, SIGHUP);
    std::function<void(const asio::error_code&, int)> on_hup = [&](const asio::error_code& e, int) {
      if (e) return;
      hup.async_wait(on_hup);
      node.stats().node(nicemu::abi::counters::node::reloads).add(1);
      try {
        std::vector<std::string> restart;
        auto changed = settings.reload(restart);
        for (const auto& name : changed) {
          if (name == "log_level") set_log_level(settings.str("log_level"));
          if (name == "stats_interval_ms") stats_timer.set_interval(settings.uint("stats_interval_ms"));
          if (name == "fault") {
            std::string err;
            if (!node.reload_fault(settings.str("fault"), err))
              spdlog::error("reload: fault: {}; the configuration in force is unchanged", err);
          }
          spdlog::info("reload: {} is now {} ({})", name, settings.str(name), settings.source(name));
        }
        for (const auto& name : restart)
          spdlog::warn("reload: {} changed in {} but takes effect only after a restart", name, settings.str("config"));
        if (changed.empty() && restart.empty()) spdlog::info("reload: no setting changed");
      } catch (const std::exception& ex) {
        spdlog::error("reload failed, settings unchanged: {}", ex.what());
      }
    };
    hup.async_wait(on_hup);
    ::signal(SIGPIPE, SIG_IGN);
    node.converge_drc(io);
    server.start();
    stats_timer.start();
    spdlog::info("NIC address {} ({}) listening on {}; counters in {}", node_addr, device, socket, cfg.stats_path);
    run_loop(io, std::chrono::microseconds(settings.uint("poll_us")));
  } catch (const std::exception& e) {
    spdlog::error("fatal: {}", e.what());
    ::unlink(socket.c_str());
    return 1;
  }
  spdlog::info("stopped");
  return 0;
}
