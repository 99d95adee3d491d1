// The emulated NIC of one node: protection domains (job credentials), the attached CDMs
// and their regions, and the dispatch of control requests. Single-threaded: every call
// comes from the daemon's Asio loop.
#pragma once
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/mem_handle.h"
#include "nicemu/daemon/cdm/bandwidth_injection.h"
#include "nicemu/daemon/bte/bte_engine.h"
#include "nicemu/daemon/cdm/cdm_index.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/credential_table.h"
#include "nicemu/daemon/ce/ce_engine.h"
#include "nicemu/daemon/remote/datagram_matcher.h"
#include "nicemu/daemon/lease_keeper.h"
#include "nicemu/daemon/remote/msgq_relay.h"
#include "nicemu/daemon/cdm/msgq_segment.h"
#include "nicemu/daemon/fabric_port.h"
#include "nicemu/daemon/remote/remote_requester.h"
#include "nicemu/daemon/remote/remote_responder.h"
#include "nicemu/daemon/resource_limits.h"
#include "nicemu/daemon/remote/smsg_relay.h"
#include "nicemu/daemon/stats_page.h"
#include "nicemu/fault/fault_page.h"

namespace nicemu::daemon {

namespace ctl = nicemu::abi::ctl;

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
  ResourceLimits limits = ResourceLimits::defaults();
};

// Descriptors sent along with a reply (SCM_RIGHTS), -1 = none; owned by the node. A CDM
// region takes two (read-only section, heap: abi/region_map.h).
using PassFds = std::array<int, 3>;

// Identity of a control connection (SO_PEERCRED) and the CDM it attached, if any.
struct Peer {
  uint64_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  uint64_t attach_id = 0;  // 0 = this connection attached nothing
  uint64_t refusals = 0;   // credential and limit refusals on this connection (log rate limit)
  std::string status_snapshot;  // the status document being read in pages (ctl::Status)
};

// Node counters, bound to slots of the counter page (stats_page.h): `++ctr_.x` updates the
// page that nicemuctl stats reads.
struct Counters {
  Counter connections, attaches, attach_refused, detaches;
  Counter registrations, deregistrations, cq_creates, cq_destroys;
  Counter peer_lookups, peer_lookup_failures, mbox_opens;
  Counter malformed_messages, credentials_issued;
  Counter datagrams_posted, datagrams_cancelled;
  Counter msgq_joins, msgq_join_refused, msgq_lookups;
  Counter credential_refused, resource_refused;
  Counter accept_deferred;  // accept retried later: the daemon was out of descriptors
};
void to_json(nlohmann::json& j, const Counter& c);  // defined in control/status.cpp

class UdpFabric;
struct PlainReply;  // control/request.h

class Node {
 public:
  explicit Node(NodeConfig cfg);

  // One control request being handled (header checked: magic, version, length).
  struct Request {
    Peer& peer;
    const ctl::Header& h;
    const char* msg;
    size_t len;
    std::vector<char>& reply;
    PassFds& pass_fds;
  };

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

 private:
  // The control handlers by request type (node.cpp); each lives in control/, by area.
  using Handler = void (Node::*)(Request&);
  using Table = std::array<Handler, 256>;
  static const Table& table();
  // A malformed request: counted, answered GNI_RC_INVALID_PARAM.
  void bad(Request& q);
  // The handler of a fixed-size request `Req` of the connection's attached CDM, answered
  // with `Rep` (control/request.h): malformed -> bad(); no CDM -> GNI_RC_INVALID_STATE;
  // else the reply's code is what `F` returns (it fills the rest of the reply).
  template <typename Req, typename Rep, int (Node::*F)(Request&, CdmRegion&, const Req&, Rep&)>
  void with_cdm(Request& q);
  // control/credentials.cpp
  void on_hello(Request& q);
  void on_attach(Request& q);
  void on_cred(Request& q);
  void on_drc(Request& q);
  void on_shutdown(Request& q);
  // control/memory.cpp
  int on_mem_register(Request& q, CdmRegion& cdm, const ctl::MemRegister& req, ctl::MemRegisterReply& r);
  void on_mem_register_segments(Request& q);
  int on_mem_deregister(Request& q, CdmRegion& cdm, const ctl::MemDeregister& req, PlainReply& r);
  void on_reg_budget(Request& q);
  int on_cq_create(Request& q, CdmRegion& cdm, const ctl::CqCreate& req, ctl::CqCreateReply& r);
  int on_cq_destroy(Request& q, CdmRegion& cdm, const ctl::CqDestroy& req, PlainReply& r);
  void on_peer_lookup(Request& q);
  void on_mbox_open(Request& q);
  int on_bte_open(Request& q, CdmRegion& cdm, const ctl::BteOpen& req, ctl::BteOpenReply& r);
  void on_bi_config_set(Request& q);
  void on_bi_config_get(Request& q);
  // control/status.cpp
  void on_status(Request& q);
  // control/remote.cpp
  void on_remote_post(Request& q);
  int on_smsg_relay_open(Request& q, CdmRegion& cdm, const ctl::SmsgRelayOpen& req, ctl::SmsgRelayOpenReply& r);
  void on_smsg_relay_note(Request& q);
  int attach(Peer& peer, const abi::ctl::Attach& req, abi::ctl::AttachReply& rep, PassFds& pass_fds);
  bool may_use(const Peer& peer, const Credential& c) const;
  // Counts and logs (rate-limited per connection) a request refused because the caller
  // may not use credential `c`; returns GNI_RC_PERMISSION_ERROR.
  int refuse_credential(Peer& peer, const char* what, const Credential& c);
  // Use of `r` now by process `pid` ({process, credential `c`}).
  std::array<uint64_t, 2> usage(Resource r, pid_t pid, const Credential& c) const;
  // False (counted and logged) if one more `r` for process `pid` in domain `c` would exceed
  // the per-process or per-credential limit.
  bool may_take(Peer& peer, Resource r, pid_t pid, const Credential& c);
  int handle_cred(Peer& peer, const ctl::Header& h, const ctl::Cred& req, ctl::CredReply& r);
  int handle_drc(Peer& peer, const ctl::Drc& req, ctl::DrcReply& r);
  // A DRC change this node accepted from a client of this host, to every node of the other
  // hosts (ctl::DrcSync); and one of those from another host, applied here.
  void send_drc_sync(const Peer& peer, const ctl::Drc& req, const ctl::DrcReply& r);
  const char* on_drc_sync(uint32_t from, const uint8_t* msg, size_t len);
  // The credential table from cfg_.cred_path, at start (credential_table.h).
  void load_credentials();
  // Writes the table to cfg_.cred_path if it changed since the last write (removes the
  // file when the table is empty). A failure is logged; the table in memory stands.
  void save_credentials();
  // Whether one of DRC credential `d`'s grants admits `peer` (uid, gid, or its job).
  bool drc_admits(const Peer& peer, const DrcCredential& d) const;
  CdmRegion* owned_cdm(const Peer& peer);
  CdmRegion* find_cdm(const Credential& c, uint32_t inst_id);
  // The live CDM of memory domain `domain` (the MDH of its handles) if it is in domain `c`:
  // how memory operations find their target, whatever id their EP was bound with.
  // `domain`: a route (mem_handle.h), a memory domain or a vMDH index | kVmdhRoute.
  CdmRegion* find_cdm_by_domain(const Credential& c, uint32_t domain);
  int register_memory(CdmRegion& cdm, RegSpec& spec, uint32_t slot, uint32_t vmdh_index, uint32_t mdd_block,
                      abi::ctl::MemRegisterReply& rep);
  // The live CDMs of process `pid` in domain `c` (process_mdd.h).
  std::vector<CdmRegion*> family(pid_t pid, const Credential& c);
  // nicemuctl fault: parse, check and publish a configuration (fault_spec.h).
  void handle_fault(Request& q);
  // Publishes `c` in the fault page, drawing a seed if none was given, and logs it.
  void publish_fault(abi::fault::Config c, bool seed_given, const char* why);
  // control/datagram.cpp
  int on_dgram_open(Request& q, CdmRegion& cdm, const ctl::DgramOpen& req, ctl::DgramOpenReply& r);
  int on_dgram_cancel(Request& q, CdmRegion& cdm, const ctl::DgramCancel& req, PlainReply& r);
  void handle_datagram(Request& q);
  void handle_msgq(Request& q);      // control/msgq.cpp
  // The CDM leaves its domain's MSGQ segment (if it joined); the last member reclaims it.
  void msgq_leave(const CdmRegion& cdm);

  NodeConfig cfg_;
  StatsPage stats_{cfg_.stats_path, cfg_.nic_addr};
  CredentialMap credentials_;
  DrcMap drc_;
  std::string saved_credentials_;  // the text in cfg_.cred_path ("" = no file)
  std::map<uint64_t, std::unique_ptr<CdmRegion>> cdms_;  // attach_id -> region
  CdmIndex cdm_index_;                                   // the same CDMs, by inst, process, credential
  // After cdms_, so it ends (marking the regions still mapped NIC down) before they unmap.
  LeaseKeeper leases_;
  uint64_t next_attach_ = 1;
  // Memory domains (MDH values) of the attached CDMs: attach id per domain, 0 = free.
  // Handed out round-robin so a domain is reused as late as possible.
  std::array<uint64_t, abi::mdh::kMaxDomains> domains_{};
  uint32_t next_domain_ = 1;
  Counters ctr_;
  FabricPort port_{cfg_.nic_addr, cfg_.rundir, stats_};
  // The port's service for ctl::DrcSync.
  struct DrcSyncService : FabricService {
    Node* node;
    explicit DrcSyncService(Node* n) : node(n) {}
    const char* receive(uint32_t from, const abi::ctl::Header&, const uint8_t* msg, size_t len) override {
      return node->on_drc_sync(from, msg, len);
    }
  } drc_sync_{this};
  DatagramMatcher dgrams_;
  BandwidthInjection bi_;
  fault::PagePublisher fault_{cfg_.fault_path};
  std::map<Credential, std::unique_ptr<MsgqSegment>> msgqs_;  // one per domain with MSGQ members here
  uint64_t next_msgq_ = 1;
  // Its threads only touch their own mappings of the regions, so it may outlive cdms_.
  BteEngine bte_{BteConfig{.nic_addr = cfg_.nic_addr, .rundir = cfg_.rundir, .channels = cfg_.bte_channels,
                           .poll_us = cfg_.bte_poll_us}};
  // Memory operations on other hosts' nodes (abi/remote_ops.h): ours as initiator, theirs
  // on our CDMs as target.
  RemoteRequester remote_out_;
  RemoteResponder remote_in_;
  MsgqRelay msgq_relay_;  // after msgqs_, which it looks segments up in
  // GNI_Ce* requests of an attached CDM and CE messages of other daemons (ce_ops.h).
  void handle_ce(Request& q);  // control/ce.cpp
  bool shutdown_requested_ = false;
  SmsgRelay smsg_;  // SMSG to and from nodes of other hosts (after cdms_ and stats_: uses both)
  CeEngine ce_;     // the collective engine: VCE channels and reductions (after cdms_)
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace nicemu::daemon
