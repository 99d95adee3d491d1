// The emulated NIC of one node: it owns the engines (cdm/, bte/, remote/, transport/ through
// the port, ce/) and the services of its control layer (control/: credentials, CDM table,
// quotas, MSGQ segments, fault settings), and dispatches each control request to its
// handler in control/ with the services that handler needs. Single-threaded: every call
// comes from the daemon's Asio loop.
#pragma once
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/shm_layout.h"
#include "nicemu/daemon/bte/bte_engine.h"
#include "nicemu/daemon/cdm/bandwidth_injection.h"
#include "nicemu/daemon/ce/ce_engine.h"
#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/credentials.h"
#include "nicemu/daemon/control/fault_settings.h"
#include "nicemu/daemon/control/handlers.h"
#include "nicemu/daemon/control/msgq_segments.h"
#include "nicemu/daemon/control/node_counters.h"
#include "nicemu/daemon/control/quotas.h"
#include "nicemu/daemon/control/request.h"
#include "nicemu/daemon/fabric_port.h"
#include "nicemu/daemon/remote/datagram_matcher.h"
#include "nicemu/daemon/remote/msgq_relay.h"
#include "nicemu/daemon/remote/remote_requester.h"
#include "nicemu/daemon/remote/remote_responder.h"
#include "nicemu/daemon/remote/ofi_directory.h"
#include "nicemu/daemon/remote/smsg_relay.h"
#include "nicemu/daemon/resource_limits.h"
#include "nicemu/daemon/stats_page.h"

namespace nicemu::daemon {

struct NodeConfig {
  uint32_t nic_addr = 0;
  uint32_t device_type = 1;  // GNI_DEVICE_ARIES
  uint64_t region_size = abi::kDefaultRegionSize;
  bool allow_any_credential = false;
  std::string socket_path;
  std::string rundir;  // where the other daemons of this host have their sockets
  uint32_t bte_channels = 2;  // BTE engine worker threads (--bte-channels)
  uint32_t bte_poll_us = 0;   // BTE dispatcher's polling window (--bte-poll-us)
  std::string stats_path;     // counter page file; empty = private memory (no readers)
  std::string fault_path;     // fault page file (abi/fault_layout.h); empty = private memory
  std::string fault_spec;     // fault configuration at start (--fault); "" or "off" = none
  std::string cred_path;      // the credential table's file (credential_table.h); empty = memory only
  uint32_t fabric_data = 0;   // abi::ctl::kFabricData*: how its CDMs move data across hosts
  std::string ofi_provider;   // with ofi: the libfabric provider they open
  ResourceLimits limits = ResourceLimits::defaults();
};

void to_json(nlohmann::json& j, const Counter& c);  // defined in node.cpp

class UdpFabric;

class Node {
 public:
  explicit Node(NodeConfig cfg);

  // Handles one request from `peer`; fills `reply` and may set `pass_fds` to descriptors
  // the caller sends along (still owned by the node).
  void handle(Peer& peer, const char* msg, size_t len, std::vector<char>& reply, PassFds& pass_fds);
  // The connection closed: a CDM attached through it is reclaimed.
  void connection_closed(Peer& peer);
  // SIGTERM: every region goes NIC-down so clients see errors, not hangs.
  void shutdown();
  bool shutdown_requested() const { return shutdown_requested_; }

  // `viewer`: the requester; cookies of credentials it may not use are left out.
  nlohmann::json status(const Peer* viewer = nullptr) const;
  const NodeConfig& config() const { return cfg_; }
  Counters& counters() { return ctr_; }
  StatsPage& stats() { return stats_; }
  // SIGHUP with a changed `fault` setting: the spec replaces the configuration. False
  // (configuration unchanged) with the reason if it does not parse.
  bool reload_fault(const std::string& spec, std::string& error);
  // Copies the attached clients' counter blocks into the counter page (a timer calls it).
  void refresh_counters();
  // The UDP transport to other hosts' daemons (transport/udp_fabric.h), when a fabric map
  // is given: the port (fabric_port.h) sends through it to nodes without a daemon socket on
  // this host, and it delivers their messages to the port. SMSG across hosts is relayed
  // over it (remote/smsg_relay.h), on its loop.
  void set_fabric(UdpFabric* f);
  // The port the node's services talk to other nodes' daemons through.
  FabricPort& port() { return port_; }
  // The fault configuration in force (nicemuctl fault / --fault): the fabric consults its
  // `packet` rules for every packet it sends.
  const abi::fault::Config& fault_config() const { return fault_.config(); }
  // Timers of the node's engines that run on the daemon's loop (the collective engine's
  // liveness probes).
  void start_timers(asio::io_context& io) { ce_.start(io); }
  // After set_fabric, before the control socket is served: the node asks the other daemons
  // for the DRC table (control/credentials.h). Until it has it, must_wait() holds the
  // requests that admit anyone or change credentials; when_ready() runs once it has it.
  void converge_drc(asio::io_context& io) { creds_.converge(io); }
  bool must_wait(const char* msg, size_t len) const;
  void when_ready(std::function<void()> f) { creds_.when_converged(std::move(f)); }

 private:
  // The control handlers by request type (node.cpp): each is a function of control/
  // (control/handlers.h), called with the services it needs.
  using Handler = void (*)(Node&, Request&);
  using Table = std::array<Handler, 256>;
  static const Table& table();

  NodeConfig cfg_;
  NicInfo nic_{cfg_.nic_addr, cfg_.device_type, cfg_.region_size, cfg_.allow_any_credential, cfg_.fabric_data,
               cfg_.ofi_provider};
  StatsPage stats_{cfg_.stats_path, cfg_.nic_addr};
  Counters ctr_;
  // The port is built after: the credentials only use it once the node runs.
  Credentials creds_{cfg_.nic_addr, cfg_.cred_path, ctr_, port_};
  // The vMDH table is the BTE engine's, built after the table (used once the node runs).
  CdmTable cdms_{[this]() -> const VmdhTable& { return bte_.regions().vmdh(); }};
  FabricPort port_{cfg_.nic_addr, cfg_.rundir, stats_};
  DatagramMatcher dgrams_;
  Quotas quotas_{cfg_.nic_addr, cfg_.limits, cdms_, dgrams_, ctr_};
  BandwidthInjection bi_;
  FaultSettings fault_{cfg_.fault_path, stats_};
  MsgqSegments msgqs_{cfg_.nic_addr};
  // Its threads only touch their own mappings of the regions, so it may outlive cdms_.
  BteEngine bte_{BteConfig{.nic_addr = cfg_.nic_addr, .rundir = cfg_.rundir, .channels = cfg_.bte_channels,
                           .poll_us = cfg_.bte_poll_us}};
  // Memory operations on other hosts' nodes (abi/remote_ops.h): ours as initiator, theirs
  // on our CDMs as target.
  RemoteRequester remote_out_;
  RemoteResponder remote_in_;
  OfiDirectory ofi_;  // the ofi fabric's endpoint addresses (control plane only)
  MsgqRelay msgq_relay_;  // after msgqs_, which it looks segments up in
  bool shutdown_requested_ = false;
  SmsgRelay smsg_;  // SMSG to and from nodes of other hosts (after cdms_ and stats_: uses both)
  CeEngine ce_;     // the collective engine: VCE channels and reductions (after cdms_)
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace nicemu::daemon
