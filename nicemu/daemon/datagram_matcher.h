// Session-management datagrams (GNI_EpPostData*): the daemons match them, as the Gemini
// driver does. A post lives at its poster's daemon; a directed post is also announced to
// the daemon of its target ("incoming"), which matches it against its own CDMs' posts:
//   directed -> wildcard      matched at the target's daemon;
//   directed <-> directed     both daemons could see the pair, so only the daemon whose
//                             own endpoint is the smaller (node, inst) matches it;
// the matching daemon completes its local post and tells the other daemon (kDgramMatched)
// to complete the peer post with this side's data. Completed and cancelled posts stay until
// their owner consumes them with a test/wait, and are visible to probes until then.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/daemon/cdm_region.h"

namespace nicemu::daemon {

class DatagramMatcher {
 public:
  // Sends a one-way message to the daemon of `node` (never called for this node).
  using SendFn = std::function<bool(uint32_t node, const void* msg, size_t len)>;
  using FindByAttach = std::function<CdmRegion*(uint64_t attach_id)>;
  using FindByInst = std::function<CdmRegion*(const Credential&, uint32_t inst)>;

  DatagramMatcher(uint32_t self_node, SendFn send, FindByAttach by_attach, FindByInst by_inst);

  // Requests from the owner CDM; each returns a gni_return_t value.
  int post(CdmRegion& owner, const abi::ctl::DgramPost& req);
  int test(CdmRegion& owner, const abi::ctl::DgramTest& req, abi::ctl::DgramTestReply& rep);
  int probe(CdmRegion& owner, const abi::ctl::DgramProbe& req, abi::ctl::DgramProbeReply& rep);
  int cancel(CdmRegion& owner, const abi::ctl::DgramCancel& req);

  // From other daemons.
  void incoming(const abi::ctl::DgramIncoming& m);
  void matched(const abi::ctl::DgramMatched& m);
  void retract(const abi::ctl::DgramRetract& m);

  // The CDM detached or died: its posts go, forwarded copies are retracted.
  void cdm_gone(uint64_t attach_id);

  size_t pending_posts() const;
  // Posts of one CDM held here, pending or finished but not yet taken (resource limits).
  size_t posts_of(uint64_t attach_id) const;
  size_t incoming_count() const { return incoming_.size(); }

 private:
  struct Post {
    uint64_t key = 0;
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
    uint32_t state = 0;  // gni_post_state_t
    uint32_t got_node = 0, got_inst = 0;
    uint16_t got_len = 0;
    uint8_t got[abi::ctl::kDgramMaxSize] = {};
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

  bool acceptable(const Post& p, const Incoming& in) const;
  void complete(Post& p, uint32_t node, uint32_t inst, const uint8_t* data, uint16_t len);
  void match(Post& p, size_t incoming_index);
  void deliver(uint32_t node, const void* msg, size_t len);
  Post* find(uint64_t attach, uint64_t ep, bool by_id, uint64_t id);
  void notify(uint64_t attach);

  uint32_t self_;
  SendFn send_;
  FindByAttach by_attach_;
  FindByInst by_inst_;
  uint64_t next_key_ = 1;
  std::map<uint64_t, Post> posts_;   // key -> post, in posting order
  std::vector<Incoming> incoming_;   // in arrival order
};

}  // namespace nicemu::daemon
