// Session-management datagrams (GNI_EpPostData*): the daemons match them, as the Gemini
// driver does. A post lives at its poster's daemon; a directed post is also announced to
// the daemon of its target ("incoming"), which matches it against its own CDMs' posts:
//   directed -> wildcard      matched at the target's daemon;
//   directed <-> directed     both daemons could see the pair, so only the daemon whose
//                             own endpoint is the smaller (node, inst) matches it;
// the matching daemon completes its local post and tells the other daemon (kDgramMatched)
// to complete the peer post with this side's data. A post that completes or is cancelled
// leaves the matcher at once: it goes to its owner's completion ring (abi/dgram_ring.h),
// and the library keeps it, for its tests, waits and probes, until it is consumed. Events
// that do not fit in a full ring wait in a per-CDM backlog until the library kicks.
// Posts and announcements are indexed by whom they may match (issue 24): a post, an
// announcement or a completion looks at its few candidates, never at every post or
// announcement held (thousands in an on-demand all-to-all wire-up).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/abi/fault_layout.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/fabric_port.h"
#include "nicemu/fault/fault_injector.h"

namespace nicemu::daemon {

class DatagramMatcher : public FabricService {
 public:
  using FindByAttach = std::function<CdmRegion*(uint64_t attach_id)>;
  using FindByInst = std::function<CdmRegion*(const Credential&, uint32_t inst)>;

  DatagramMatcher(uint32_t self_node, FabricSend send, FindByAttach by_attach, FindByInst by_inst);

  // Requests from the owner CDM; each returns a gni_return_t value. A refused post is
  // also reported to the owner as TERMINATED (the library does not wait for the value).
  int post(CdmRegion& owner, const abi::ctl::DgramSubmit& req);
  // Finishes the post TERMINATED without taking it; returns `why`.
  int refuse(CdmRegion& owner, const abi::ctl::DgramSubmit& req, int why);
  int cancel(CdmRegion& owner, const abi::ctl::DgramCancel& req);
  // The owner drained its ring after we had stalled on it: move the backlog in.
  void kick(CdmRegion& owner);

  // From other daemons.
  void incoming(const abi::ctl::DgramIncoming& m);
  void matched(const abi::ctl::DgramMatched& m);
  void retract(const abi::ctl::DgramRetract& m);
  // FabricService: the three above from a daemon of another host, each only about `from`.
  const char* receive(uint32_t from, const abi::ctl::Header& h, const uint8_t* msg, size_t len) override;
  // A daemon of another host lost (silent past the retry budget, or restarted): what was in
  // flight between us may be gone — an announcement, the kDgramMatched that completes the
  // peer post — so neither side could complete the directed posts between us any more.
  // Ours towards it fail (GNI_POST_ERROR: the poster learns of it instead of waiting for
  // ever), its announcements here are dropped, and once it answers again it is told to do
  // the same (a reset: it may not have lost us, if it had nothing of ours to retransmit).
  void peer_lost(uint32_t node) override;
  // Sends the messages held for peers that were down.
  void progress() override;

  // The node's fault configuration (nicemuctl fault): `datagram` rules decide each directed
  // post of a CDM as it is made (docs/fault-injection.md): error ends it GNI_POST_ERROR,
  // drop and exhaust GNI_POST_TIMEOUT, before it reaches its target.
  void set_fault_config(const abi::fault::Config* cfg) { fault_cfg_ = cfg; }

  // The CDM detached or died: its posts go, forwarded copies are retracted.
  void cdm_gone(uint64_t attach_id);

  size_t pending_posts() const;
  // Posts of one CDM held here, pending or finished but not yet taken (resource limits).
  size_t posts_of(uint64_t attach_id) const;
  size_t incoming_count() const { return incoming_.size(); }
  size_t backlog_count() const;
  uint64_t lost_count() const { return lost_; }
  uint64_t injected_count() const { return injected_; }

 private:
  struct Post {
    uint64_t key = 0;
    uint64_t lib_seq = 0;
    uint64_t attach = 0;
    uint32_t inst = 0;
    Credential cred;
    uint64_t ep = 0;
    bool has_id = false;
    uint64_t id = 0;
    bool wildcard = false;
    uint32_t peer_node = 0, peer_inst = 0;
    uint16_t len = 0;
    uint8_t data[abi::ctl::kDgramMaxSize] = {};
    uint32_t state = 0;  // gni_post_state_t: pending while here
  };
  struct Incoming {
    uint32_t origin_node = 0;
    uint64_t origin_key = 0;
    uint32_t from_inst = 0;
    uint32_t to_inst = 0;
    Credential cred;
    uint16_t len = 0;
    uint8_t data[abi::ctl::kDgramMaxSize] = {};
  };

  // Who may match whom: (ptag, cookie, inst) of the target endpoint, and for directed posts
  // and announcements also (node, inst) of the other end.
  using Target = std::tuple<uint32_t, uint32_t, uint32_t>;
  using Pair = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, uint32_t>;
  static Target target_of(const Post& p) { return {p.cred.ptag, p.cred.cookie, p.inst}; }
  static Pair pair_of(const Post& p) { return {p.cred.ptag, p.cred.cookie, p.inst, p.peer_node, p.peer_inst}; }
  static Target target_of(const Incoming& in) { return {in.cred.ptag, in.cred.cookie, in.to_inst}; }
  static Pair pair_of(const Incoming& in) {
    return {in.cred.ptag, in.cred.cookie, in.to_inst, in.origin_node, in.from_inst};
  }

  bool acceptable(const Post& p, const Incoming& in) const;
  // Reports `p` finished to its owner; the caller erases it.
  void finish(Post& p, uint32_t state, uint32_t node, uint32_t inst, const uint8_t* data, uint16_t len);
  void publish(uint64_t attach, const abi::DgramEvent& e);
  void flush(CdmRegion& r, std::deque<abi::DgramEvent>& q);
  // Completes `p` with the announcement numbered `seq` and erases both.
  void match(Post& p, uint64_t seq);
  // False when a message for another host could not be queued (its peer down).
  bool deliver(uint32_t node, const void* msg, size_t len);
  // Tells `node` that our post `key` (or, with kDgramResetKey, every post) is gone, now or,
  // if it is down or has older messages held, once it answers.
  void send_retract(uint32_t node, uint64_t key);
  // Sends what is held for `node`, in order; false if some is still held.
  bool flush_held(uint32_t node);
  // Fails our pending post `key` (GNI_POST_ERROR) and erases it.
  void fail_post(uint64_t key);
  // Ends every datagram between us and `node`: our pending posts towards it fail, its
  // announcements go. Returns the keys of the posts failed.
  std::vector<uint64_t> reset_with(uint32_t node);
  Post* find(uint64_t attach, uint64_t ep, bool by_id, uint64_t id);
  Post& add_post(const Post& p);
  void erase_post(uint64_t key);
  void add_incoming(const Incoming& in);
  void erase_incoming(uint64_t seq);
  // The oldest post acceptable for `in`, or nullptr.
  Post* candidate_for(const Incoming& in);

  uint32_t self_;
  FabricSend send_;
  FindByAttach by_attach_;
  FindByInst by_inst_;
  uint64_t next_key_ = 1;
  uint64_t next_seq_ = 1;
  std::map<uint64_t, Post> posts_;                              // key -> post, in posting order
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> post_by_ep_;  // (attach, ep) -> key: one per EP
  std::unordered_map<uint64_t, size_t> posts_per_attach_;
  std::map<Target, std::set<uint64_t>> wildcards_;  // keys of wildcard posts
  std::map<Pair, std::set<uint64_t>> directed_;     // keys of directed posts
  std::map<uint64_t, Incoming> incoming_;           // arrival number -> announcement
  std::map<Target, std::set<uint64_t>> incoming_to_;
  std::map<Pair, std::set<uint64_t>> incoming_pair_;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> incoming_by_origin_;  // (node, key) -> arrival number
  std::unordered_map<uint64_t, std::deque<abi::DgramEvent>> backlog_;  // attach -> events held back
  static constexpr size_t kMaxHeldRetracts = 4096;                      // per peer; older ones dropped
  std::map<uint32_t, std::deque<uint64_t>> held_retracts_;             // node -> keys (or the reset), in order
  uint64_t lost_ = 0;                                                  // posts failed by a lost peer
  // Injected datagram faults: one decision stream per posting CDM, remade when the
  // configuration changes.
  struct Faults {
    abi::fault::Config cfg{};
    fault::Injector inj;
  };
  // The fate `post` draws for a directed post of `owner` to `peer_node`: kNone, or the
  // gni_post_state_t it ends in.
  uint32_t injected_state(const CdmRegion& owner, uint32_t peer_node);
  const abi::fault::Config* fault_cfg_ = nullptr;
  std::unordered_map<uint64_t, Faults> faults_;  // attach -> its stream
  uint64_t injected_ = 0;
};

}  // namespace nicemu::daemon
