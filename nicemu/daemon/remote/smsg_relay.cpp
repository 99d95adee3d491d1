#include "nicemu/daemon/remote/smsg_relay.h"

#include <cstring>

#include <sodium.h>
#include <spdlog/spdlog.h>
#include <asio/post.hpp>
#include <nlohmann/json.hpp>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/relay_ring.h"
#include "nicemu/abi/smsg_channel.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;
using ctl::Op;
using Clock = std::chrono::steady_clock;

namespace {
constexpr std::chrono::microseconds kPollMin{100}, kPollMax{5000}, kPollFastFor{2000}, kQueueRetry{1000},
    kLiveness{50000}, kLivenessScan{10000};

// The sender has a quarter of its credits or less left: it may soon wait for our report.
bool credit_short(uint32_t unreported, uint32_t credits) { return unreported >= credits - credits / 4; }

template <typename T>
T message(Op op) {
  T m{};
  m.h = ctl::make_header<T>(op, 0);
  return m;
}

// Sizes a relay can carry, checked at both ends: the sender's daemon when its library opens
// the relay, the receiver's when the SmsgOpen arrives.
bool relayable(const ctl::MailboxAttrs& m) {
  return m.credits != 0 && m.credits <= 65535 && m.max_size != 0 && smsg_capacity(m.max_size) <= ctl::kSmsgRelayMaxSize;
}
}  // namespace

SmsgRelay::SmsgRelay(uint32_t self, StatsPage& stats, SmsgRelayEnv env)
    : self_(self),
      env_(std::move(env)),
      sent_(stats.node(counters::node::smsg_relay_sent)),
      delivered_(stats.node(counters::node::smsg_relay_delivered)),
      credit_updates_(stats.node(counters::node::smsg_relay_credit_updates)),
      failures_(stats.node(counters::node::smsg_relay_failures)),
      mbox_opens_(stats.node(counters::node::mbox_opens)),
      // Relay names start at random so the receivers' state of an earlier incarnation of
      // this daemon is not taken for ours (an SmsgOpen replaces it anyway).
      next_tx_(randombytes_random() | 1) {}

void SmsgRelay::start(asio::io_context& io) {
  io_ = &io;
  timer_.emplace(io);
  nap_timer_.emplace(io);
}

void SmsgRelay::stop() {
  if (timer_) timer_->cancel();
  if (nap_timer_) nap_timer_->cancel();
  nap_armed_ = false;
  ++timer_gen_;
  timer_at_ = Clock::time_point::max();
  io_ = nullptr;
}

SmsgRelayCtl* SmsgRelay::block(const Tx& t) const {
  CdmRegion* c = env_.cdm(t.attach_id);
  if (!c || !c->alive()) return nullptr;
  return reinterpret_cast<SmsgRelayCtl*>(c->heap_ptr(t.ctl_offset, sizeof(SmsgRelayCtl)));
}

// ---- sender's daemon ----

int SmsgRelay::open(CdmRegion& cdm, const ctl::SmsgRelayOpen& req, ctl::SmsgRelayOpenReply& rep) {
  if (!io_ || !env_.remote(req.peer_addr)) return rc::kInvalidState;  // not a node of another host
  if (!relayable(req.mbox)) return rc::kInvalidParam;
  auto same = [&](const ctl::SmsgRelayOpen& a) {
    return a.peer_addr == req.peer_addr && a.peer_inst == req.peer_inst && a.mbox == req.mbox;
  };
  // The same channel again (GNI_SmsgInit on a re-created EP): it resumes where it was.
  const TxPeerKey pk{cdm.attach_id(), req.peer_addr, req.peer_inst};
  for (auto [i, end] = tx_by_peer_.equal_range(pk); i != end; ++i) {
    const uint32_t id = i->second;
    const Tx& t = tx_.at(id);
    if (!t.failed && same(t.attrs)) {
      auto ring = ring_for(cdm);
      if (!ring) return rc::kErrorNomem;
      rep.ctl_offset = t.ctl_offset;
      rep.relay = id;
      rep.ring_offset = *ring;
      return rc::kSuccess;
    }
  }
  const size_t mine = tx_per_cdm_[cdm.attach_id()];
  if (mine >= kMaxRelaysPerCdm) {
    spdlog::warn("nic {}: SMSG relay for inst {} to node {} refused: the CDM has {} relays already", self_,
                 cdm.inst_id(), req.peer_addr, mine);
    return rc::kErrorResource;
  }
  auto ring = ring_for(cdm);
  if (!ring) return rc::kErrorNomem;
  auto off = cdm.heap_block(sizeof(SmsgRelayCtl));
  if (!off) return rc::kErrorNomem;
  auto* b = new (cdm.heap_ptr(*off, sizeof(SmsgRelayCtl))) SmsgRelayCtl{};
  b->magic = kRelayMagic;
  b->credits = req.mbox.credits;
  b->max_size = req.mbox.max_size;
  uint32_t id = next_tx_++;
  while (id == 0 || tx_.contains(id)) id = next_tx_++;
  Tx& t = tx_[id];
  t.id = id;
  t.attach_id = cdm.attach_id();
  t.inst = cdm.inst_id();
  t.cred = cdm.credential();
  t.attrs = req;
  t.ctl_offset = *off;
  tx_by_peer_.emplace(pk, id);
  ++tx_per_cdm_[cdm.attach_id()];
  rep.ctl_offset = *off;
  rep.relay = id;
  rep.ring_offset = *ring;
  spdlog::debug("nic {}: SMSG relay {} opened: inst {} -> node {} inst {} ({} credits, {} bytes)", self_, id,
                t.inst, req.peer_addr, req.peer_inst, req.mbox.credits, req.mbox.max_size);
  return rc::kSuccess;
}

std::optional<uint64_t> SmsgRelay::ring_for(CdmRegion& cdm) {
  if (auto it = rings_.find(cdm.attach_id()); it != rings_.end()) return it->second.offset;
  auto off = cdm.heap_block(kRelayRingBytes);
  if (!off) return std::nullopt;
  auto* r = new (cdm.heap_ptr(*off, kRelayRingBytes)) RelayRingCtl{};
  r->magic = kRelayRingMagic;
  r->capacity = kRelayRingCapacity;
  r->armed.store(1, std::memory_order_seq_cst);  // idle: the first message rings
  rings_[cdm.attach_id()].offset = *off;
  return *off;
}

size_t SmsgRelay::drain(CdmRegion& cdm, Ring& r) {
  auto* ctl = reinterpret_cast<RelayRingCtl*>(cdm.heap_ptr(r.offset, kRelayRingBytes));
  if (!ctl || r.broken) return 0;
  const char* data = relay_ring_data(ctl);
  const uint64_t tail = ctl->tail.load(std::memory_order_acquire);
  auto broken = [&](const char* why) {
    r.broken = true;
    ++ring_malformed_;
    spdlog::warn("nic {}: SMSG relay ring of inst {} (pid {}) is corrupt ({}); its relayed sends stop", self_,
                 cdm.inst_id(), cdm.pid(), why);
  };
  if (tail - r.head > kRelayRingCapacity) {
    broken("tail out of range");
    return 0;
  }
  if (ring_buf_.size() < ctl::kMaxMessage) ring_buf_.resize(ctl::kMaxMessage);
  const auto now = Clock::now();  // one clock read per drain: the ack deadline is seconds
  size_t n = 0;
  while (r.head != tail) {
    const uint64_t off = r.head % kRelayRingCapacity;
    uint32_t len;
    std::memcpy(&len, data + off, sizeof len);
    if (len == kRelayPad) {
      if (tail - r.head < kRelayRingCapacity - off) return broken("pad record past the tail"), n;
      r.head += kRelayRingCapacity - off;
      continue;
    }
    const uint64_t bytes = relay_record_bytes(len);
    if (len > ctl::kMaxMessage || 4 + uint64_t{len} > kRelayRingCapacity - off || bytes > tail - r.head)
      return broken("record length"), n;
    // Copied out first: the library could change the bytes while we check them.
    std::memcpy(ring_buf_.data(), data + off + 4, len);
    ctl::Header h;
    if (len >= sizeof(ctl::SmsgRelaySend)) {
      // Posted after RemotePosts still in the CDM's connection (docs/ordering.md: posted
      // transactions take effect in order): it waits in the ring, and so does everything
      // behind it, until control::remote_post has taken them (posts_taken).
      ctl::SmsgRelaySend s;
      std::memcpy(&s, ring_buf_.data(), sizeof s);
      if (static_cast<int32_t>(s.posts_before - cdm.remote_posts_taken()) > 0) {
        if (!r.held) ++held_rings_, ++held_;
        r.held = true;
        break;
      }
    }
    r.head += bytes;
    ++n;
    if (len < sizeof h) {
      ++ring_malformed_;
      continue;
    }
    std::memcpy(&h, ring_buf_.data(), sizeof h);
    if (h.op != static_cast<uint16_t>(Op::kSmsgRelaySend) || !send(cdm, ring_buf_.data(), len, now)) ++ring_malformed_;
  }
  ctl->head.store(r.head, std::memory_order_release);
  ring_messages_ += n;
  return n;
}

void SmsgRelay::resume_held(CdmRegion& cdm) {
  auto it = rings_.find(cdm.attach_id());
  if (it == rings_.end() || !it->second.held) return;
  Ring& r = it->second;
  r.held = false;
  --held_rings_;
  drain(cdm, r);
  if (!r.held) arm_ring(cdm, r);  // as after a doorbell: anything else is taken, or rings
}

void SmsgRelay::doorbell(CdmRegion& cdm) {
  auto it = rings_.find(cdm.attach_id());
  if (it == rings_.end()) return;
  Ring& r = it->second;
  ++doorbells_;
  drain(cdm, r);
  const auto now = Clock::now();
  const bool streaming = now - r.last_bell < kStreaming;
  r.last_bell = now;
  if (!streaming) return arm_ring(cdm, r);
  // Keep the doorbell disarmed a little: a sender streaming messages fills the ring
  // without system calls, and the next drain takes them as one batch.
  r.napping = true;
  schedule_nap();
}

// Nothing more to take: arm the doorbell, then look once more (a message published before
// the library could see `armed` is taken now, and the ring keeps napping).
void SmsgRelay::arm_ring(CdmRegion& cdm, Ring& r) {
  auto* ctl = reinterpret_cast<RelayRingCtl*>(cdm.heap_ptr(r.offset, kRelayRingBytes));
  if (!ctl || r.broken) return;
  if (r.held) {  // resume_held takes it on, not a timer: a ring held by a forged count costs nothing
    r.napping = false;
    return;
  }
  ctl->armed.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ctl->tail.load(std::memory_order_seq_cst) == r.head) {
    r.napping = false;
    return;
  }
  ctl->armed.store(0, std::memory_order_relaxed);
  drain(cdm, r);
  r.napping = true;
  schedule_nap();
}

void SmsgRelay::nap_tick() {
  bool again = false;
  for (auto it = rings_.begin(); it != rings_.end();) {
    Ring& r = it->second;
    CdmRegion* cdm = env_.cdm(it->first);
    if (!cdm) {
      if (r.held) --held_rings_;
      it = rings_.erase(it);
      continue;
    }
    if (r.napping && !r.broken && !r.held) {
      // More than one message since the last drain: still streaming, nap again. One or
      // none (a ping-pong faster than kStreaming looks like this): arm the doorbell.
      if (drain(*cdm, r) > 1)
        again = true;
      else
        arm_ring(*cdm, r);  // napping again only if a message slipped in
    }
    ++it;
  }
  if (again) schedule_nap();
}

void SmsgRelay::schedule_nap() {
  if (nap_armed_ || !nap_timer_) return;
  nap_armed_ = true;
  nap_timer_->expires_after(kNap);
  nap_timer_->async_wait([this](const asio::error_code& e) {
    nap_armed_ = false;
    if (!e && io_) nap_tick();
  });
}

bool SmsgRelay::send(CdmRegion& cdm, const char* msg, size_t len, Clock::time_point now) {
  ctl::SmsgRelaySend s;
  if (len < sizeof s) return false;
  std::memcpy(&s, msg, sizeof s);
  if (s.h.length != len || len - sizeof s != s.length) return false;
  auto it = tx_.find(s.relay);
  if (it == tx_.end() || it->second.attach_id != cdm.attach_id()) return false;
  Tx& t = it->second;
  if (s.length > smsg_capacity(t.attrs.mbox.max_size) || s.seq != t.next_seq) return false;
  if (t.next_seq - t.released >= t.attrs.mbox.credits) return false;  // the library checks credits first
  ++t.next_seq;
  if (t.failed) {  // the library had not seen it yet
    cdm.push_cqe(s.src_cq, cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, t.failed, cqe::kInfoGlobal, 0, s.msg_id));
    return true;
  }
  t.unacked.push_back(Pending{s.seq, s.msg_id, s.src_cq, now});
  note_in_flight(t);
  if (!t.opened) {
    auto o = message<ctl::SmsgOpen>(Op::kSmsgOpen);
    o.origin_node = self_;
    o.relay = t.id;
    o.from_inst = t.inst;
    o.to_inst = t.attrs.peer_inst;
    o.ptag = t.cred.ptag;
    o.cookie = t.cred.cookie;
    o.mbox = t.attrs.mbox;
    t.opened = true;
    to_peer(t.attrs.peer_addr, &o, sizeof o);
  }
  const uint32_t peer = t.attrs.peer_addr;
  buf_.resize(sizeof(ctl::SmsgData) + s.length);
  ctl::SmsgData d{};
  d.h = ctl::Header{ctl::kMagic, ctl::kVersion, static_cast<uint16_t>(Op::kSmsgData), 0,
                    static_cast<uint32_t>(buf_.size())};
  d.relay = t.id;
  d.seq = s.seq;
  d.remote_event = s.remote_event;
  d.length = s.length;
  d.tag = s.tag;
  std::memcpy(buf_.data(), &d, sizeof d);
  std::memcpy(buf_.data() + sizeof d, msg + sizeof s, s.length);
  ++sent_;
  // Releases of that node's relays to us ride in the same packet: in a ping-pong the reply
  // carries the credit of the message it answers, with no ack (and wake-up) of its own.
  // Queued before the message, so the acks' flush is on the loop ahead of the fabric's.
  ack_released_of(peer);
  to_peer(peer, buf_.data(), buf_.size(), cdm.attach_id());  // may fail `t` (peer down): do not touch it after
  arm(kLiveness);
  return true;
}

void SmsgRelay::to_peer(uint32_t node, const void* msg, size_t len, uint64_t attach_id) {
  auto& q = queued_[node];
  const bool held = behind_rma(attach_id, node);
  if (q.empty() && !held) {
    if (env_.send(node, msg, len)) return;
    if (!env_.peer_up(node)) return peer_down(node);
  }
  // The channel's backlog is full, or the CDM's earlier RMA pieces wait for room (the
  // requester's all-sent call drains it then): keep the order, try again shortly.
  const char* p = static_cast<const char*>(msg);
  q.push_back(Queued{attach_id, std::vector<char>(p, p + len)});
  if (held) ++held_;
  arm(kQueueRetry);
}

void SmsgRelay::drain_queue(uint32_t node) {
  auto it = queued_.find(node);
  if (it == queued_.end()) return;
  auto& q = it->second;
  while (!q.empty() && !behind_rma(q.front().attach_id, node) &&
         env_.send(node, q.front().bytes.data(), q.front().bytes.size()))
    q.pop_front();
  if (!q.empty() && !env_.peer_up(node)) return peer_down(node);
  if (q.empty()) queued_.erase(it);
}

void SmsgRelay::peer_lost(uint32_t node) {
  queued_.erase(node);
  for (auto& [id, t] : tx_)
    if (t.attrs.peer_addr == node && t.opened && !t.failed)
      fail(t, cqe::kErrPeerGone,
           "the fabric lost the channel to node " + std::to_string(node) +
               " (silent past the retry budget, or its daemon restarted)");
  // Its relays towards us are stale too: a restarted daemon opens new ones (SmsgOpen), and
  // data for a forgotten relay is refused, so its sender fails instead of waiting on acks.
  // What they delivered stays in the mailboxes for the receivers.
  for (auto it = rx_.lower_bound(RxKey{node, 0}); it != rx_.end() && it->first.first == node;) {
    unwatch(it->first);
    ack_due_.erase(it->first);
    it = rx_.erase(it);
  }
}

void SmsgRelay::progress() {
  if (queued_.empty()) return;
  std::vector<uint32_t> nodes;
  for (auto& [node, q] : queued_) nodes.push_back(node);
  for (uint32_t n : nodes) drain_queue(n);
}

void SmsgRelay::peer_down(uint32_t node) {
  queued_.erase(node);
  for (auto& [id, t] : tx_)
    if (t.attrs.peer_addr == node && !t.failed)
      fail(t, cqe::kErrPeerGone,
           "the fabric channel to node " + std::to_string(node) + " is down (silent past the retry budget)");
}

void SmsgRelay::fail(Tx& t, uint32_t status, const std::string& why) {
  if (t.failed) return;
  t.failed = status;
  ++failures_;
  CdmRegion* c = env_.cdm(t.attach_id);
  if (SmsgRelayCtl* b = block(t)) b->state.store(status, std::memory_order_release);
  size_t n = t.unacked.size();
  if (c)
    for (const Pending& p : t.unacked)
      c->push_cqe(p.src_cq, cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, status, cqe::kInfoGlobal, 0, p.msg_id));
  t.unacked.clear();
  note_in_flight(t);
  // A receiver that left after the end of a job is the usual end of a channel: quiet then.
  spdlog::log(n ? spdlog::level::warn : spdlog::level::info,
              "nic {}: SMSG from inst {} to node {} inst {} (relay {}) failed: {}; {} message(s) in flight "
              "completed with errors, later sends fail",
              self_, t.inst, t.attrs.peer_addr, t.attrs.peer_inst, t.id, why, n);
}

void SmsgRelay::on_ack(uint32_t from, const ctl::SmsgAck& a) {
  auto it = tx_.find(a.relay);
  if (it == tx_.end() || it->second.attrs.peer_addr != from) return;  // closed meanwhile
  Tx& t = it->second;
  if (t.failed) return;
  if (a.status) {
    const char* what = a.status == cqe::kErrPeerGone     ? "the receiver is gone"
                       : a.status == cqe::kErrProtection ? "the receiver's daemon refused the mailbox (handle, "
                                                           "bounds or credential)"
                                                         : "the receiver's daemon does not know the channel";
    return fail(t, a.status, std::string(what) + " (node " + std::to_string(from) + ")");
  }
  const uint32_t newly = a.delivered - t.delivered;
  if (newly > t.next_seq - t.delivered || a.released - t.released > a.delivered - t.released) {
    spdlog::warn("nic {}: SMSG ack from node {} for relay {} out of range (delivered {} released {}) ignored",
                 self_, from, a.relay, a.delivered, a.released);
    return;
  }
  while (!t.unacked.empty() && static_cast<int32_t>(a.delivered - t.unacked.front().seq) > 0) {
    const Pending& p = t.unacked.front();
    queue_cqe(tx_cqes_, t.attach_id, p.src_cq,
              cqe::make(cqe::kSrcLocalResponse, cqe::kTypeSmsg, cqe::kOk, cqe::kInfoGlobal, 0, p.msg_id));
    t.unacked.pop_front();
  }
  note_in_flight(t);
  flush_cqes(tx_cqes_);
  t.delivered = a.delivered;
  t.released = a.released;
  if (SmsgRelayCtl* b = block(t)) {
    b->delivered.store(a.delivered, std::memory_order_release);
    b->released.store(a.released, std::memory_order_seq_cst);
    // The library ran out of credits and waits on its receive CQ: the SMSG event the
    // hardware's credit message would raise (SmsgRelayCtl::credit_wanted).
    if (t.next_seq - a.released < t.attrs.mbox.credits && t.attrs.credit_cq != kNoCq &&
        b->credit_wanted.load(std::memory_order_seq_cst) != 0 &&
        b->credit_wanted.exchange(0, std::memory_order_relaxed) != 0) {
      queue_cqe(tx_cqes_, t.attach_id, t.attrs.credit_cq,
                cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, cqe::kOk, 0, 0, a.credit_event));
      flush_cqes(tx_cqes_);
    }
  }
}

// ---- receiver's daemon ----

void SmsgRelay::released(CdmRegion& cdm) {
  ++release_notes_;
  const uint64_t id = cdm.attach_id();
  for (auto it = watch_by_cdm_.lower_bound({id, RxKey{}}); it != watch_by_cdm_.end() && it->first == id; ++it)
    if (released_moved(it->second)) ack_soon(it->second);
}

const char* SmsgRelay::fabric_message(uint32_t from, const ctl::Header& h, const char* msg, size_t len) {
  // Any message from `from` is a chance to report releases to it without waiting for the
  // poll: its acks ride along with this turn's.
  ack_released_of(from);
  switch (static_cast<Op>(h.op)) {
    case Op::kSmsgOpen: {
      ctl::SmsgOpen o;
      if (len != sizeof o) return "bad SmsgOpen";
      std::memcpy(&o, msg, sizeof o);
      return on_open(from, o);
    }
    case Op::kSmsgData:
      return on_data(from, msg, len);
    case Op::kSmsgAck: {
      ctl::SmsgAck a;
      if (len != sizeof a) return "bad SmsgAck";
      std::memcpy(&a, msg, sizeof a);
      on_ack(from, a);
      return nullptr;
    }
    case Op::kSmsgClose: {
      ctl::SmsgClose c;
      if (len != sizeof c) return "bad SmsgClose";
      std::memcpy(&c, msg, sizeof c);
      RxKey k{from, c.relay};
      rx_.erase(k);
      unwatch(k);
      ack_due_.erase(k);
      return nullptr;
    }
    default:
      return "not an SMSG relay message";
  }
}

const char* SmsgRelay::on_open(uint32_t from, const ctl::SmsgOpen& o) {
  if (o.origin_node != from) return "SmsgOpen about another node";
  if (!relayable(o.mbox)) return "SmsgOpen with impossible sizes";
  RxKey k{from, o.relay};
  unwatch(k);
  ack_due_.erase(k);
  Rx& r = rx_[k];  // a new relay, or one of an earlier incarnation of `from`: start over
  r = Rx{};
  r.to_inst = o.to_inst;
  r.from_inst = o.from_inst;
  auto refuse = [&](uint32_t status, const char* why) -> const char* {
    r.status = status;
    spdlog::warn("nic {}: SMSG from node {} inst {} to inst {} (relay {}) refused: {}", self_, from, o.from_inst,
                 o.to_inst, o.relay, why);
    nack(from, o.relay, status);
    return nullptr;
  };
  // The receiver is the CDM whose registration the mailbox handle names, whatever id the
  // sender's EP was bound with.
  CdmRegion* t = env_.find_domain(Credential{o.ptag, o.cookie}, mdh::route_of(o.mbox.qword1, o.mbox.qword2));
  if (!t) return refuse(cqe::kErrPeerGone, "no CDM of the mailbox handle's memory domain in that domain here");
  ctl::MboxOpen req{};
  req.ptag = o.ptag;
  req.cookie = o.cookie;
  ctl::copy_mailbox_attrs(req, o.mbox);
  ctl::MboxOpenReply rep{};
  int code = t->mbox_open(req, rep, false);
  if (code == rc::kErrorResource)  // not open yet: creating one is subject to the limits
    code = env_.may_open_mailbox(*t) ? t->mbox_open(req, rep) : rc::kErrorResource;
  if (code != rc::kSuccess)
    return refuse(code == rc::kInvalidParam ? cqe::kErrProtection : cqe::kErrPeerGone,
                  code == rc::kInvalidParam ? "mailbox not inside a registration of the receiver, or sizes differ"
                                            : "no room for the mailbox (limit or heap)");
  auto* m = reinterpret_cast<MboxCtl*>(t->heap_ptr(rep.ctl_offset, rep.bytes));
  if (!m || rep.bytes != mbox_bytes(o.mbox.credits, o.mbox.max_size)) return refuse(cqe::kErrPeerGone, "mailbox not in the heap");
  ++mbox_opens_;
  r.attach_id = t->attach_id();
  r.mbox_offset = rep.ctl_offset;
  r.mbox_bytes = rep.bytes;
  r.credits = o.mbox.credits;
  r.slot_size = mbox_slot_size(o.mbox.max_size);
  r.max_size = o.mbox.max_size;
  r.dst_cq = rep.dst_cq;
  // The mailbox may have carried messages before (a channel re-initialised): ours follow.
  r.base = m->sent.load(std::memory_order_acquire);
  r.released_seen = m->released.load(std::memory_order_acquire);
  move_note(k, r, *m);
  return nullptr;
}

const char* SmsgRelay::on_data(uint32_t from, const char* msg, size_t len) {
  ctl::SmsgData d;
  if (len < sizeof d) return "SmsgData shorter than its header";
  std::memcpy(&d, msg, sizeof d);
  if (len - sizeof d != d.length) return "SmsgData length does not match";
  RxKey k{from, d.relay};
  auto it = rx_.find(k);
  if (it == rx_.end()) {  // never opened here (this daemon restarted, or closed)
    nack(from, d.relay, cqe::kErrPeerGone);
    return nullptr;
  }
  Rx& r = it->second;
  if (r.status) {
    nack(from, d.relay, r.status);
    return nullptr;
  }
  CdmRegion* c = env_.cdm(r.attach_id);
  char* mem = c && c->alive() ? c->heap_ptr(r.mbox_offset, r.mbox_bytes) : nullptr;
  if (!mem) {
    r.status = cqe::kErrPeerGone;
    nack(from, d.relay, r.status);
    return nullptr;
  }
  if (d.length > smsg_capacity(r.max_size)) return "SmsgData longer than the mailbox's messages";
  if (d.seq != r.next) {
    if (static_cast<int32_t>(d.seq - r.next) < 0) return nullptr;  // already delivered
    return "SmsgData out of sequence";
  }
  abi::MailboxView v;
  v.ctl = reinterpret_cast<MboxCtl*>(mem);
  v.slots = mem + sizeof(MboxCtl);
  v.credits = r.credits;
  v.slot_size = r.slot_size;
  v.max_size = r.max_size;
  const uint32_t at = r.base + d.seq;
  // Slot `at` must be free: the sender may not have more than `credits` unreleased. The
  // receiver's `released` is read again only when our copy says it may not be: the rank
  // keeps writing that line, a cross-core miss per message otherwise.
  if (at - r.released_seen >= r.credits) {
    r.released_seen = v.ctl->released.load(std::memory_order_acquire);
    if (at - r.released_seen >= r.credits) return "SmsgData beyond the credits";
  }
  if (!abi::smsg_seen(v, at, r.released_seen)) {
    abi::smsg_write_at(v, at, msg + sizeof d, d.length, nullptr, 0, d.tag);
    if (r.dst_cq != kNoCq)
      queue_cqe(rx_cqes_, r.attach_id, r.dst_cq, cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, cqe::kOk, 0, 0, d.remote_event));
    ++delivered_;
  }
  ++r.next;
  ack_soon(k);
  return nullptr;
}

bool SmsgRelay::released_moved(const RxKey& k) const {
  auto it = rx_.find(k);
  if (it == rx_.end()) return false;
  const Rx& r = it->second;
  CdmRegion* c = env_.cdm(r.attach_id);
  char* mem = c && c->alive() ? c->heap_ptr(r.mbox_offset, r.mbox_bytes) : nullptr;
  if (!mem) return true;  // the receiver is gone: send_ack says so
  return reinterpret_cast<MboxCtl*>(mem)->released.load(std::memory_order_acquire) - r.base != r.reported;
}

void SmsgRelay::nack(uint32_t node, uint32_t relay, uint32_t status) {
  auto a = message<ctl::SmsgAck>(Op::kSmsgAck);
  a.relay = relay;
  a.status = status;
  to_peer(node, &a, sizeof a);
}

void SmsgRelay::send_ack(const RxKey& k, Rx& r) {
  CdmRegion* c = env_.cdm(r.attach_id);
  char* mem = c && c->alive() ? c->heap_ptr(r.mbox_offset, r.mbox_bytes) : nullptr;
  if (!mem) {
    unwatch(k);
    if (!r.status) {
      r.status = cqe::kErrPeerGone;
      nack(k.first, k.second, r.status);
    }
    return;
  }
  auto* m = reinterpret_cast<MboxCtl*>(mem);
  uint32_t rel = m->released.load(std::memory_order_acquire) - r.base;
  if (rel - r.reported > r.next - r.reported) rel = r.reported;  // outside [reported, next]: not believed
  if (rel != r.reported) ++credit_updates_;
  r.reported = rel;
  move_note(k, r, *m);
  auto a = message<ctl::SmsgAck>(Op::kSmsgAck);
  a.relay = k.second;
  a.delivered = r.next;
  a.released = rel;
  a.credit_event = m->credit_event.load(std::memory_order_relaxed);
  to_peer(k.first, &a, sizeof a);
  if (r.reported == r.next) return unwatch(k);
  if (watch_.emplace(k, r.attach_id).second) watch_by_cdm_.emplace(r.attach_id, k);
  if (credit_short(r.next - r.reported, r.credits))
    short_.insert(k);
  else
    short_.erase(k);
}

void SmsgRelay::unwatch(const RxKey& k) {
  if (auto it = watch_.find(k); it != watch_.end()) {
    watch_by_cdm_.erase({it->second, k});
    watch_.erase(it);
  }
  short_.erase(k);
}

// The receiver tells us (a note) once it has released an eighth of a mailbox past what the sender
// was told: until then the sender has credits, and the acks of the messages it keeps sending
// carry the releases. If it already has, the next flush reports them. Store, then re-load,
// both seq_cst: the library does the same the other way round (smsg_note_due).
void SmsgRelay::move_note(const RxKey& k, const Rx& r, MboxCtl& m) {
  const uint32_t at = r.base + r.reported + std::max<uint32_t>(1, r.credits / 8);
  m.note_at.store(at, std::memory_order_seq_cst);
  if (static_cast<int32_t>(m.released.load(std::memory_order_seq_cst) - at) >= 0) ack_soon(k);
}

void SmsgRelay::ack_released_of(uint32_t node) {
  for (auto it = watch_.lower_bound(RxKey{node, 0}); it != watch_.end() && it->first.first == node; ++it)
    if (released_moved(it->first)) ack_soon(it->first);
}

void SmsgRelay::ack_soon(const RxKey& k) {
  ack_due_.insert(k);
  if (flush_posted_ || !io_) return;
  flush_posted_ = true;
  // After the rest of this receive batch: one ack per relay for all its messages.
  asio::post(*io_, [this] {
    flush_posted_ = false;
    if (io_) flush_acks();
  });
}

void SmsgRelay::queue_cqe(CqeBatch& b, uint64_t attach_id, uint32_t cq, uint64_t entry) {
  if (!b.entries.empty() && (b.attach_id != attach_id || b.cq != cq)) flush_cqes(b);  // keeps each CQ's order
  b.attach_id = attach_id;
  b.cq = cq;
  b.entries.push_back(entry);
}

void SmsgRelay::flush_cqes(CqeBatch& b) {
  if (b.entries.empty()) return;
  if (CdmRegion* c = env_.cdm(b.attach_id)) c->push_cqes(b.cq, b.entries.data(), b.entries.size());
  b.entries.clear();
}

void SmsgRelay::flush_acks() {
  flush_cqes(rx_cqes_);  // the receiver's events before the sender's completions
  for (const RxKey& k : ack_due_)
    if (auto it = rx_.find(k); it != rx_.end() && !it->second.status) send_ack(k, it->second);
  ack_due_.clear();
  if (!short_.empty()) {
    poll_ = kPollMin;
    last_move_ = Clock::now();
    arm(poll_);
  }
}

void SmsgRelay::cdm_gone(uint64_t attach_id) {
  if (auto it = rings_.find(attach_id); it != rings_.end()) {
    // What the library put in the ring before it went is sent, as over a socket.
    // (Its posts were all taken before the connection closed: a message still held named
    // posts never sent, and goes no further.)
    if (CdmRegion* c = env_.cdm(attach_id)) drain(*c, it->second);
    if (it->second.held) --held_rings_;
    rings_.erase(it);
  }
  flush_acks();  // what was delivered is acknowledged before any failure
  for (auto it = tx_.begin(); it != tx_.end();) {
    if (it->second.attach_id != attach_id) {
      ++it;
      continue;
    }
    if (it->second.opened && !it->second.failed) {
      auto c = message<ctl::SmsgClose>(Op::kSmsgClose);
      c.relay = it->first;
      to_peer(it->second.attrs.peer_addr, &c, sizeof c);
    }
    in_flight_tx_.erase(it->first);
    it = tx_.erase(it);
  }
  // Its relays out of the indexes (after the loop: to_peer may fail relays of this CDM).
  tx_per_cdm_.erase(attach_id);
  for (auto it = tx_by_peer_.lower_bound(TxPeerKey{attach_id, 0, 0});
       it != tx_by_peer_.end() && std::get<0>(it->first) == attach_id;)
    it = tx_by_peer_.erase(it);
  for (auto it = rx_.begin(); it != rx_.end();) {
    if (it->second.attach_id != attach_id || it->second.status) {
      ++it;
      continue;
    }
    // The receiver is gone: its senders learn now, not at their next message.
    nack(it->first.first, it->first.second, cqe::kErrPeerGone);
    unwatch(it->first);
    ack_due_.erase(it->first);
    it = rx_.erase(it);
  }
}

// ---- timer: queued messages, releases to report, liveness of peers with messages in flight ----

void SmsgRelay::arm(std::chrono::microseconds in) {
  if (!timer_ || !io_) return;
  const auto at = Clock::now() + in;
  if (at >= timer_at_) return;  // armed sooner already
  timer_at_ = at;
  const uint64_t gen = ++timer_gen_;
  timer_->expires_at(at);
  timer_->async_wait([this, gen](const asio::error_code& e) {
    if (e || gen != timer_gen_) return;
    timer_at_ = Clock::time_point::max();
    tick();
  });
}

void SmsgRelay::tick() {
  if (!io_) return;
  progress();
  const auto now = Clock::now();
  // Receivers' releases since the last report, for the relays whose sender is short of
  // credits: an ack for each that moved. The other watched relays are not polled
  // (smsg_relay.h): their senders have credits to spare.
  std::vector<RxKey> keys(short_.begin(), short_.end());  // send_ack changes the sets
  bool moved = false;
  for (const RxKey& k : keys) {
    auto it = rx_.find(k);
    if (it == rx_.end()) {
      unwatch(k);
      continue;
    }
    if (!released_moved(k)) continue;
    moved = true;
    send_ack(k, it->second);
  }
  if (now - last_liveness_ >= kLivenessScan) in_flight_ = check_liveness(now);
  if (!queued_.empty()) arm(kQueueRetry);
  if (moved) last_move_ = now;
  if (!short_.empty()) {
    // Fast while releases keep coming (a receiver taking its messages is usually a sender
    // waiting for credits), backing off once nothing moved for a while.
    poll_ = now - last_move_ < kPollFastFor ? kPollMin : std::min(poll_ * 2, kPollMax);
    arm(poll_);
  }
  if (in_flight_) arm(kLiveness);
}

// Senders: a silent peer (channel down) or an ack overdue fails the relay.
bool SmsgRelay::check_liveness(Clock::time_point now) {
  last_liveness_ = now;
  bool in_flight = false;
  const auto deadline = env_.fabric_overloaded && env_.fabric_overloaded() ? kAckDeadlineOverloaded : kAckDeadline;
  // In id order, as a walk over tx_ would; fail() takes a relay out of the set, so the next
  // one is found before.
  for (auto i = in_flight_tx_.begin(); i != in_flight_tx_.end();) {
    Tx& t = tx_.at(*i++);
    if (t.failed || t.unacked.empty()) continue;
    if (!env_.peer_up(t.attrs.peer_addr)) {
      fail(t, cqe::kErrPeerGone,
           "the fabric channel to node " + std::to_string(t.attrs.peer_addr) + " is down (silent past the retry budget)");
      continue;
    }
    if (now - t.unacked.front().at > deadline) {
      fail(t, cqe::kErrPeerGone, "no acknowledgement for " + std::to_string(deadline.count()) +
                                     " ms (the peer's daemon restarted or lost the channel)");
      continue;
    }
    in_flight = true;
  }
  return in_flight;
}

nlohmann::json SmsgRelay::status() const {
  size_t in_flight = 0, failed = 0, queued = 0;
  for (const auto& [id, t] : tx_) {
    in_flight += t.unacked.size();
    failed += t.failed != 0;
  }
  for (const auto& [n, q] : queued_) queued += q.size();
  return nlohmann::json{{"tx_relays", tx_.size()},       {"tx_failed", failed},
                        {"tx_in_flight", in_flight},     {"tx_queued", queued},
                        {"rx_relays", rx_.size()},       {"rx_watched", watch_.size()}, {"rx_credit_short", short_.size()},
                        {"sent", sent_.value()},         {"delivered", delivered_.value()},
                        {"credit_updates", credit_updates_.value()}, {"failures", failures_.value()},
                        {"rings", rings_.size()},        {"ring_messages", ring_messages_},
                        {"doorbells", doorbells_}, {"held_behind_posts", held_},       {"ring_malformed", ring_malformed_},
                        {"release_notes", release_notes_}};
}

}  // namespace nicemu::daemon
