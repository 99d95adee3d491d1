// MSGQ across hosts (abi/remote_ops.h, MsgqRemoteSend / MsgqDeliver / MsgqResult /
// MsgqCredit).
// Sending node's daemon: checks a member's message and forwards it over the fabric; when the
// fabric's backlog to that node is full the message waits here, in order (it holds a credit,
// so at most a ring's depth per node pair waits). Each message's local completion (the
// sender's CQ, msg_id) waits, in order per target node, for the target's MsgqResult and is
// posted with its status then; to a peer that is down or lost, every waiting completion is
// posted at once with TRANSIENT. MsgqCredit from the target adds to the send connection's
// credits (msgq_layout.h, TxCredit); a lost peer gives every credit back.
// Target node's daemon: puts the message into its segment's ring for the origin node and
// remembers the position; the outcome (stored, or PEER_GONE: no ring for that node or no
// such destination) joins the origin's MsgqResult, sent once per turn. Whenever the ring's
// head passes positions (receivers took the messages) it reports them freed with one
// MsgqCredit per (domain, origin) per turn. Those reports are looked for after every receive
// batch and, while messages are outstanding, on an adaptive timer (100 µs while slots come
// free, doubling to 5 ms while none do). A ring full despite the credits holds messages
// here, in arrival order, until a retry finds room; at most kMaxHeld, beyond which messages
// are dropped (TRANSIENT) and counted.
// Runs on the daemon's event loop.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <tuple>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/remote_ops.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/cdm/msgq_segment.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

class MsgqRelay : public FabricService {
 public:
  using PeerUp = std::function<bool(uint32_t node)>;
  using FindSegment = std::function<MsgqSegment*(const Credential&)>;
  using EachSegment = std::function<void(const std::function<void(MsgqSegment&)>&)>;
  // Posts a CQE into CQ slot `cq` of the CDM `attach_id` (if both still exist).
  using PostCqe = std::function<void(uint64_t attach_id, uint32_t cq, uint64_t entry)>;
  static constexpr size_t kMaxHeld = 65536;

  MsgqRelay(uint32_t self, FabricSend send, PeerUp up, FindSegment find, EachSegment each, PostCqe post);

  // GNI_MsgqSend of `cdm`, a member of `seg`, for a node of another host. False if the
  // request is malformed or not allowed (not connected to that node): counted by the caller,
  // the send completed with NO_PEER.
  bool forward(const CdmRegion& cdm, const MsgqSegment& seg, const abi::remote::MsgqRemoteSend& m);
  // MsgqDeliver from the daemon of `from`. False if malformed or about another node.
  bool deliver(uint32_t from, const uint8_t* msg, size_t len);
  // MsgqCredit from the daemon of `from`. False if malformed or about another node.
  bool credit(uint32_t from, const uint8_t* msg, size_t len);
  // MsgqResult from the daemon of `from`. False if malformed, about another node, or about
  // more messages than were sent to it.
  bool result(uint32_t from, const uint8_t* msg, size_t len);
  // FabricService: MsgqDeliver, MsgqCredit and MsgqResult messages.
  const char* receive(uint32_t from, const abi::ctl::Header& h, const uint8_t* msg, size_t len) override;
  // Held messages into their rings, waiting ones onto the fabric, freed slots reported.
  void progress() override;
  // The fabric lost `node` (silent past the retry budget, or restarted).
  void peer_lost(uint32_t node) override;
  // Work that waits on something other than the network: progress() again in poll_us().
  bool busy() const { return !held_.empty() || !waiting_.empty() || !out_.empty() || !results_.empty(); }
  uint64_t poll_us() const { return poll_us_; }
  // Receivers free ring slots without telling anybody: look again shortly.
  uint64_t wake_after() const override { return busy() ? poll_us_ : 0; }
  nlohmann::json status() const;

 private:
  using Key = std::tuple<uint32_t, uint32_t, uint32_t>;  // target side: (ptag, cookie, origin node)
  struct Outstanding {
    uint32_t ring = 0, gen = 0;  // the ring they went into (MsgqSegment::RingPos)
    std::deque<uint64_t> pos;    // positions not yet freed, ascending
    uint64_t unreported = 0;     // freed (or never stored), not yet reported
  };
  // kSuccess, kNotDone (ring full) or kInvalidState (nobody will take it).
  int put(const abi::remote::MsgqDeliver& d);
  void stored(const abi::remote::MsgqDeliver& d, int r, const MsgqSegment::RingPos& at);
  void settle();
  void give_back(uint32_t node, uint32_t ptag, uint32_t cookie, uint64_t n);  // sender side
  void fail_pending(uint32_t node);  // sender side: every completion waiting on `node`, TRANSIENT
  void complete(uint64_t attach_id, uint32_t cq, uint32_t msg_id, uint32_t status);
  void outcome(uint32_t origin, uint32_t status);  // target side
  void send_results();
  void retry_held();
  void drain_waiting();

  const uint32_t self_;
  FabricSend send_;
  PeerUp up_;
  FindSegment find_;
  EachSegment each_;
  std::deque<abi::remote::MsgqDeliver> held_;
  std::map<uint32_t, std::deque<abi::remote::MsgqDeliver>> waiting_;  // by target node
  std::map<Key, Outstanding> out_;
  struct Pending {  // a local completion waiting for the target's outcome
    uint64_t attach_id;
    uint32_t cq, msg_id;
  };
  std::map<uint32_t, std::deque<Pending>> pending_;                 // by target node, in order
  std::map<uint32_t, std::vector<abi::remote::MsgqResultRun>> results_;  // by origin node
  PostCqe post_;
  uint64_t poll_us_ = 100;
  struct {
    uint64_t forwarded = 0, send_failed = 0, waited = 0, delivered = 0, held = 0, undeliverable = 0, overflow = 0;
    uint64_t credits_sent = 0, credits_received = 0, credit_reports = 0, stale_credits = 0;
    uint64_t completed = 0, completed_errors = 0, result_messages = 0;
  } ctr_;
};

}  // namespace nicemu::daemon
