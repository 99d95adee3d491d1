#include "nicemu/daemon/datagram_matcher.h"

#include <cstring>
#include <tuple>

#include <spdlog/spdlog.h>

#include "nicemu/abi/gni_values.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;

DatagramMatcher::DatagramMatcher(uint32_t self_node, SendFn send, FindByAttach by_attach, FindByInst by_inst)
    : self_(self_node), send_(std::move(send)), by_attach_(std::move(by_attach)), by_inst_(std::move(by_inst)) {}

void DatagramMatcher::notify(uint64_t attach) {
  if (CdmRegion* r = by_attach_(attach)) r->notify_datagram();
}

void DatagramMatcher::deliver(uint32_t node, const void* msg, size_t len) {
  if (node == self_) {
    const auto* h = static_cast<const ctl::Header*>(msg);
    switch (static_cast<ctl::Op>(h->op)) {
      case ctl::Op::kDgramIncoming:
        return incoming(*static_cast<const ctl::DgramIncoming*>(msg));
      case ctl::Op::kDgramMatched:
        return matched(*static_cast<const ctl::DgramMatched*>(msg));
      case ctl::Op::kDgramRetract:
        return retract(*static_cast<const ctl::DgramRetract*>(msg));
      default:
        return;
    }
  }
  if (!send_(node, msg, len)) spdlog::warn("datagram message for node {} could not be delivered", node);
}

DatagramMatcher::Post* DatagramMatcher::find(uint64_t attach, uint64_t ep, bool by_id, uint64_t id) {
  for (auto& [k, p] : posts_)
    if (p.attach == attach && p.ep == ep && (!by_id || (p.has_id && p.id == id))) return &p;
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

void DatagramMatcher::complete(Post& p, uint32_t node, uint32_t inst, const uint8_t* data, uint16_t len) {
  p.state = rc::kPostCompleted;
  p.got_node = node;
  p.got_inst = inst;
  p.got_len = std::min<uint16_t>(len, ctl::kDgramMaxSize);
  std::memcpy(p.got, data, p.got_len);
  notify(p.attach);
}

void DatagramMatcher::match(Post& p, size_t idx) {
  Incoming in = incoming_[idx];
  incoming_.erase(incoming_.begin() + static_cast<long>(idx));
  complete(p, in.origin_node, in.from_inst, in.data, in.len);
  ctl::DgramMatched m{};
  m.h = ctl::make_header<ctl::DgramMatched>(ctl::Op::kDgramMatched, 0);
  m.origin_key = in.origin_key;
  m.peer_key = p.key;
  m.peer_node = self_;
  m.peer_inst = p.inst;
  m.data_len = p.len;
  std::memcpy(m.data, p.data, p.len);
  deliver(in.origin_node, &m, sizeof m);
}

int DatagramMatcher::post(CdmRegion& owner, const ctl::DgramPost& req) {
  if (req.data_len > ctl::kDgramMaxSize || req.buf_size > ctl::kDgramMaxSize) return rc::kSizeError;
  if (find(owner.attach_id(), req.ep, false, 0)) return rc::kErrorResource;  // one per EP
  Post p;
  p.key = next_key_++;
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
  Post& stored = posts_[p.key] = p;

  // Posts aimed at this CDM that arrived earlier, oldest first.
  for (size_t i = 0; i < incoming_.size(); ++i)
    if (acceptable(stored, incoming_[i])) {
      match(stored, i);
      break;
    }
  if (!stored.wildcard) {
    // Still pending: announce it to the target's daemon. (If it matched here, the
    // kDgramMatched just sent completes the peer's post there.)
    if (stored.state == rc::kPostPending) {
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
      deliver(stored.peer_node, &m, sizeof m);
    }
  }
  return rc::kSuccess;
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
  incoming_.push_back(in);
  for (auto& [k, p] : posts_)
    if (acceptable(p, incoming_.back())) {
      match(p, incoming_.size() - 1);
      return;
    }
}

void DatagramMatcher::matched(const ctl::DgramMatched& m) {
  // The peer's post was announced here too (directed <-> directed): it is taken.
  std::erase_if(incoming_, [&](const Incoming& in) { return in.origin_node == m.peer_node && in.origin_key == m.peer_key; });
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
  complete(it->second, m.peer_node, m.peer_inst, m.data, m.data_len);
}

void DatagramMatcher::retract(const ctl::DgramRetract& m) {
  std::erase_if(incoming_, [&](const Incoming& in) { return in.origin_node == m.origin_node && in.origin_key == m.origin_key; });
}

int DatagramMatcher::test(CdmRegion& owner, const ctl::DgramTest& req, ctl::DgramTestReply& rep) {
  Post* p = find(owner.attach_id(), req.ep, req.by_id != 0, req.id);
  if (!p) return rc::kNoMatch;
  rep.state = p->state;
  if (p->state == rc::kPostCompleted) {
    rep.peer_addr = p->got_node;
    rep.peer_inst = p->got_inst;
    rep.data_len = p->got_len;
    std::memcpy(rep.data, p->got, p->got_len);
  }
  if (p->state != rc::kPostPending) posts_.erase(p->key);  // consumed
  return rc::kSuccess;
}

int DatagramMatcher::probe(CdmRegion& owner, const ctl::DgramProbe& req, ctl::DgramProbeReply& rep) {
  for (auto& [k, p] : posts_) {
    if (p.attach != owner.attach_id() || p.state == rc::kPostPending) continue;
    if (req.by_id && !p.has_id) continue;
    rep.id = p.id;
    rep.peer_addr = p.got_node;
    rep.peer_inst = p.got_inst;
    return rc::kSuccess;
  }
  return rc::kNoMatch;
}

int DatagramMatcher::cancel(CdmRegion& owner, const ctl::DgramCancel& req) {
  Post* p = find(owner.attach_id(), req.ep, req.by_id != 0, req.id);
  if (!p || p->state != rc::kPostPending) return rc::kNoMatch;
  p->state = rc::kPostTerminated;
  if (!p->wildcard) {
    ctl::DgramRetract m{};
    m.h = ctl::make_header<ctl::DgramRetract>(ctl::Op::kDgramRetract, 0);
    m.origin_key = p->key;
    m.origin_node = self_;
    deliver(p->peer_node, &m, sizeof m);
  }
  notify(p->attach);
  return rc::kSuccess;
}

void DatagramMatcher::cdm_gone(uint64_t attach_id) {
  for (auto it = posts_.begin(); it != posts_.end();) {
    Post& p = it->second;
    if (p.attach != attach_id) {
      ++it;
      continue;
    }
    if (!p.wildcard && p.state == rc::kPostPending) {
      ctl::DgramRetract m{};
      m.h = ctl::make_header<ctl::DgramRetract>(ctl::Op::kDgramRetract, 0);
      m.origin_key = p.key;
      m.origin_node = self_;
      deliver(p.peer_node, &m, sizeof m);
    }
    it = posts_.erase(it);
  }
}

size_t DatagramMatcher::pending_posts() const {
  size_t n = 0;
  for (auto& [k, p] : posts_) n += p.state == rc::kPostPending;
  return n;
}

}  // namespace nicemu::daemon
