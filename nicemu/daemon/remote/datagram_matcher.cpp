#include "nicemu/daemon/remote/datagram_matcher.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "nicemu/abi/gni_values.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;

DatagramMatcher::DatagramMatcher(uint32_t self_node, FabricSend send, FindByAttach by_attach, FindByInst by_inst)
    : self_(self_node), send_(std::move(send)), by_attach_(std::move(by_attach)), by_inst_(std::move(by_inst)) {}

bool DatagramMatcher::deliver(uint32_t node, const void* msg, size_t len) {
  if (node == self_) {
    const auto* h = static_cast<const ctl::Header*>(msg);
    switch (static_cast<ctl::Op>(h->op)) {
      case ctl::Op::kDgramIncoming:
        incoming(*static_cast<const ctl::DgramIncoming*>(msg));
        break;
      case ctl::Op::kDgramMatched:
        matched(*static_cast<const ctl::DgramMatched*>(msg));
        break;
      case ctl::Op::kDgramRetract:
        retract(*static_cast<const ctl::DgramRetract*>(msg));
        break;
      default:
        break;
    }
    return true;
  }
  if (send_(node, msg, len)) return true;
  spdlog::warn("datagram message for node {} could not be delivered", node);
  return false;
}

void DatagramMatcher::send_retract(uint32_t node, uint64_t key) {
  auto& q = held_retracts_[node];  // behind any held before it: they go in order
  q.push_back(key);
  if (q.size() > kMaxHeldRetracts) q.pop_front();
  flush_held(node);
}

bool DatagramMatcher::flush_held(uint32_t node) {
  auto it = held_retracts_.find(node);
  if (it == held_retracts_.end()) return true;
  auto& q = it->second;
  while (!q.empty()) {
    ctl::DgramRetract m{};
    m.h = ctl::make_header<ctl::DgramRetract>(ctl::Op::kDgramRetract, 0);
    m.origin_key = q.front();
    m.origin_node = self_;
    if (node == self_)
      retract(m);
    else if (!send_(node, &m, sizeof m))
      return false;  // still down
    q.pop_front();
  }
  held_retracts_.erase(it);
  return true;
}

void DatagramMatcher::progress() {
  std::vector<uint32_t> nodes;
  for (const auto& [node, q] : held_retracts_) nodes.push_back(node);
  for (uint32_t node : nodes) flush_held(node);
}

void DatagramMatcher::fail_post(uint64_t key) {
  Post& p = posts_.at(key);
  ++lost_;
  finish(p, rc::kPostError, 0, 0, nullptr, 0);
  erase_post(key);
}

std::vector<uint64_t> DatagramMatcher::reset_with(uint32_t node) {
  std::vector<uint64_t> keys;
  for (const auto& [key, p] : posts_)
    if (!p.wildcard && p.state == rc::kPostPending && p.peer_node == node) keys.push_back(key);
  for (uint64_t key : keys) fail_post(key);
  std::vector<uint64_t> seqs;
  for (const auto& [seq, in] : incoming_)
    if (in.origin_node == node) seqs.push_back(seq);
  for (uint64_t seq : seqs) erase_incoming(seq);
  if (!keys.empty() || !seqs.empty())
    spdlog::info("datagrams with node {} ended: {} posts towards it failed, {} of its announcements dropped", node,
                 keys.size(), seqs.size());
  return keys;
}

void DatagramMatcher::peer_lost(uint32_t node) {
  reset_with(node);
  // The reset covers every post of ours, so single retractions still held are moot.
  held_retracts_.erase(node);
  send_retract(node, ctl::kDgramResetKey);
}

DatagramMatcher::Post* DatagramMatcher::find(uint64_t attach, uint64_t ep, bool by_id, uint64_t id) {
  auto it = post_by_ep_.find({attach, ep});
  if (it == post_by_ep_.end()) return nullptr;
  Post& p = posts_.at(it->second);
  return !by_id || (p.has_id && p.id == id) ? &p : nullptr;
}

DatagramMatcher::Post& DatagramMatcher::add_post(const Post& p) {
  Post& stored = posts_[p.key] = p;
  post_by_ep_[{p.attach, p.ep}] = p.key;
  ++posts_per_attach_[p.attach];
  if (p.wildcard)
    wildcards_[target_of(p)].insert(p.key);
  else
    directed_[pair_of(p)].insert(p.key);
  return stored;
}

void DatagramMatcher::erase_post(uint64_t key) {
  auto it = posts_.find(key);
  if (it == posts_.end()) return;
  const Post& p = it->second;
  post_by_ep_.erase({p.attach, p.ep});
  if (auto n = posts_per_attach_.find(p.attach); n != posts_per_attach_.end() && --n->second == 0)
    posts_per_attach_.erase(n);
  auto drop = [key](auto& index, const auto& k) {
    auto s = index.find(k);
    if (s == index.end()) return;
    s->second.erase(key);
    if (s->second.empty()) index.erase(s);
  };
  if (p.wildcard)
    drop(wildcards_, target_of(p));
  else
    drop(directed_, pair_of(p));
  posts_.erase(it);
}

void DatagramMatcher::add_incoming(const Incoming& in) {
  const uint64_t seq = next_seq_++;
  incoming_[seq] = in;
  incoming_to_[target_of(in)].insert(seq);
  incoming_pair_[pair_of(in)].insert(seq);
  incoming_by_origin_[{in.origin_node, in.origin_key}] = seq;
}

void DatagramMatcher::erase_incoming(uint64_t seq) {
  auto it = incoming_.find(seq);
  if (it == incoming_.end()) return;
  const Incoming& in = it->second;
  auto drop = [seq](auto& index, const auto& k) {
    auto s = index.find(k);
    if (s == index.end()) return;
    s->second.erase(seq);
    if (s->second.empty()) index.erase(s);
  };
  drop(incoming_to_, target_of(in));
  drop(incoming_pair_, pair_of(in));
  if (auto o = incoming_by_origin_.find({in.origin_node, in.origin_key}); o != incoming_by_origin_.end() && o->second == seq)
    incoming_by_origin_.erase(o);
  incoming_.erase(it);
}

// The candidates are the wildcard posts of the target endpoint and its directed posts to
// the announcing endpoint; the oldest acceptable one wins, as in posting order.
DatagramMatcher::Post* DatagramMatcher::candidate_for(const Incoming& in) {
  std::vector<uint64_t> keys;
  if (auto w = wildcards_.find(target_of(in)); w != wildcards_.end()) keys.insert(keys.end(), w->second.begin(), w->second.end());
  if (auto d = directed_.find(pair_of(in)); d != directed_.end()) keys.insert(keys.end(), d->second.begin(), d->second.end());
  std::sort(keys.begin(), keys.end());
  for (uint64_t k : keys) {
    Post& p = posts_.at(k);
    if (acceptable(p, in)) return &p;
  }
  return nullptr;
}

// Whether local post `p` may match the incoming directed post `in` at this daemon.
bool DatagramMatcher::acceptable(const Post& p, const Incoming& in) const {
  if (p.state != rc::kPostPending || p.inst != in.to_inst || !(p.cred == in.cred)) return false;
  if (p.wildcard) return true;
  if (p.peer_node != in.origin_node || p.peer_inst != in.from_inst) return false;
  // Directed <-> directed: the daemon of the smaller endpoint matches; between two posts of
  // one endpoint (an EP bound to its own CDM), the earlier post's daemon does.
  auto mine = std::make_tuple(self_, p.inst);
  auto theirs = std::make_tuple(in.origin_node, in.from_inst);
  if (mine != theirs) return mine < theirs;
  return p.key < in.origin_key;
}

void DatagramMatcher::finish(Post& p, uint32_t state, uint32_t node, uint32_t inst, const uint8_t* data,
                             uint16_t len) {
  p.state = state;
  DgramEvent e{};
  e.lib_seq = p.lib_seq;
  e.ep = p.ep;
  e.id = p.id;
  e.has_id = p.has_id;
  e.state = state;
  e.peer_addr = node;
  e.peer_inst = inst;
  e.data_len = std::min<uint16_t>(len, ctl::kDgramMaxSize);
  if (e.data_len) std::memcpy(e.data, data, e.data_len);
  publish(p.attach, e);
}

void DatagramMatcher::publish(uint64_t attach, const DgramEvent& e) {
  CdmRegion* r = by_attach_(attach);
  if (!r || !r->alive() || !r->has_dgram_ring()) return;  // nobody left to tell
  auto it = backlog_.find(attach);
  if (it != backlog_.end() && !it->second.empty()) {
    it->second.push_back(e);  // keep the order: behind what is already held back
    flush(*r, it->second);
    return;
  }
  if (!r->push_datagram(e)) {
    backlog_[attach].push_back(e);
    return;
  }
  r->notify_datagram();
}

void DatagramMatcher::flush(CdmRegion& r, std::deque<DgramEvent>& q) {
  bool moved = false;
  while (!q.empty() && r.push_datagram(q.front())) {
    q.pop_front();
    moved = true;
  }
  if (moved) r.notify_datagram();
}

void DatagramMatcher::kick(CdmRegion& owner) {
  auto it = backlog_.find(owner.attach_id());
  if (it == backlog_.end()) return;
  flush(owner, it->second);
  if (it->second.empty()) backlog_.erase(it);
}

size_t DatagramMatcher::backlog_count() const {
  size_t n = 0;
  for (auto& [a, q] : backlog_) n += q.size();
  return n;
}

void DatagramMatcher::match(Post& p, uint64_t seq) {
  Incoming in = incoming_.at(seq);
  erase_incoming(seq);
  finish(p, rc::kPostCompleted, in.origin_node, in.from_inst, in.data, in.len);
  ctl::DgramMatched m{};
  m.h = ctl::make_header<ctl::DgramMatched>(ctl::Op::kDgramMatched, 0);
  m.origin_key = in.origin_key;
  m.peer_key = p.key;
  m.peer_node = self_;
  m.peer_inst = p.inst;
  m.data_len = p.len;
  std::memcpy(m.data, p.data, p.len);
  erase_post(p.key);  // before delivering: a same-node delivery looks the posts up again
  deliver(in.origin_node, &m, sizeof m);
}

int DatagramMatcher::refuse(CdmRegion& owner, const ctl::DgramSubmit& req, int why) {
  DgramEvent e{};
  e.lib_seq = req.lib_seq;
  e.ep = req.ep;
  e.id = req.id;
  e.has_id = req.has_id;
  e.state = rc::kPostTerminated;
  publish(owner.attach_id(), e);
  return why;
}

int DatagramMatcher::post(CdmRegion& owner, const ctl::DgramSubmit& req) {
  if (req.data_len > ctl::kDgramMaxSize || req.buf_size > ctl::kDgramMaxSize) return refuse(owner, req, rc::kSizeError);
  if (find(owner.attach_id(), req.ep, false, 0)) return refuse(owner, req, rc::kErrorResource);  // one per EP
  Post p;
  p.key = next_key_++;
  p.lib_seq = req.lib_seq;
  p.attach = owner.attach_id();
  p.inst = owner.inst_id();
  p.cred = owner.credential();
  p.ep = req.ep;
  p.has_id = req.has_id != 0;
  p.id = req.id;
  p.wildcard = req.wildcard != 0;
  p.peer_node = req.peer_addr;
  p.peer_inst = req.peer_inst;
  p.len = req.data_len;
  std::memcpy(p.data, req.data, p.len);
  p.state = rc::kPostPending;
  Post& stored = add_post(p);
  if (!stored.wildcard)
    if (uint32_t state = injected_state(owner, stored.peer_node); state != rc::kPostPending) {
      // Lost (a timeout) or failed on its way: it never reaches its target, whose own post
      // stays pending, as on the network.
      ++injected_;
      const uint64_t key = stored.key;
      finish(stored, state, stored.peer_node, stored.peer_inst, nullptr, 0);
      erase_post(key);
      return rc::kSuccess;
    }

  // Posts aimed at this CDM that arrived earlier, oldest first: any for a wildcard, those
  // of the named peer for a directed post. (If one matches, the kDgramMatched sent
  // completes the peer's post; ours is finished and gone.)
  const std::set<uint64_t>* earlier = nullptr;
  if (stored.wildcard) {
    if (auto it = incoming_to_.find(target_of(stored)); it != incoming_to_.end()) earlier = &it->second;
  } else if (auto it = incoming_pair_.find(pair_of(stored)); it != incoming_pair_.end()) {
    earlier = &it->second;
  }
  if (earlier)
    for (uint64_t seq : *earlier)
      if (acceptable(stored, incoming_.at(seq))) {
        match(stored, seq);
        return rc::kSuccess;
      }
  if (!stored.wildcard) {
    // Still pending: announce it to the target's daemon. A same-node delivery may match
    // and erase it, so nothing of `stored` is used after.
    ctl::DgramIncoming m{};
    m.h = ctl::make_header<ctl::DgramIncoming>(ctl::Op::kDgramIncoming, 0);
    m.origin_key = stored.key;
    m.origin_node = self_;
    m.from_inst = stored.inst;
    m.to_inst = stored.peer_inst;
    m.ptag = stored.cred.ptag;
    m.cookie = stored.cred.cookie;
    m.data_len = stored.len;
    std::memcpy(m.data, stored.data, stored.len);
    // Its node's daemon unreachable (silent past the retry budget; or a reset for it still
    // held, which must reach it first or it would drop this announcement): nobody could
    // match it.
    const uint64_t key = stored.key;
    if (!flush_held(stored.peer_node) || !deliver(stored.peer_node, &m, sizeof m)) fail_post(key);
  }
  return rc::kSuccess;
}

uint32_t DatagramMatcher::injected_state(const CdmRegion& owner, uint32_t peer_node) {
  namespace af = abi::fault;
  if (!fault_cfg_ || !fault_cfg_->enabled) return rc::kPostPending;
  Faults& f = faults_[owner.attach_id()];
  const uint64_t now_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                    std::chrono::steady_clock::now().time_since_epoch())
                                                    .count());
  if (std::memcmp(&f.cfg, fault_cfg_, sizeof f.cfg) != 0) {
    f.cfg = *fault_cfg_;
    // Its own stream (the datagram kind in the top byte): the library's decisions for the
    // same CDM, and their replays, stay as they were.
    f.inj.configure(f.cfg, (uint64_t{af::kDatagram} << 56) | (uint64_t{self_} << 24) | owner.inst_id(), now_ns);
  }
  // Only where a rule names datagrams: `any` does not, and a link window alone does not
  // either, so specs written before datagrams could fail replay as they did.
  if (!f.inj.selects(af::kDatagram)) return rc::kPostPending;
  switch (f.inj.decide(af::kDatagram, peer_node, now_ns).action) {
    case af::kError:
    case af::kCorrupt: return rc::kPostError;
    case af::kDrop:
    case af::kExhaust:
    case af::kLinkDown: return rc::kPostTimeout;
    default: return rc::kPostPending;  // dup: nothing visible; delay: matching takes no time to delay
  }
}

void DatagramMatcher::incoming(const ctl::DgramIncoming& m) {
  if (m.data_len > ctl::kDgramMaxSize) return;
  Incoming in;
  in.origin_node = m.origin_node;
  in.origin_key = m.origin_key;
  in.from_inst = m.from_inst;
  in.to_inst = m.to_inst;
  in.cred = Credential{m.ptag, m.cookie};
  in.len = m.data_len;
  std::memcpy(in.data, m.data, in.len);
  const uint64_t seq = next_seq_;
  add_incoming(in);
  if (Post* p = candidate_for(in)) match(*p, seq);
}

void DatagramMatcher::matched(const ctl::DgramMatched& m) {
  // The peer's post was announced here too (directed <-> directed): it is taken.
  if (auto o = incoming_by_origin_.find({m.peer_node, m.peer_key}); o != incoming_by_origin_.end())
    erase_incoming(o->second);
  auto it = posts_.find(m.origin_key);
  if (it == posts_.end() || it->second.state != rc::kPostPending) {
    // Cancelled meanwhile: the peer completed against a post that is gone.
    spdlog::debug("datagram {} matched after it was cancelled or consumed", m.origin_key);
    return;
  }
  // Only the daemon of the post's named peer completes it this way (wildcard posts are
  // matched here, never announced): another daemon — one on another host, say — cannot
  // complete a post by guessing its key.
  const Post& p = it->second;
  if (p.wildcard || p.peer_node != m.peer_node || p.peer_inst != m.peer_inst) {
    spdlog::warn("datagram {}: completion from node {} inst {} refused (post is for node {} inst {})", m.origin_key,
                 m.peer_node, m.peer_inst, p.peer_node, p.peer_inst);
    return;
  }
  finish(it->second, rc::kPostCompleted, m.peer_node, m.peer_inst, m.data, m.data_len);
  erase_post(m.origin_key);
}

void DatagramMatcher::retract(const ctl::DgramRetract& m) {
  if (m.origin_key == ctl::kDgramResetKey) {
    // The origin lost us: whatever of ours it held is gone there; it may still hold
    // announcements that arrived after, which the retractions of the posts failed here take.
    for (uint64_t key : reset_with(m.origin_node)) send_retract(m.origin_node, key);
    return;
  }
  if (auto o = incoming_by_origin_.find({m.origin_node, m.origin_key}); o != incoming_by_origin_.end())
    erase_incoming(o->second);
}

int DatagramMatcher::cancel(CdmRegion& owner, const ctl::DgramCancel& req) {
  Post* p = find(owner.attach_id(), req.ep, req.by_id != 0, req.id);
  if (!p || p->state != rc::kPostPending || p->lib_seq != req.lib_seq) return rc::kNoMatch;
  if (!p->wildcard) send_retract(p->peer_node, p->key);
  finish(*p, rc::kPostTerminated, 0, 0, nullptr, 0);
  erase_post(p->key);
  return rc::kSuccess;
}

void DatagramMatcher::cdm_gone(uint64_t attach_id) {
  faults_.erase(attach_id);
  std::vector<uint64_t> keys;
  for (const auto& [ae, key] : post_by_ep_)
    if (ae.first == attach_id) keys.push_back(key);
  for (uint64_t key : keys) {
    Post& p = posts_.at(key);
    if (!p.wildcard && p.state == rc::kPostPending) send_retract(p.peer_node, p.key);
    erase_post(key);
  }
  backlog_.erase(attach_id);
}

size_t DatagramMatcher::pending_posts() const {
  size_t n = 0;
  for (auto& [k, p] : posts_) n += p.state == rc::kPostPending;
  return n;
}

size_t DatagramMatcher::posts_of(uint64_t attach_id) const {
  auto it = posts_per_attach_.find(attach_id);
  return it == posts_per_attach_.end() ? 0 : it->second;
}

namespace {
// A message of type `M` exactly (copied out of the receive buffer before it is checked),
// about its sender: its field `about` names the node it came from.
template <typename M>
const char* take(uint32_t from, const uint8_t* msg, size_t len, uint32_t M::*about, M& out) {
  if (len != sizeof(M)) return "malformed datagram message";
  std::memcpy(&out, msg, sizeof(M));
  if (out.h.length != sizeof(M)) return "malformed datagram message";
  return out.*about == from ? nullptr : "datagram message about another node";
}
}  // namespace

const char* DatagramMatcher::receive(uint32_t from, const ctl::Header& h, const uint8_t* msg, size_t len) {
  const char* why = "not a datagram message";
  if (h.op == static_cast<uint16_t>(ctl::Op::kDgramIncoming)) {
    ctl::DgramIncoming m;
    if (!(why = take(from, msg, len, &ctl::DgramIncoming::origin_node, m))) incoming(m);
  } else if (h.op == static_cast<uint16_t>(ctl::Op::kDgramMatched)) {
    ctl::DgramMatched m;
    if (!(why = take(from, msg, len, &ctl::DgramMatched::peer_node, m))) matched(m);
  } else if (h.op == static_cast<uint16_t>(ctl::Op::kDgramRetract)) {
    ctl::DgramRetract m;
    if (!(why = take(from, msg, len, &ctl::DgramRetract::origin_node, m))) retract(m);
  }
  return why;
}

}  // namespace nicemu::daemon
