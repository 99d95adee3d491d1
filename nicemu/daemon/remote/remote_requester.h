// The initiating side of memory operations on other hosts (abi/remote_ops.h): libugni hands
// a post whose target lives on another host to its daemon (RemotePost); here it becomes
// pieces of at most kRmaPiece bytes sent to the target's daemon, at most kPeerWindow bytes
// in flight per peer, in posting order. Answers are matched by (operation id, piece): GET
// bytes and fetched AMO values are written into the initiator's registered memory (checked
// against its table again), and when every piece is answered the local/global events go
// into the initiator's CQ with the first error seen. A peer that goes silent past the
// fabric's retry budget, or restarts, fails every operation outstanding towards it with a
// recoverable transaction error; an initiator that died is forgotten without events.
// Members of a chained post (RemotePost::chain_id) post no events of their own: the chain's
// one local event goes out when its last member here is answered (see remote_ops.h).
// Runs on the daemon's event loop (single thread).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/remote_ops.h"
#include "nicemu/daemon/bte/bte_regions.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

class RemoteRequester : public FabricService {
 public:
  // Whether the fabric carries messages to `node`: cqe::kOk, kErrNoPeer (not a node of
  // another host in the fabric map) or kErrTransient (its channel is down).
  using Reachable = std::function<uint64_t(uint32_t node)>;
  static constexpr uint64_t kPeerWindow = 2048 * 1024;
  // Operations one CDM may have outstanding; beyond, a post completes at once with a
  // recoverable error (the client reposts), so daemon memory stays bounded.
  static constexpr uint32_t kMaxPerInitiator = 4096;

  RemoteRequester(FabricSend send, Reachable reachable);

  // A post of the CDM mapped as `initiator` (already known to be of this node); `inline_data`
  // holds post.inline_length bytes. Malformed posts complete with an error event.
  void post(const std::shared_ptr<MappedRegion>& initiator, const abi::remote::RemotePost& post,
            const uint8_t* inline_data);
  // An answer from the daemon of `from`. False if malformed (the caller counts and drops it).
  bool reply(uint32_t from, const uint8_t* msg, size_t len);
  // FabricService: RmaReply messages.
  const char* receive(uint32_t from, const abi::ctl::Header&, const uint8_t* msg, size_t len) override {
    return reply(from, msg, len) ? nullptr : "bad RmaReply";
  }
  // The daemon of `node` restarted or went silent: everything outstanding to it fails.
  void peer_lost(uint32_t node) override;
  // Sends pieces that waited for window or backlog room (also called by a timer).
  void pump();
  bool waiting() const { return !queue_.empty(); }
  // Whether a post of the CDM `attach_id` to `node` has pieces not sent yet (waiting for
  // window or backlog room): its later relayed SMSG messages wait behind them (smsg_relay.h).
  bool unsent(uint64_t attach_id, uint32_t node) const;
  // Called with a node whose waiting pieces have all gone out.
  void on_all_sent(std::function<void(uint32_t node)> f) { all_sent_ = std::move(f); }
  void progress() override {
    if (waiting()) pump();
  }

  nlohmann::json status() const;

 private:
  struct Op {
    uint64_t id = 0;
    abi::remote::RemotePost post{};
    std::vector<char> inline_data;
    std::shared_ptr<MappedRegion> initiator;
    uint64_t next = 0;         // first byte not yet sent
    uint64_t answered = 0;     // bytes of answered pieces
    uint32_t in_flight = 0;    // pieces sent, not answered
    uint64_t status = 0;       // first error
    bool sent_all = false;
    bool counted = false;      // in per_initiator_
  };
  struct PeerState {
    uint64_t bytes_in_flight = 0;
    std::deque<uint64_t> ops;  // ids in posting order; the front ones may have pieces to send
    bool stalled = false;      // pieces waited for room since the last all_sent_
  };

  // A chain whose members are not all answered yet, keyed by (attach id, chain id).
  struct Chain {
    std::shared_ptr<MappedRegion> initiator;
    abi::remote::RemotePost first{};  // the event fields (those of the member seen first)
    uint32_t remaining = 0;           // members not yet complete
    uint32_t fail_index = abi::remote::kNoChainFailure;
    uint64_t fail_status = 0;
  };
  // Chains outstanding at once; a chain whose members never all come (a library killed
  // mid-post, a forged post) stays until its CDM is gone and room is needed.
  static constexpr size_t kMaxChains = 65536;

  enum class Sent { kSent, kWindowFull, kRefused };
  void complete(Op& op);
  void chain_member_done(Op& op);
  void post_events(MappedRegion& initiator, const abi::remote::RemotePost& p, uint64_t status);
  Sent send_piece(Op& op, PeerState& p);
  void pump_peer(uint32_t node, PeerState& p);

  FabricSend send_;
  Reachable reachable_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Op> ops_;
  std::map<uint64_t, uint32_t> per_initiator_;  // attach id -> outstanding operations
  std::map<uint32_t, PeerState> peers_;
  std::map<std::pair<uint64_t, uint64_t>, Chain> chains_;
  std::deque<uint32_t> queue_;  // peers with pieces waiting for room
  std::vector<char> buf_;       // the piece being built
  std::function<void(uint32_t)> all_sent_;
  struct {
    uint64_t posts = 0, pieces = 0, bytes_out = 0, bytes_in = 0, errors = 0, lost = 0, dropped = 0, refused = 0,
             chains = 0;
  } ctr_;
};

}  // namespace nicemu::daemon
