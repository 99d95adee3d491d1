// The daemon's one port to the other nodes' daemons. Services that talk across nodes (the
// remote requester and responder, the SMSG and MSGQ relays, datagram matching, the
// collective engine) implement FabricService, send through FabricPort::send (send_remote
// for those that only address other hosts), and receive from the port's table (message
// type -> service): the transport (transport/udp_fabric.h) delivers to the port, the port
// to the service, without passing through the node.
// Single-threaded: every call comes from the daemon's event loop.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "nicemu/abi/ctl_header.h"
#include "nicemu/daemon/transport/daemon_links.h"
#include "nicemu/daemon/stats_page.h"

namespace nicemu::daemon {

class UdpFabric;

// How every service sends one daemon-to-daemon message to the daemon of `node`: false if
// it cannot be sent now (no such node, its daemon or host gone, the peer's backlog full).
using FabricSend = std::function<bool(uint32_t node, const void* msg, size_t len)>;

class FabricService {
 public:
  virtual ~FabricService() = default;
  // A message of a type routed to this service (FabricPort::route) from the daemon of
  // `from` on another host: authenticated, its header checked (magic, version, length).
  // nullptr if taken, else why it was dropped (the port counts and logs it).
  virtual const char* receive(uint32_t from, const abi::ctl::Header& h, const uint8_t* msg, size_t len) = 0;
  // The transport lost what it had queued for `node` (silent past the retry budget, or
  // its daemon restarted).
  virtual void peer_lost(uint32_t /*node*/) {}
  // The transport is about to flush (after each receive batch, timer or queued flush):
  // work that waited for backlog room goes now.
  virtual void progress() {}
  // Microseconds after which progress() must run again even if nothing arrives (work that
  // waits on something other than the network); 0: no need.
  virtual uint64_t wake_after() const { return 0; }
};

class FabricPort {
 public:
  FabricPort(uint32_t self, std::string rundir, StatsPage& stats);
  FabricPort(const FabricPort&) = delete;
  FabricPort& operator=(const FabricPort&) = delete;

  // The transport to other hosts, when a fabric map is given (null: none, or stopped).
  void set_transport(UdpFabric* t);
  UdpFabric* transport() const { return transport_; }
  // The transport holds its channels up longer: this host is starved (fabric_load.h).
  bool overloaded() const;

  // The send function of services whose peers may be on this host (datagram matching, the
  // collective engine): the daemon of `node` by its socket if it is on this host, else
  // through the transport. Counted per link in the counter page.
  bool send(uint32_t node, const void* msg, size_t len);
  FabricSend sender() {
    return [this](uint32_t node, const void* m, size_t n) { return send(node, m, n); };
  }
  // The send function of services that only ever address other hosts (RMA, the SMSG and
  // MSGQ relays: their peers were found remote(), or sent to us over the transport):
  // straight to the transport, so their per-message path does not ask whether the node is
  // on this host (a map look-up, a clock read, and a stat of its socket path each second).
  // Counted per link like send().
  bool send_remote(uint32_t node, const void* msg, size_t len);
  FabricSend remote_sender() {
    return [this](uint32_t node, const void* m, size_t n) { return send_remote(node, m, n); };
  }
  // Whether `node` is a node of another host that the transport reaches.
  bool remote(uint32_t node);
  // Every such node of the fabric map.
  std::vector<uint32_t> remote_nodes();
  // The other daemons of this host (their sockets in the run directory).
  std::vector<uint32_t> local_nodes() const;
  // Whether the transport's channel to `node` is up.
  bool peer_up(uint32_t node) const;
  // The transport's view of `node`: cqe::kOk if reachable, kErrNoPeer (not a node of
  // another host in the fabric map), kErrTransient (its channel is down).
  uint64_t reach(uint32_t node);

  // Messages of type `op` from other hosts go to `s`; peer losses and progress go to every
  // service routed, in the order they were first routed.
  void route(std::initializer_list<abi::ctl::Op> ops, FabricService& s);

  // From the transport: a complete message from the daemon of `from` (authenticated, in
  // order, once). Only daemon-to-daemon types are accepted.
  void deliver(uint32_t from, const uint8_t* msg, size_t len);
  void peer_lost(uint32_t node);
  void progress();

 private:
  void drop(uint32_t from, const char* why);

  const uint32_t self_;
  const std::string rundir_;
  StatsPage& stats_;
  DaemonLinks links_;
  UdpFabric* transport_ = nullptr;
  std::array<FabricService*, 256> table_{};  // by ctl::Op
  std::vector<FabricService*> services_;
};

}  // namespace nicemu::daemon
