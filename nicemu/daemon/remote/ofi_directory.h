// The ofi fabric's control plane (docs/ofi-fabric.md): each CDM of a node
// whose daemon runs with fabric_data = ofi publishes its libfabric endpoint address here
// (OfiPublish); a CDM that posts to a node of another host asks for the target CDM's
// address (OfiLookup), which this daemon asks that node's daemon for over the UDP fabric
// (OfiAsk, OfiAnswer). The target's daemon answers only for a CDM of the asking CDM's
// credential (ptag, cookie), found as an RMA request's target is (RegionDirectory), so an
// address reaches no other job. The data then moves between the ranks, not through here.
// Single-threaded: every call comes from the daemon's event loop.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/daemon/bte/bte_regions.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

class OfiDirectory : public FabricService {
 public:
  // Sends a reply on the asking connection later (Peer::reply_later).
  using ReplyLater = std::function<void(std::vector<char>)>;
  // How long an asker waits for the target's daemon before GNI_RC_ERROR_RESOURCE.
  static constexpr std::chrono::milliseconds kAskTimeout{3000};

  OfiDirectory(uint32_t self, RegionDirectory& regions, FabricSend send);

  // The attach ids of the members of the MSGQ segment of a credential here (route
  // ofimsgq::kMsgqRoute asks for one of them), in member order.
  using MsgqMembers = std::function<std::vector<uint64_t>(uint32_t ptag, uint32_t cookie)>;
  void set_msgq_members(MsgqMembers f) { msgq_members_ = std::move(f); }

  // The CDM `attach_id` publishes its endpoint address (replacing an earlier one).
  bool publish(uint64_t attach_id, const uint8_t* addr, uint32_t len);
  // It is gone: its address with it.
  void cdm_gone(uint64_t attach_id) { addrs_.erase(attach_id); }
  // An OfiLookup `req` (header `h`) of a CDM of credential (ptag, cookie) for a node
  // (`remote_node`: of another host); answered through `later` when the target's daemon has
  // answered, or at once (the reply into `now`) when it cannot be asked.
  void lookup(const abi::ctl::Header& h, const abi::ctl::OfiLookup& req, uint32_t ptag, uint32_t cookie,
              ReplyLater later, std::vector<char>& now, bool remote_node);

  // FabricService: OfiAsk and OfiAnswer.
  const char* receive(uint32_t from, const abi::ctl::Header& h, const uint8_t* msg, size_t len) override;
  void peer_lost(uint32_t node) override;
  void progress() override;
  uint64_t wake_after() const override { return pending_.empty() ? 0 : 500000; }

  nlohmann::json status() const;

 private:
  struct Pending {
    abi::ctl::Header h;  // the OfiLookup's, for the reply's seq
    uint32_t node = 0;
    ReplyLater later;
    std::chrono::steady_clock::time_point deadline;
  };
  static std::vector<char> reply(const abi::ctl::Header& h, int32_t rc, const uint8_t* addr, uint32_t len);
  static void answer(const Pending& p, int32_t rc, const uint8_t* addr, uint32_t len);
  void note_host(const uint8_t* addr, uint32_t len);
  static constexpr size_t kMaxHosts = 16;

  const uint32_t self_;
  RegionDirectory& regions_;
  FabricSend send_;
  MsgqMembers msgq_members_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::vector<uint8_t>> addrs_;  // attach id -> published address
  std::map<uint64_t, Pending> pending_;             // asks outstanding, by id
  std::set<std::string> hosts_;                     // IPs of addresses ever published (kMaxHosts)
  struct {
    uint64_t published = 0, lookups = 0, answered = 0, refused = 0, asked = 0, timeouts = 0;
  } ctr_;
};

}  // namespace nicemu::daemon
