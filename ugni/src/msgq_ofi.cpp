// MSGQ over the ofi fabric (msgq_ofi.h says what and why; frames: nicemu/abi/ofi_msgq.h).
#include "msgq_ofi.h"

#include <time.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/ofi_msgq.h"
#include "nicemu/fault/fault_page.h"
#include "ofi_peer_check.h"
#include "ofi_port.h"

namespace nicemu::ugni {

namespace cqe = nicemu::abi::cqe;
namespace mf = nicemu::abi::ofimsgq;

namespace {

constexpr uint64_t kReplyTimeoutNs = 5'000'000'000ull;
constexpr size_t kMaxRx = 4096;    // senders' streams a member keeps
constexpr size_t kMaxHeld = 65536;  // frames held per stream for an earlier one (msgq::kMaxQueueSlots)
constexpr uint32_t kNoInst = UINT32_MAX;
// How long a send waits for a new member's answer to the sync Ask before it takes a credit.
constexpr uint64_t kSyncWaitNs = 1'000'000'000ull;

uint64_t now_ns() { return nicemu::fault::monotonic_ns(); }

// A frame in flight: the provider reads it until `done`.
struct Frame {
  OfiSendCtx c;  // first
  uint16_t type = 0;
  uint32_t pe = 0;      // a Send or Ask: the target node; a Reply: the origin node
  uint64_t chan = 0;
  uint32_t seq = 0;
  uint32_t freed = 0;   // a Reply: the credits it carries
  uint32_t len = 0;
  alignas(8) unsigned char bytes[mf::kMaxFrame];
};
static_assert(offsetof(Frame, c) == 0);

}  // namespace

struct MsgqOfi {
  std::mutex mu;
  uint64_t salt = 0;
  uint64_t streams = 0;
  // Sender side: one stream per target node.
  struct Pending {
    uint32_t seq, msg_id, dst;
    uint64_t ticket;  // its credit: TxCredit.sent once taken
    Cq* cq;
    bool sent, done;  // the frame completed at the provider; the reply (or error) is in
    uint64_t st, since;
  };
  struct Tx {
    uint64_t dest = 0, chan = 0;
    uint32_t next = 0;
    uint32_t member_inst = kNoInst;  // as its replies say
    abi::msgq::TxCredit* cr = nullptr;
    bool asking = false;  // an Ask is out, not answered yet
    uint64_t unanswered_since = 0;  // the first Ask since the last answer: a silent member is judged
    bool judging = false;  // suspect: our daemon is asked whether the member lives
    bool syncing = false;  // the sync Ask is out (the member took over from a dead one)
    uint64_t ask_at = 0;
    std::deque<Pending> pending;
  };
  std::map<uint32_t, Tx> tx;
  std::atomic<bool> any_pending{false};
  // Nodes whose member died and another took over: the next stream starts with a sync Ask.
  std::set<uint32_t> resync;
  std::atomic<bool> any_resync{false};
  // The verdicts on suspect streams (its own worker: the thread driving the port never waits
  // for a daemon). Made with the state, stopped before the port closes.
  std::unique_ptr<PeerCheck> check;
  // Member side: per sender stream, its next sequence number and frames that came early.
  struct Rx {
    uint64_t dest = 0;
    uint32_t origin = 0;
    uint32_t expected = 0;
    std::map<uint32_t, std::vector<uint8_t>> held;
  };
  std::map<std::pair<std::string, uint64_t>, Rx> rx;
  // Per origin node: positions of stored messages not yet freed, and freed not yet reported.
  struct Out {
    uint32_t ring = 0, gen = 0;
    std::deque<uint64_t> pos;
    uint64_t unreported = 0;
  };
  std::map<uint32_t, Out> out;
  // Replies the provider did not take at once (a connection back to a new sender still being
  // made): sent again on the next message and every turn of the port, in order.
  struct Later {
    uint64_t dest;
    Frame* f;
  };
  std::deque<Later> later;
  std::atomic<bool> any_later{false};
};

namespace {

void judge(Nic* n, const PeerAnswer& a, std::vector<void*>& items);

MsgqOfi* state_of(Nic* n) {
  MsgqOfi* s = n->msgq_ofi.load(std::memory_order_acquire);
  if (s) return s;
  auto* fresh = new MsgqOfi;
  fresh->salt = ofi_mix(now_ns() ^ reinterpret_cast<uintptr_t>(n));
  // 20 ms, as for posts: the daemon of a member that died has seen it (its pidfd) by then.
  fresh->check = std::make_unique<PeerCheck>(
      [n](uint64_t peer) {
        PeerAnswer a;
        const int r = ofi_ask_route(n, static_cast<uint32_t>(peer >> 32), static_cast<uint32_t>(peer), a.addr);
        a.state = r > 0 ? PeerAnswer::kLives : r == 0 ? PeerAnswer::kGone : PeerAnswer::kUnknown;
        return a;
      },
      [n](uint64_t, const PeerAnswer& a, std::vector<void*>& items) { judge(n, a, items); },
      std::chrono::milliseconds(20));
  if (n->msgq_ofi.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;
  return s;
}

void add_credits(abi::msgq::TxCredit* cr, uint64_t n) {
  if (!cr || !n) return;
  // Never past `sent` (as the daemon's give_back): a confused member gives no credit for
  // messages not sent. A CAS: other senders of the node add too.
  uint64_t r = cr->returned.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t sent = cr->sent.load(std::memory_order_acquire);
    const uint64_t v = std::min(r + n, std::max(sent, r));
    if (v == r || cr->returned.compare_exchange_weak(r, v, std::memory_order_acq_rel)) return;
  }
}

// Under s->mu: local completions at the front of the stream, in send order.
void complete_front(MsgqOfi::Tx& t) {
  while (!t.pending.empty() && t.pending.front().done) {
    const auto& p = t.pending.front();
    if (p.cq)
      p.cq->ring.push(p.st == cqe::kOk
                          ? cqe::make(cqe::kSrcLocalResponse, cqe::kTypeMsgq, cqe::kOk, cqe::kInfoGlobal, 0, p.msg_id)
                          : cqe::make(cqe::kSrcLocalRequest, cqe::kTypeMsgq, p.st, cqe::kInfoGlobal, 0, p.msg_id));
    t.pending.pop_front();
  }
}

// Takes `k` credits back (a new member took over slots whose credits came back).
void take_credits(abi::msgq::TxCredit* cr, uint64_t k) {
  if (!cr || !k) return;
  uint64_t r = cr->returned.load(std::memory_order_acquire);
  while (!cr->returned.compare_exchange_weak(r, r - std::min(r, k), std::memory_order_acq_rel)) {
  }
}

// Under s->mu: the credits of stream `t`'s node after its member `was` died. What the dead
// member stored and nobody will report, and the frames it never got, are unknown here: the
// first sender of our node to judge that member gives every credit back (as the relay does
// for a lost peer), once (TxCredit.lost); a later one only those of its own messages sent
// since (the first could not count them). The new member's sync Ask takes back the slots
// still unread.
void give_back(MsgqOfi::Tx& t, const std::string& was) {
  abi::msgq::TxCredit* cr = t.cr;
  if (!cr) return;
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the address: the member, across our processes
  for (unsigned char c : was) h = (h ^ c) * 0x100000001B3ull;
  const uint64_t id = ((h >> 32) | 1) << 32;
  uint64_t cur = cr->lost.load(std::memory_order_acquire);
  while ((cur & ~0xFFFFFFFFull) != id) {
    const uint64_t sent = cr->sent.load(std::memory_order_acquire);
    if (cr->lost.compare_exchange_weak(cur, id | static_cast<uint32_t>(sent), std::memory_order_acq_rel)) {
      uint64_t r = cr->returned.load(std::memory_order_acquire);
      while (r < sent && !cr->returned.compare_exchange_weak(r, sent, std::memory_order_acq_rel)) {
      }
      return;
    }
  }
  const uint32_t since = static_cast<uint32_t>(cur);
  uint64_t mine = 0;
  for (const auto& p : t.pending)
    if (!p.done && static_cast<int32_t>(static_cast<uint32_t>(p.ticket) - since) > 0) ++mine;
  add_credits(cr, mine);
}

// How a stream ends (drop_stream): its member lives (slow: it keeps reporting its slots), died,
// or nobody could say.
enum class Member : uint8_t { kLives, kDied, kUnknown };

// Under s->mu: the stream to node `pe` ends. Every message still waiting completes with an
// error (it may have been stored: an error, never silence): PEER_GONE for the dead member's
// own instance (the relay's answer for a dead destination), TRANSIENT for the rest. The
// next send asks for a member afresh.
void drop_stream(Nic* n, MsgqOfi* s, uint32_t pe, Member m) {
  auto it = s->tx.find(pe);
  if (it == s->tx.end()) return;
  MsgqOfi::Tx& t = it->second;
  if (m != Member::kLives) give_back(t, ofi_peer_name(n, t.dest));  // before: it counts the waiting
  for (auto& p : t.pending)
    if (!p.done) {
      p.done = true;
      p.st = m == Member::kDied && p.dst == t.member_inst ? cqe::kErrPeerGone : cqe::kErrTransient;
      count(n->counters, ctr::cdm::ofi_errors);
    }
  complete_front(t);
  s->tx.erase(it);
  ofi_forget_peer(n, pe, mf::kMsgqRoute);
}

// Under s->mu: stream `t` to node `pe` failed (a frame the provider failed, a reply overdue):
// our daemon is asked about its member (judge), once.
struct Suspect {
  uint32_t pe;
  uint64_t chan;
};
void suspect(MsgqOfi* s, uint32_t pe, MsgqOfi::Tx& t) {
  if (t.judging) return;
  t.judging = true;
  s->check->suspect((uint64_t{pe} << 32) | mf::kMsgqRoute, new Suspect{pe, t.chan});
}

// The verdict (the check's worker): the member named now is the stream's: it lives; another
// or none: it died; no answer: unknown.
void judge(Nic* n, const PeerAnswer& a, std::vector<void*>& items) {
  MsgqOfi* s = n->msgq_ofi.load(std::memory_order_acquire);
  for (void* v : items) {
    std::unique_ptr<Suspect> x(static_cast<Suspect*>(v));
    if (a.state == PeerAnswer::kDropped || !s) continue;  // closing (maybe under s->mu): nothing
    std::lock_guard<std::mutex> lk(s->mu);
    auto it = s->tx.find(x->pe);
    if (it == s->tx.end() || it->second.chan != x->chan) continue;  // dropped meanwhile
    const std::string was = ofi_peer_name(n, it->second.dest);
    Member m = Member::kUnknown;
    if (a.state == PeerAnswer::kLives) m = !was.empty() && a.addr == was ? Member::kLives : Member::kDied;
    if (a.state == PeerAnswer::kGone) m = Member::kDied;
    drop_stream(n, s, x->pe, m);
    if (m == Member::kDied && a.state == PeerAnswer::kLives) {
      s->resync.insert(x->pe);
      s->any_resync.store(true, std::memory_order_relaxed);
    }
  }
}

void frame_done(Nic* n, OfiSendCtx* c, uint64_t st) {
  auto* f = reinterpret_cast<Frame*>(c);
  MsgqOfi* s = state_of(n);
  std::lock_guard<std::mutex> lk(s->mu);
  if (f->type == mf::kReply) {
    // A reply lost with its credits: reported again with the next one.
    if (st != cqe::kOk) s->out[f->pe].unreported += f->freed;
  } else if (auto it = s->tx.find(f->pe); it != s->tx.end() && it->second.chan == f->chan) {
    MsgqOfi::Tx& t = it->second;
    if (f->type == mf::kAsk && st != cqe::kOk) t.asking = false;  // else its answer clears it
    if (st != cqe::kOk) {
      suspect(s, f->pe, t);  // refused or reset: the member may be gone
    } else if (f->type == mf::kSend) {
      for (auto& p : t.pending)
        if (p.seq == f->seq) {
          p.sent = true;
          p.since = now_ns();  // the reply is due from now
          break;
        }
    }
  }
  delete f;
}

uint64_t send_frame(Nic* n, uint64_t dest, Frame* f, bool patient) {
  f->c.done = frame_done;
  uint64_t st = ofi_send(n, dest, f->bytes, f->len, &f->c, patient);
  if (st != cqe::kOk) delete f;
  return st;
}

// A reply from the driving thread: one non-blocking try (it must not wait on itself). False:
// the provider had no room now; the frame is kept for another try.
bool try_frame(Nic* n, uint64_t dest, Frame* f) {
  f->c.done = frame_done;
  const uint64_t st = ofi_send(n, dest, f->bytes, f->len, &f->c, false);
  if (st == cqe::kOk) return true;
  if (st == cqe::kErrTransient) return false;  // the queue is full: again later
  delete f;  // refused for good (the sender is gone): its credits go with the next reply
  return true;
}

Frame* make_send(Nic* n, mf::Type type, uint32_t pe, const MsgqOfi::Tx& t, uint32_t seq, uint32_t inst,
                 const void* hdr, uint32_t hdr_len, const void* msg, uint32_t msg_len, uint8_t tag) {
  auto* f = new Frame;
  f->type = type;
  f->pe = pe;
  f->chan = t.chan;
  f->seq = seq;
  f->len = static_cast<uint32_t>(sizeof(mf::Send) + hdr_len + msg_len);
  mf::Send m{};
  m.h = mf::header(type, t.chan, seq, f->len);
  m.ptag = static_cast<uint8_t>(n->cdm->ptag);
  m.tag = tag;
  m.hdr_len = static_cast<uint8_t>(hdr_len);
  m.msg_len = static_cast<uint8_t>(msg_len);
  m.cookie = n->cdm->cookie;
  m.origin_pe = n->nic_addr;
  m.src_inst = n->cdm->inst_id;
  m.dst_inst = inst;
  m.reply_len = ofi_self_name(n, m.reply_addr);
  std::memcpy(f->bytes, &m, sizeof m);
  if (hdr_len) std::memcpy(f->bytes + sizeof m, hdr, hdr_len);
  if (msg_len) std::memcpy(f->bytes + sizeof m + hdr_len, msg, msg_len);
  return f;
}

// ---- the member's side (the thread driving the port) ----

// Under s->mu: the slots of `origin`'s messages the ring's head has passed, to report.
uint32_t take_freed(Nic* n, MsgqOfi* s, uint32_t origin) {
  auto it = s->out.find(origin);
  if (it == s->out.end()) return 0;
  MsgqOfi::Out& o = it->second;
  if (!o.pos.empty()) {
    auto head = msgq_ring_head(n, o.ring, o.gen);
    if (!head) {  // the ring or the queue is gone: every slot it held is free
      o.unreported += o.pos.size();
      o.pos.clear();
    } else {
      while (!o.pos.empty() && o.pos.front() < *head) {
        o.pos.pop_front();
        ++o.unreported;
      }
    }
  }
  const uint32_t freed = static_cast<uint32_t>(std::min<uint64_t>(o.unreported, UINT32_MAX));
  o.unreported -= freed;
  if (o.pos.empty() && o.unreported == 0) s->out.erase(it);
  return freed;
}

void reply(Nic* n, MsgqOfi* s, uint64_t dest, uint32_t origin, uint64_t chan, uint32_t seq, uint64_t st,
           bool ask = false, uint32_t adopted = 0) {
  auto* f = new Frame;
  f->type = mf::kReply;
  f->pe = origin;
  f->freed = take_freed(n, s, origin);
  f->len = sizeof(mf::Reply);
  mf::Reply r{};
  r.h = mf::header(mf::kReply, chan, seq, sizeof r);
  r.status = st;
  r.freed = f->freed;
  r.ask = ask ? 1 : 0;
  r.member_inst = n->cdm->inst_id;
  r.adopted = adopted;
  std::memcpy(f->bytes, &r, sizeof r);
  // Behind replies still waiting, in order; not taken now: again later.
  if (!s->later.empty() || !try_frame(n, dest, f)) {
    s->later.push_back({dest, f});
    s->any_later.store(true, std::memory_order_relaxed);
  }
}

// Under s->mu: replies that waited, in order, while the provider takes them.
void flush_later(Nic* n, MsgqOfi* s) {
  while (!s->later.empty() && try_frame(n, s->later.front().dest, s->later.front().f)) s->later.pop_front();
  if (s->later.empty()) s->any_later.store(false, std::memory_order_relaxed);
}

// Under s->mu: a sync Ask of node `origin`'s (its member died, we took over): the slots of
// its ring still unread that we do not track (the dead member stored them) are ours to
// report from now on; how many.
uint32_t adopt(Nic* n, MsgqOfi* s, uint32_t origin) {
  auto sp = msgq_ring_span(n, origin);
  if (!sp) return 0;
  MsgqOfi::Out& o = s->out[origin];
  if (!o.pos.empty() && (o.ring != sp->ring || o.gen != sp->gen)) {  // the old ring is gone
    o.unreported += o.pos.size();
    o.pos.clear();
  }
  o.ring = sp->ring;
  o.gen = sp->gen;
  std::deque<uint64_t> all;
  auto mine = o.pos.begin();
  for (; mine != o.pos.end() && *mine < sp->head; ++mine) all.push_back(*mine);  // freed: take_freed reports them
  uint32_t adopted = 0;
  for (uint64_t p = sp->head; p < sp->tail; ++p) {
    while (mine != o.pos.end() && *mine < p) ++mine;
    if (mine == o.pos.end() || *mine != p) ++adopted;
    all.push_back(p);
  }
  o.pos.swap(all);
  return adopted;
}

// Under s->mu: stores one message of stream `x` and answers it.
void store(Nic* n, MsgqOfi* s, MsgqOfi::Rx& x, const mf::Send& m, const uint8_t* payload) {
  MsgqRingPos at;
  const uint64_t st =
      msgq_store_remote(n, m.origin_pe, m.src_inst, m.dst_inst, m.tag, payload, m.hdr_len, m.msg_len, at);
  MsgqOfi::Out& o = s->out[m.origin_pe];
  if (st == cqe::kOk) {
    if (!o.pos.empty() && (o.ring != at.ring || o.gen != at.gen)) {  // the old ring is gone
      o.unreported += o.pos.size();
      o.pos.clear();
    }
    o.ring = at.ring;
    o.gen = at.gen;
    o.pos.push_back(at.pos);
    count(n->counters, ctr::cdm::ofi_served);
  } else {
    ++o.unreported;  // never took a slot: its credit comes back at once
  }
  reply(n, s, x.dest, m.origin_pe, m.h.chan, m.h.seq, st);
}

void on_send(Nic* n, MsgqOfi* s, const mf::Send& m, const uint8_t* buf, size_t len, bool ask) {
  if (m.ptag != n->cdm->ptag || m.cookie != n->cdm->cookie || m.origin_pe == n->nic_addr) {
    count(n->counters, ctr::cdm::ofi_dropped);  // another job's (the daemons would not have named us), or forged
    return;
  }
  const std::pair<std::string, uint64_t> key(std::string(reinterpret_cast<const char*>(m.reply_addr), m.reply_len),
                                             m.h.chan);
  std::lock_guard<std::mutex> lk(s->mu);
  if (s->any_later.load(std::memory_order_relaxed)) flush_later(n, s);
  auto it = s->rx.find(key);
  if (it == s->rx.end()) {
    uint64_t dest = 0;
    if (s->rx.size() >= kMaxRx || !ofi_insert(n, m.reply_addr, m.reply_len, dest)) {
      count(n->counters, ctr::cdm::ofi_dropped);  // no way back: the sender times out
      return;
    }
    it = s->rx.emplace(key, MsgqOfi::Rx{dest, m.origin_pe, 0, {}}).first;
  }
  MsgqOfi::Rx& x = it->second;
  if (x.origin != m.origin_pe) {
    count(n->counters, ctr::cdm::ofi_dropped);  // a stream speaks for one node
    return;
  }
  if (ask) {
    const uint32_t adopted = m.tag == mf::kSyncAsk ? adopt(n, s, x.origin) : 0;
    return reply(n, s, x.dest, x.origin, m.h.chan, 0, cqe::kOk, true, adopted);
  }
  // In order per stream, however the provider delivers: early frames wait for the gap.
  if (static_cast<int32_t>(m.h.seq - x.expected) < 0) {
    count(n->counters, ctr::cdm::ofi_dropped);  // a duplicate
    return;
  }
  if (m.h.seq != x.expected) {
    if (x.held.size() >= kMaxHeld) {
      count(n->counters, ctr::cdm::ofi_dropped);
      return;
    }
    x.held.emplace(m.h.seq, std::vector<uint8_t>(buf, buf + len));
    return;
  }
  store(n, s, x, m, buf + sizeof m);
  ++x.expected;
  for (auto h = x.held.find(x.expected); h != x.held.end(); h = x.held.find(x.expected)) {
    mf::Send e;
    std::memcpy(&e, h->second.data(), sizeof e);
    store(n, s, x, e, h->second.data() + sizeof e);
    x.held.erase(h);
    ++x.expected;
  }
}

void on_reply(Nic* n, MsgqOfi* s, const mf::Reply& r) {
  std::lock_guard<std::mutex> lk(s->mu);
  MsgqOfi::Tx* t = nullptr;
  uint32_t pe = 0;
  for (auto& [node, x] : s->tx)
    if (x.chan == r.h.chan) {
      t = &x;
      pe = node;
      break;
    }
  if (!t) {
    count(n->counters, ctr::cdm::ofi_dropped);  // a stream we dropped (late), or forged
    return;
  }
  (void)pe;
  t->member_inst = r.member_inst;
  add_credits(t->cr, r.freed);
  if (r.ask) {
    if (t->syncing) take_credits(t->cr, r.adopted);  // given back when the old member died
    t->asking = t->syncing = false;
    t->unanswered_since = 0;
    return;
  }
  const uint64_t st = r.status < cqe::kErrStatusLast ? r.status : cqe::kErrPeerGone;
  bool matched = false;
  for (auto& p : t->pending)
    if (p.seq == r.h.seq && !p.done) {
      p.done = true;
      p.st = st;
      if (st != cqe::kOk) count(n->counters, ctr::cdm::ofi_errors);
      matched = true;
      break;
    }
  if (!matched) count(n->counters, ctr::cdm::ofi_dropped);
  complete_front(*t);
}

}  // namespace

bool msgq_ofi_send(Nic* n, abi::msgq::TxCredit* cr, uint64_t ticket, uint32_t pe, uint32_t inst, const void* hdr,
                   uint32_t hdr_len, const void* msg, uint32_t msg_len, uint32_t msg_id, uint8_t tag, Cq* snd_cq) {
  if (!ofi_msgs(n, mf::kMaxFrame) || hdr_len + msg_len > mf::kMaxPayload) return false;
  // Faults act on the daemons' channel (docs/ofi-fabric.md, "Faults"): while a configuration
  // is on, messages take the relay.
  if (n->fault_page->active.load(std::memory_order_relaxed)) return false;
  MsgqOfi* s = state_of(n);
  std::unique_lock<std::mutex> lk(s->mu);
  auto it = s->tx.find(pe);
  if (it == s->tx.end()) {
    lk.unlock();
    uint64_t dest = 0;
    if (!ofi_peer(n, pe, mf::kMsgqRoute, dest)) return false;  // no member reachable: the relay
    lk.lock();
    it = s->tx.find(pe);
    if (it == s->tx.end()) {
      MsgqOfi::Tx t;
      t.dest = dest;
      t.chan = ofi_mix(s->salt ^ ++s->streams);
      it = s->tx.emplace(pe, std::move(t)).first;
    }
  }
  MsgqOfi::Tx& t = it->second;
  t.cr = cr;
  const uint32_t seq = t.next++;
  Frame* f = make_send(n, mf::kSend, pe, t, seq, inst, hdr, hdr_len, msg, msg_len, tag);
  t.pending.push_back({seq, msg_id, inst, ticket, snd_cq, false, false, cqe::kOk, now_ns()});
  s->any_pending.store(true, std::memory_order_relaxed);
  const uint64_t dest = t.dest;
  lk.unlock();
  // Patient: a full queue is retried for 2 s (then the member is judged gone).
  if (uint64_t st = send_frame(n, dest, f, true); st != cqe::kOk) {
    std::lock_guard<std::mutex> g(s->mu);
    if (auto i = s->tx.find(pe); i != s->tx.end() && i->second.dest == dest) suspect(s, pe, i->second);
  }
  // On the hardware a MSGQ message is an FMA PUT into the remote node's queue.
  stat_add(n, GNI_STAT_FMA_LAUNCH_COUNT);
  count(n->counters, ctr::cdm::ofi_ops);
  count(n->counters, ctr::cdm::ofi_bytes, sizeof(mf::Send) + hdr_len + msg_len);
  return true;
}

void msgq_ofi_ask(Nic* n, uint32_t pe) {
  MsgqOfi* s = n->msgq_ofi.load(std::memory_order_acquire);
  if (!s) return;
  std::unique_lock<std::mutex> lk(s->mu);
  auto it = s->tx.find(pe);
  // One Ask at a time (an answer lost: again after 100 ms), so a sender spinning on
  // NOT_DONE does not flood the member.
  const uint64_t now = now_ns();
  if (it == s->tx.end() || it->second.syncing || (it->second.asking && now < it->second.ask_at + 100'000'000ull))
    return;
  MsgqOfi::Tx& t = it->second;
  t.asking = true;
  t.ask_at = now;
  if (!t.unanswered_since) t.unanswered_since = now;
  s->any_pending.store(true, std::memory_order_relaxed);
  Frame* f = make_send(n, mf::kAsk, pe, t, 0, 0, nullptr, 0, nullptr, 0, 0);
  const uint64_t dest = t.dest;
  lk.unlock();
  if (send_frame(n, dest, f, false) != cqe::kOk) {
    std::lock_guard<std::mutex> g(s->mu);
    if (auto i = s->tx.find(pe); i != s->tx.end()) i->second.asking = false;
  }
  ofi_poll(n);  // the answer comes as the provider progresses
}

void msgq_ofi_on_message(Nic* n, const void* buf, size_t len) {
  mf::Send m;
  mf::Reply r;
  MsgqOfi* s = state_of(n);
  switch (mf::parse(buf, len, m, r)) {
    case mf::Parsed::kSend:
      return on_send(n, s, m, static_cast<const uint8_t*>(buf), len, false);
    case mf::Parsed::kAsk:
      return on_send(n, s, m, static_cast<const uint8_t*>(buf), len, true);
    case mf::Parsed::kReply:
      return on_reply(n, s, r);
    case mf::Parsed::kBad:
      count(n->counters, ctr::cdm::ofi_dropped);
      return;
  }
}

void msgq_ofi_tick(Nic* n) {
  MsgqOfi* s = n->msgq_ofi.load(std::memory_order_acquire);
  if (s && s->any_later.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lk(s->mu);
    flush_later(n, s);
  }
  if (!s || !s->any_pending.load(std::memory_order_relaxed)) return;
  const uint64_t now = now_ns();
  std::lock_guard<std::mutex> lk(s->mu);
  bool any = false;
  for (auto it_prev = s->tx.begin(); it_prev != s->tx.end(); ++it_prev) {
    const uint32_t pe = it_prev->first;
    const auto& q = it_prev->second.pending;
    const uint64_t asked = it_prev->second.unanswered_since;
    if (q.empty() && !asked) continue;
    any = true;
    // The oldest message's reply (or, not yet completed at the provider, the frame itself:
    // with delivery complete a frame to a dead member may never complete), or an Ask's
    // answer (a sender out of credits sends nothing else), overdue: the member is silent
    // (dead, or its node's daemon gone with the segment, or slow): judged (a verdict drops
    // the stream).
    if ((!q.empty() && now > q.front().since + kReplyTimeoutNs) || (asked && now > asked + kReplyTimeoutNs))
      suspect(s, pe, it_prev->second);
  }
  if (!any) s->any_pending.store(false, std::memory_order_relaxed);
}

void msgq_ofi_release(Nic* n) {
  MsgqOfi* s = n->msgq_ofi.load(std::memory_order_acquire);
  if (!s) return;
  std::lock_guard<std::mutex> lk(s->mu);
  for (auto& [pe, t] : s->tx) t.cr = nullptr;  // the segment is unmapped next: late credits go nowhere
}

void msgq_ofi_settle(Nic* n, uint32_t pe, abi::msgq::TxCredit* cr) {
  MsgqOfi* s = n->msgq_ofi.load(std::memory_order_acquire);
  if (!s || !s->any_resync.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lk(s->mu);
  if (!s->resync.count(pe)) return;
  s->resync.erase(pe);
  if (s->resync.empty()) s->any_resync.store(false, std::memory_order_relaxed);
  if (s->tx.count(pe)) return;
  lk.unlock();
  uint64_t dest = 0;
  if (!ofi_msgs(n, mf::kMaxFrame) || !ofi_peer(n, pe, mf::kMsgqRoute, dest)) return;  // no member: the relay
  lk.lock();
  if (s->tx.count(pe)) return;
  MsgqOfi::Tx t;
  t.dest = dest;
  t.chan = ofi_mix(s->salt ^ ++s->streams);
  t.syncing = true;
  t.cr = cr;
  const uint64_t chan = t.chan;
  MsgqOfi::Tx& mine = s->tx.emplace(pe, std::move(t)).first->second;
  Frame* f = make_send(n, mf::kAsk, pe, mine, 0, 0, nullptr, 0, nullptr, 0, mf::kSyncAsk);
  lk.unlock();
  if (send_frame(n, dest, f, true) != cqe::kOk) {
    lk.lock();
    if (auto i = s->tx.find(pe); i != s->tx.end() && i->second.chan == chan) suspect(s, pe, i->second);
    return;
  }
  // The answer comes as the provider progresses: drive it (a round trip; 1 s at most).
  const uint64_t until = now_ns() + kSyncWaitNs;
  for (;;) {
    ofi_poll(n, true);
    lk.lock();
    auto i = s->tx.find(pe);
    const bool waiting = i != s->tx.end() && i->second.chan == chan && i->second.syncing;
    if (waiting && now_ns() > until) i->second.syncing = false;  // no answer: sends go on, maybe refused
    lk.unlock();
    if (!waiting || now_ns() > until) return;
    timespec ts{0, 50'000};
    nanosleep(&ts, nullptr);
  }
}

void msgq_ofi_quiesce(Nic* n) {
  MsgqOfi* s = n->msgq_ofi.load(std::memory_order_acquire);
  if (s) s->check->stop();
}

void msgq_ofi_forget(Nic* n) {
  MsgqOfi* s = n->msgq_ofi.exchange(nullptr, std::memory_order_acq_rel);
  if (!s) return;
  s->check->stop();
  for (auto& l : s->later) delete l.f;
  delete s;
}

}  // namespace nicemu::ugni
