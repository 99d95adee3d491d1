// SMSG over the ofi fabric (smsg_ofi.h says what and why; frames: nicemu/abi/ofi_smsg.h).
#include "smsg_ofi.h"

#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/ofi_smsg.h"
#include "nicemu/abi/smsg_channel.h"
#include "nicemu/fault/fault_page.h"
#include "fault_engine.h"
#include "ofi_port.h"
#include "smsg_relay.h"

namespace nicemu::ugni {

namespace cqe = nicemu::abi::cqe;
namespace sm = nicemu::abi::ofismsg;

namespace {

// Channels per CDM and side: indexes are never reused (a late frame for a closed channel
// finds it closed, not another), so a CDM opens at most this many over its life.
constexpr uint32_t kMaxChannels = 4096;
constexpr uint64_t kOpenTimeoutNs = 3'000'000'000ull;
constexpr uint64_t kAskEveryNs = 100'000'000ull;  // a sender still out of credits asks again
// Message frames of a channel in flight at once. Messages sent while as many are in flight
// gather into one Batch frame that goes when one completes: one provider message, completion
// and (FI_DELIVERY_COMPLETE) acknowledgement for many SMSG messages. One in flight lowered
// the rate (a round trip per batch, docs/notes/2026-12-07-ofi-rate-cpu.md).
constexpr uint32_t kInflight = 8;

uint64_t now_ns() { return nicemu::fault::monotonic_ns(); }

// A frame in flight: the provider reads it until `done`.
struct Frame {
  OfiSendCtx c;  // first
  SmsgOfiTx* tx = nullptr;
  SmsgOfiRx* rx = nullptr;
  uint32_t seq = 0;    // Msg, Batch: the (first) message's sequence number
  uint32_t count = 1;  // Msg, Batch: messages in it
  uint16_t type = 0;
  uint32_t len = 0;
  alignas(8) unsigned char bytes[1];  // `len` of them, allocated with the frame

  static Frame* make(uint32_t len) {
    void* mem = ::operator new(offsetof(Frame, bytes) + len);
    auto* f = new (mem) Frame;
    f->len = len;
    return f;
  }
  static void free(Frame* f) {
    f->~Frame();
    ::operator delete(f);
  }
};
static_assert(offsetof(Frame, c) == 0);

}  // namespace

// The sending side of a channel (our Ep's tx).
struct SmsgOfiTx {
  Nic* nic = nullptr;
  uint32_t id = 0;
  uint64_t gen = 0;
  uint64_t dest = 0;  // the receiver's address in our AV
  uint32_t rx_chan = 0;
  uint64_t rx_gen = 0;
  uint32_t credits = 0, max_size = 0;
  uint32_t credit_cq = abi::kNoCq;  // our receive CQ: the event of credits coming back
  std::atomic<uint32_t> sent{0};          // the application's (next sequence number)
  std::atomic<uint32_t> released{0};      // the receiver's releases as last noted
  std::atomic<uint32_t> state{0};         // 0 up, else the CQE status it failed with
  std::atomic<uint32_t> credit_wanted{0};
  std::atomic<bool> asking{false};
  uint64_t ask_at = 0;  // application thread: when it last asked
  // The Open's answer, and local completions in sequence order.
  std::mutex mu;
  std::condition_variable cv;
  bool answered = false;
  sm::OpenReply rep{};
  struct Pending {
    uint32_t seq, msg_id;
    Cq* cq;
    bool done;
    uint64_t st;
    OfiOrderTicket order;  // in flight towards the receiver until done (ofi_order.h)
  };
  std::deque<Pending> pending;
  // Message frames: `inflight` posted and not completed; while it is kInflight, messages go
  // into `batch`, then (full) into `ready`, sent in that order as frames complete (flush).
  // `parked`: a flush by the thread driving the CQ found the provider's queue full; the
  // next look at the CQ (smsg_ofi_flush) or the next send tries again.
  std::mutex qmu;
  uint32_t inflight = 0;
  Frame* batch = nullptr;
  std::deque<Frame*> ready;
  bool parked = false;
  bool sending = false;  // a thread is posting the channel's frames (flush): one at a time, in order
  uint64_t parked_at = 0;  // when a flush first found no room, 0: it did not
  ~SmsgOfiTx() {
    for (Frame* f : ready) Frame::free(f);
    if (batch) Frame::free(batch);
  }
  void fail(uint64_t st) {
    uint32_t none = 0;
    state.compare_exchange_strong(none, static_cast<uint32_t>(st), std::memory_order_acq_rel);
  }
};

// The receiving side of a channel (our mailbox, fed by a sender on another host).
struct SmsgOfiRx {
  uint32_t id = 0;
  uint64_t gen = 0;
  Mailbox mb;  // our mailbox (progress thread: slots, sent, its CQ)
  uint64_t dest = 0;  // the sender's address in our AV
  uint32_t tx_chan = 0;
  uint64_t tx_gen = 0;
  std::atomic<uint32_t> noted{0};   // the releases last told the sender
  std::atomic<uint32_t> wanted{0};  // the sender asked: tell it at the next release
  // Whoever drives the port's CQ writes the mailbox: one at a time (the slot writes move
  // `sent`, and the CQ view is cached), should more than one thread drive it.
  std::mutex mu;
};

struct SmsgOfi {
  std::atomic<SmsgOfiTx*> tx[kMaxChannels] = {};
  std::atomic<SmsgOfiRx*> rx[kMaxChannels] = {};
  std::mutex mu;  // allocation of indexes, rx_by_ctl
  uint32_t ntx = 0, nrx = 0;
  std::map<const abi::MboxCtl*, SmsgOfiRx*> rx_by_ctl;
  // Channels closed early (an Open not answered, a sender that opened again): out of the
  // tables, kept until the CDM goes, as frames and Eps may still name them.
  std::vector<SmsgOfiTx*> retired_tx;
  std::vector<SmsgOfiRx*> retired_rx;
  uint64_t salt = 0;
  // Senders whose frames wait for room in the provider (SmsgOfiTx::parked).
  std::mutex park_mu;
  std::vector<SmsgOfiTx*> parked;
  std::atomic<bool> any_parked{false};
  ~SmsgOfi() {
    for (auto& t : tx) delete t.load();
    for (auto& r : rx) delete r.load();
    for (SmsgOfiTx* t : retired_tx) delete t;
    for (SmsgOfiRx* r : retired_rx) delete r;
  }
};

namespace {

SmsgOfi* state_of(Nic* n) {
  SmsgOfi* s = n->smsg_ofi.load(std::memory_order_acquire);
  if (s) return s;
  auto* fresh = new SmsgOfi;
  fresh->salt = ofi_mix(now_ns() ^ reinterpret_cast<uintptr_t>(n));
  if (n->smsg_ofi.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;
  return s;
}

SmsgOfiTx* find_tx(SmsgOfi* s, const sm::Header& h) {
  if (h.chan >= kMaxChannels) return nullptr;
  SmsgOfiTx* t = s->tx[h.chan].load(std::memory_order_acquire);
  return t && t->gen == h.gen ? t : nullptr;
}
SmsgOfiRx* find_rx(SmsgOfi* s, const sm::Header& h) {
  if (h.chan >= kMaxChannels) return nullptr;
  SmsgOfiRx* r = s->rx[h.chan].load(std::memory_order_acquire);
  return r && r->gen == h.gen ? r : nullptr;
}

// The local completions of messages `seq` .. `seq + n - 1` (done with `st`), in sequence order.
void message_done(SmsgOfiTx* t, uint32_t seq, uint64_t st, uint32_t n = 1) {
  if (st != cqe::kOk) {
    t->fail(st);
    count(t->nic->counters, ctr::cdm::ofi_errors);
  }
  // What the messages counted in the port's order give back: all to one receiver (one slot),
  // given back after t->mu (leave may issue a held message of this channel, which takes it).
  OfiOrderTicket give[2];
  int32_t gives[2] = {0, 0};
  {
    std::lock_guard<std::mutex> lk(t->mu);
    uint32_t left = n;
    for (auto& p : t->pending)
      if (static_cast<uint32_t>(p.seq - seq) < n) {
        if (!p.done && p.order.counted) give[p.order.relaxed] = p.order, ++gives[p.order.relaxed];
        p.done = true;
        p.st = st;
        if (--left == 0) break;
      }
    while (!t->pending.empty() && t->pending.front().done) {
      const auto& p = t->pending.front();
      if (p.cq)
        p.cq->ring.push(p.st == cqe::kOk
                            ? cqe::make(cqe::kSrcLocalResponse, cqe::kTypeSmsg, cqe::kOk, cqe::kInfoGlobal, 0, p.msg_id)
                            : cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, p.st, cqe::kInfoGlobal, 0, p.msg_id));
      t->pending.pop_front();
    }
  }
  if (!gives[0] && !gives[1]) return;
  if (OfiOrder* o = ofi_order(t->nic))
    for (int r = 0; r < 2; ++r)
      if (gives[r]) o->leave(give[r], gives[r]);
}

// A provider error on a channel's frame: the receiver is gone (connection refused or reset)
// or unreachable. The relay's status for the same.
uint64_t channel_error(uint64_t) { return cqe::kErrPeerGone; }

void flush(Nic* n, SmsgOfiTx* t, bool patient);

void frame_done(Nic* n, OfiSendCtx* c, uint64_t st) {
  auto* f = reinterpret_cast<Frame*>(c);
  switch (f->type) {
    case sm::kMsg:
    case sm::kBatch: {
      SmsgOfiTx* t = f->tx;
      message_done(t, f->seq, st == cqe::kOk ? st : channel_error(st), f->count);
      Frame::free(f);
      {
        std::lock_guard<std::mutex> lk(t->qmu);
        --t->inflight;
      }
      flush(n, t, false);  // what gathered meanwhile: its turn
      return;
    }
    case sm::kAsk:
      if (st != cqe::kOk) f->tx->fail(channel_error(st));
      f->tx->asking.store(false, std::memory_order_release);
      break;
    case sm::kOpen:
      if (st != cqe::kOk) {
        std::lock_guard<std::mutex> lk(f->tx->mu);
        if (!f->tx->answered) {
          f->tx->answered = true;
          f->tx->rep.status = channel_error(st);
          f->tx->cv.notify_all();
        }
      }
      break;
    default:  // a Note or an OpenReply of ours: a lost one only delays credits or an Open
      break;
  }
  Frame::free(f);
}

// Sends a frame built in `f`; false (and `f` freed) if the provider did not take it.
uint64_t send_frame(Nic* n, uint64_t dest, Frame* f, bool patient) {
  f->c.done = frame_done;
  uint64_t st = ofi_send(n, dest, f->bytes, f->len, &f->c, patient);
  if (st != cqe::kOk) Frame::free(f);
  return st;
}

void park(Nic* n, SmsgOfiTx* t) {  // under t->qmu
  if (t->parked) return;
  t->parked = true;
  SmsgOfi* s = n->smsg_ofi.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lk(s->park_mu);
  s->parked.push_back(t);
  s->any_parked.store(true, std::memory_order_release);
}

// Sends the channel's gathered frames while fewer than kInflight are in flight, in order.
// `patient`: an application thread (ofi_send); else the thread driving the CQ, which parks
// what the provider has no room for.
// One thread posts at a time (`sending`): a flush nested in a patient send's ofi_poll (a
// completion read there) finds it set and returns, so no frame overtakes the one being sent;
// the poster re-checks under qmu before it clears it, so nothing is left unsent.
void flush(Nic* n, SmsgOfiTx* t, bool patient) {
  {
    std::lock_guard<std::mutex> lk(t->qmu);
    if (t->sending) return;
    t->sending = true;
  }
  for (;;) {
    Frame* f = nullptr;
    {
      std::lock_guard<std::mutex> lk(t->qmu);
      if (t->inflight < kInflight && t->ready.empty() && t->batch) {
        t->ready.push_back(t->batch);
        t->batch = nullptr;
      }
      if (t->inflight >= kInflight || t->ready.empty()) {
        t->sending = false;
        return;
      }
      f = t->ready.front();
      t->ready.pop_front();
      ++t->inflight;
    }
    if (f->type == sm::kBatch) {
      const sm::Header h = sm::header(sm::kBatch, t->rx_chan, t->rx_gen, f->len);
      std::memcpy(f->bytes, &h, sizeof h);
    }
    f->c.done = frame_done;
    const uint64_t st = ofi_send(n, t->dest, f->bytes, f->len, &f->c, patient);
    if (st == cqe::kOk) {
      std::lock_guard<std::mutex> lk(t->qmu);
      t->parked_at = 0;
      continue;
    }
    {
      std::lock_guard<std::mutex> lk(t->qmu);
      --t->inflight;
      // Refused for 2 s (as a patient send gives up: tcp;ofi_rxm refuses sends to a peer
      // that went away rather than failing them): the channel fails.
      const uint64_t now = now_ns();
      if (!patient && st == cqe::kErrTransient && !t->state.load(std::memory_order_acquire) &&
          (!t->parked_at || now < t->parked_at + 2'000'000'000ull)) {
        if (!t->parked_at) t->parked_at = now;
        t->ready.push_front(f);
        park(n, t);
        t->sending = false;
        return;
      }
      t->parked_at = 0;
    }
    message_done(t, f->seq, channel_error(st), f->count);
    Frame::free(f);
  }
}

// A message into the channel's batch (under t->qmu): a new Batch frame when it does not fit.
void gather(SmsgOfiTx* t, uint32_t seq, uint32_t remote_event, uint8_t tag, const void* header, uint32_t header_length,
            const void* data, uint32_t data_length) {
  const uint32_t total = header_length + data_length;
  Frame* f = t->batch;
  size_t off = f ? (f->len + 7) & ~size_t{7} : 0;
  if (!f || off + sizeof(sm::BatchRec) + total > sm::kMaxFrame) {
    if (f) t->ready.push_back(f);
    f = t->batch = Frame::make(static_cast<uint32_t>(sm::kMaxFrame));
    f->type = sm::kBatch;
    f->tx = t;
    f->seq = seq;
    f->count = 0;
    f->len = sizeof(sm::Header);  // the header: written when it goes (flush)
    off = f->len;
  }
  std::memset(f->bytes + f->len, 0, off - f->len);  // the previous record's padding
  const sm::BatchRec rec{seq, remote_event, total, tag, {}};
  std::memcpy(f->bytes + off, &rec, sizeof rec);
  if (header_length) std::memcpy(f->bytes + off + sizeof rec, header, header_length);
  if (data_length) std::memcpy(f->bytes + off + sizeof rec + header_length, data, data_length);
  f->len = static_cast<uint32_t>(off + sizeof rec + total);
  ++f->count;
}

// A message in a frame of its own (sm::Msg): sent alone, or held by the port's order.
Frame* msg_frame(SmsgOfiTx* t, uint32_t seq, uint32_t remote_event, uint8_t tag, const void* header,
                 uint32_t header_length, const void* data, uint32_t data_length) {
  const uint32_t total = header_length + data_length;
  Frame* f = Frame::make(static_cast<uint32_t>(sizeof(sm::Msg) + total));
  f->type = sm::kMsg;
  f->tx = t;
  f->seq = seq;
  sm::Msg m{};
  m.h = sm::header(sm::kMsg, t->rx_chan, t->rx_gen, f->len);
  m.seq = seq;
  m.remote_event = remote_event;
  m.length = total;
  m.tag = tag;
  std::memcpy(f->bytes, &m, sizeof m);
  if (header_length) std::memcpy(f->bytes + sizeof m, header, header_length);
  if (data_length) std::memcpy(f->bytes + sizeof m + header_length, data, data_length);
  return f;
}

// A message the port's order held goes into its channel now: its own frame if the channel
// has room in flight, else into the batch (the frame freed). In sequence order: the held
// messages of a channel are released in the order they were sent, and a later one is held
// behind them.
void release(Nic* n, SmsgOfiTx* t, Frame* f, bool patient) {
  bool alone;
  {
    std::lock_guard<std::mutex> lk(t->qmu);
    alone = t->inflight < kInflight && !t->batch && t->ready.empty();
    if (alone) {
      t->ready.push_back(f);
    } else {
      sm::Msg m;
      std::memcpy(&m, f->bytes, sizeof m);
      gather(t, m.seq, m.remote_event, m.tag, f->bytes + sizeof m, m.length, nullptr, 0);
    }
  }
  if (!alone) Frame::free(f);
  flush(n, t, patient);
}

void set_ticket(SmsgOfiTx* t, uint32_t seq, const OfiOrderTicket& ord) {
  std::lock_guard<std::mutex> lk(t->mu);
  for (auto& p : t->pending)
    if (p.seq == seq) {
      p.order = ord;
      return;
    }
}

void send_note(Nic* n, SmsgOfiRx* r, uint32_t released, bool patient) {
  // The highest count told wins; a Note that overtakes another only brings credits early.
  uint32_t old = r->noted.load(std::memory_order_relaxed);
  while (static_cast<int32_t>(released - old) > 0 &&
         !r->noted.compare_exchange_weak(old, released, std::memory_order_relaxed)) {
  }
  Frame* f = Frame::make(sizeof(sm::Note));
  f->type = sm::kNote;
  f->rx = r;
  sm::Note note{};
  note.h = sm::header(sm::kNote, r->tx_chan, r->tx_gen, sizeof note);
  note.released = released;
  note.credit_event = r->mb.view.ctl->credit_event.load(std::memory_order_relaxed);
  std::memcpy(f->bytes, &note, sizeof note);
  send_frame(n, r->dest, f, patient);  // lost: the sender asks again when it runs out
}

void ask(SmsgOfiTx* t) {
  const uint64_t now = now_ns();
  if (t->asking.load(std::memory_order_acquire) || now < t->ask_at + kAskEveryNs) return;
  t->asking.store(true, std::memory_order_release);
  t->ask_at = now;
  Frame* f = Frame::make(sizeof(sm::Header));
  f->type = sm::kAsk;
  f->tx = t;
  const sm::Header h = sm::header(sm::kAsk, t->rx_chan, t->rx_gen, sizeof h);
  std::memcpy(f->bytes, &h, sizeof h);
  // Not taken in 2 s (tcp;ofi_rxm keeps refusing sends to a peer that went away) or refused:
  // the receiver is gone, as a message's send would say.
  if (uint64_t st = send_frame(t->nic, t->dest, f, true); st != cqe::kOk) {
    t->asking.store(false, std::memory_order_release);
    t->fail(channel_error(st));
  }
}

// ---- the receiver's progress thread ----

void on_open(Nic* n, SmsgOfi* s, const sm::Open& o) {
  sm::OpenReply rep{};
  rep.h = sm::header(sm::kOpenReply, o.h.chan, o.h.gen, sizeof rep);
  rep.status = cqe::kOk;
  uint64_t dest = 0;
  if (!ofi_insert(n, o.reply_addr, o.reply_len, dest)) {
    count(n->counters, ctr::cdm::ofi_dropped);  // no way back: the sender times out, keeps the relay
    return;
  }
  gni_smsg_attr_t a{};
  a.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
  a.mem_hndl = gni_mem_handle_t{o.qword1, o.qword2};
  a.msg_buffer = reinterpret_cast<void*>(o.msg_buffer);
  a.mbox_offset = o.mbox_offset;
  a.buff_size = o.buff_size;
  a.mbox_maxcredit = o.credits;
  a.msg_maxsize = o.max_size;
  Mailbox mb;
  SmsgOfiRx* r = nullptr;
  if (o.ptag != n->cdm->ptag || o.cookie != n->cdm->cookie ||
      abi::mdh::route_of(o.qword1, o.qword2) != n->mem_domain) {
    rep.status = cqe::kErrProtection;  // another job's, or not a mailbox of ours
  } else if (o.credits == 0 || o.max_size == 0 || o.max_size > GNI_SMSG_MAX_SIZE ||
             sizeof(sm::Msg) + abi::smsg_capacity(o.max_size) > sm::kMaxFrame) {
    rep.status = cqe::kErrProtection;  // the sender checked these: a forged Open
  } else if (open_mailbox(n, n->nic_addr, &a, mb) != GNI_RC_SUCCESS) {
    rep.status = cqe::kErrPeerGone;  // as the relay: no such mailbox here
  } else {
    std::lock_guard<std::mutex> lk(s->mu);
    auto it = s->rx_by_ctl.find(mb.view.ctl);
    if (it != s->rx_by_ctl.end()) {
      // A sender opening again (its endpoint re-initialised): the old channel is closed.
      s->rx[it->second->id].store(nullptr, std::memory_order_release);
      s->retired_rx.push_back(it->second);
      s->rx_by_ctl.erase(it);
    }
    if (s->nrx < kMaxChannels) {
      r = new SmsgOfiRx;
      r->id = s->nrx++;
      r->gen = ofi_mix(s->salt ^ (uint64_t{r->id} << 1) ^ 1);
      r->mb = std::move(mb);
      r->dest = dest;
      r->tx_chan = o.h.chan;
      r->tx_gen = o.h.gen;
      r->noted.store(r->mb.view.ctl->released.load(std::memory_order_acquire), std::memory_order_relaxed);
      s->rx_by_ctl[r->mb.view.ctl] = r;
      s->rx[r->id].store(r, std::memory_order_release);
      rep.rx_chan = r->id;
      rep.rx_gen = r->gen;
      rep.sent = r->mb.view.ctl->sent.load(std::memory_order_acquire);
      rep.released = r->noted.load(std::memory_order_relaxed);
    } else {
      rep.status = cqe::kErrPeerGone;  // out of channels: the sender keeps the relay
    }
  }
  Frame* f = Frame::make(sizeof rep);
  f->type = sm::kOpenReply;
  std::memcpy(f->bytes, &rep, sizeof rep);
  send_frame(n, dest, f, false);
}

// One message into its slot (under r->mu), its remote event pushed.
void deliver(Nic* n, SmsgOfiRx* r, uint32_t seq, uint32_t remote_event, uint8_t tag, const char* payload,
             uint32_t length) {
  abi::MailboxView& v = r->mb.view;
  if (length > abi::smsg_capacity(v.max_size)) {
    count(n->counters, ctr::cdm::ofi_dropped);
    return;
  }
  const uint32_t released = v.ctl->released.load(std::memory_order_acquire);
  if (abi::smsg_seen(v, seq, released)) return;  // a duplicate: already in, or consumed
  if (static_cast<uint32_t>(seq - released) >= v.credits) {
    count(n->counters, ctr::cdm::ofi_dropped);  // no credit for it: not from our sender's numbering
    return;
  }
  abi::smsg_write_at(v, seq, payload, length, nullptr, 0, tag);
  if (r->mb.dst_cq != abi::kNoCq)
    push_remote_event(*r->mb.region, r->mb.dst_cq,
                      cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, cqe::kOk, 0, 0, remote_event), &r->mb.dst_cache);
  count(n->counters, ctr::cdm::ofi_served);
}

void on_msg(Nic* n, SmsgOfiRx* r, const void* buf, size_t len) {
  sm::Msg m;
  std::memcpy(&m, buf, sizeof m);
  if (len != sizeof m + m.length) {
    count(n->counters, ctr::cdm::ofi_dropped);
    return;
  }
  std::lock_guard<std::mutex> lk(r->mu);
  deliver(n, r, m.seq, m.remote_event, m.tag, static_cast<const char*>(buf) + sizeof m, m.length);
}

// A Batch: its records in order; a malformed record ends it (nothing after it can be found).
void on_batch(Nic* n, SmsgOfiRx* r, const void* buf, size_t len) {
  std::lock_guard<std::mutex> lk(r->mu);
  sm::BatchRec rec;
  for (size_t off = sizeof(sm::Header); off < len; off += sm::batch_step(rec.length)) {
    if (!sm::batch_record(buf, len, off, rec)) {
      count(n->counters, ctr::cdm::ofi_dropped);
      return;
    }
    deliver(n, r, rec.seq, rec.remote_event, rec.tag, static_cast<const char*>(buf) + off + sizeof rec, rec.length);
  }
}

void on_note(Nic* n, SmsgOfiTx* t, const sm::Note& note) {
  uint32_t old = t->released.load(std::memory_order_relaxed);
  const uint32_t sent = t->sent.load(std::memory_order_acquire);
  // Never past what was sent: a forged or confused Note gives no credit for unsent slots.
  if (static_cast<int32_t>(sent - note.released) < 0) {
    count(n->counters, ctr::cdm::ofi_dropped);
    return;
  }
  while (static_cast<int32_t>(note.released - old) > 0 &&
         !t->released.compare_exchange_weak(old, note.released, std::memory_order_seq_cst)) {
  }
  // The sender ran out and asked to be told (as the hardware's credit message raises an SMSG
  // event in its receive CQ): once credits are free again.
  if (t->credit_wanted.load(std::memory_order_seq_cst) &&
      sent - t->released.load(std::memory_order_seq_cst) < t->credits &&
      t->credit_wanted.exchange(0, std::memory_order_relaxed) && t->credit_cq != abi::kNoCq)
    push_remote_event(*n->self, t->credit_cq,
                      cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, cqe::kOk, 0, 0, note.credit_event));
}

}  // namespace

gni_return_t smsg_ofi_open(Ep* ep, const gni_smsg_attr_t* remote, uint32_t credit_cq, Mailbox& out, bool& taken) {
  taken = false;
  Nic* n = ep->nic;
  const uint64_t frame = sizeof(sm::Msg) + abi::smsg_capacity(remote->msg_maxsize);
  if (frame > sm::kMaxFrame || !ofi_msgs(n, sm::kMaxFrame)) return GNI_RC_SUCCESS;
  if (abi::mdh::is_vmdh(remote->mem_hndl.qword2)) return GNI_RC_SUCCESS;
  // Faults act on the daemons' channel (docs/ofi-fabric.md, "Faults"): while a configuration
  // is on, new channels take the relay.
  if (n->fault_page->active.load(std::memory_order_relaxed)) return GNI_RC_SUCCESS;
  uint64_t dest = 0;
  if (!ofi_peer(n, ep->remote_addr, abi::mdh::route_of(remote->mem_hndl.qword1, remote->mem_hndl.qword2), dest))
    return GNI_RC_SUCCESS;
  SmsgOfi* s = state_of(n);
  auto* t = new SmsgOfiTx;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    if (s->ntx >= kMaxChannels) {
      delete t;
      return GNI_RC_SUCCESS;
    }
    t->id = s->ntx++;
  }
  t->nic = n;
  t->gen = ofi_mix(s->salt ^ (uint64_t{t->id} << 1));
  t->dest = dest;
  t->credits = remote->mbox_maxcredit;
  t->max_size = remote->msg_maxsize;
  t->credit_cq = credit_cq;
  s->tx[t->id].store(t, std::memory_order_release);

  Frame* f = Frame::make(sizeof(sm::Open));
  f->type = sm::kOpen;
  f->tx = t;
  sm::Open o{};
  o.h = sm::header(sm::kOpen, t->id, t->gen, sizeof o);
  o.ptag = n->cdm->ptag;
  o.cookie = n->cdm->cookie;
  o.qword1 = remote->mem_hndl.qword1;
  o.qword2 = remote->mem_hndl.qword2;
  o.msg_buffer = reinterpret_cast<uint64_t>(remote->msg_buffer);
  o.mbox_offset = remote->mbox_offset;
  o.buff_size = remote->buff_size;
  o.credits = remote->mbox_maxcredit;
  o.max_size = remote->msg_maxsize;
  o.reply_len = ofi_self_name(n, o.reply_addr);
  std::memcpy(f->bytes, &o, sizeof o);
  bool ok = false;
  if (send_frame(n, dest, f, true) == cqe::kOk) {
    std::unique_lock<std::mutex> lk(t->mu);
    const bool answered = t->cv.wait_for(lk, std::chrono::nanoseconds(kOpenTimeoutNs), [&] { return t->answered; });
    ok = answered && t->rep.status == cqe::kOk;
    t->answered = true;  // a late answer finds it settled
  }
  if (!ok) {
    // No answer (a library without SMSG over ofi, a receiver busy past the timeout) or a
    // refusal: the relay, which says what it finds in its own way.
    std::lock_guard<std::mutex> lk(s->mu);
    s->tx[t->id].store(nullptr, std::memory_order_release);
    s->retired_tx.push_back(t);
    return GNI_RC_SUCCESS;
  }
  t->rx_chan = t->rep.rx_chan;
  t->rx_gen = t->rep.rx_gen;
  t->sent.store(t->rep.sent, std::memory_order_relaxed);
  t->released.store(t->rep.released, std::memory_order_relaxed);
  out = Mailbox{};
  out.ofi = t;
  out.view.credits = t->credits;
  out.view.max_size = t->max_size;
  taken = true;
  return GNI_RC_SUCCESS;
}

gni_return_t smsg_ofi_send(Ep* ep, const void* header, uint32_t header_length, const void* data, uint32_t data_length,
                           uint32_t msg_id, uint8_t tag) {
  SmsgOfiTx* t = ep->tx.ofi;
  Nic* n = ep->nic;
  auto failed = [&](uint64_t st) { return remote_send_failed(ep, msg_id, st); };  // as the relay's
  // NIC down as the daemons' path sees it (remote_post.cpp does the same for posts): the
  // daemon marked our region at shutdown, or the kernel did when it died.
  if (n->self->state() == abi::kRegionNicDown) [[unlikely]]
    n->nic_down.store(true, std::memory_order_relaxed);
  if (n->nic_down.load(std::memory_order_relaxed)) return failed(cqe::kErrNicDown);
  if (uint32_t st = t->state.load(std::memory_order_acquire)) return failed(st);
  const uint32_t s = t->sent.load(std::memory_order_relaxed);
  if (s - t->released.load(std::memory_order_acquire) >= t->credits) {
    stat_add(n, GNI_STAT_SMSG_MBOX_CREDITS_STALL);
    count(n->counters, ctr::cdm::smsg_credit_stalls);
    t->credit_wanted.store(1, std::memory_order_seq_cst);
    if (s - t->released.load(std::memory_order_seq_cst) >= t->credits) {
      ask(t);
      return GNI_RC_NOT_DONE;
    }
  }
  const uint32_t total = header_length + data_length;  // <= smsg_capacity(max_size), checked by the caller
  // Sent now if nothing it may not pass is in flight to the receiver (a PUT, then the message
  // announcing it: ofi_order.h), else held by the port's order until that took effect; the
  // call returns either way, the message counted (credit, sequence number, pending) now.
  OfiOrderTicket ord;
  OfiOrder* o = ofi_order(n);
  const ordering::Class cls = o ? ordering::smsg_class_of(forced_ordering(n), n->smsg_dlvr_mode) : ordering::kDefault;
  const bool go = !o || o->enter(t->dest, OfiPath::kSmsg, cls, ord);
  {
    std::lock_guard<std::mutex> lk(t->mu);
    t->pending.push_back({s, msg_id, ep->src_cq, false, 0, ord});
  }
  t->sent.store(s + 1, std::memory_order_release);
  if (!go) {
    Frame* f = msg_frame(t, s, ep->remote_event, tag, header, header_length, data, data_length);
    // Not capped: a channel holds at most its credits. kHeld: it may be sent already.
    if (o->hold(t->dest, OfiPath::kSmsg, cls, reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(f) | 1), false,
                ord) == OfiAdmit::kGo) {
      set_ticket(t, s, ord);
      release(n, t, f, true);
    }
  } else {
    bool alone;
    {
      std::lock_guard<std::mutex> lk(t->qmu);
      alone = t->inflight < kInflight && !t->batch && t->ready.empty();
      if (!alone) gather(t, s, ep->remote_event, tag, header, header_length, data, data_length);
    }
    if (alone) {  // room in flight: a frame of its own, now (through flush, in order)
      Frame* f = msg_frame(t, s, ep->remote_event, tag, header, header_length, data, data_length);
      {
        std::lock_guard<std::mutex> lk(t->qmu);
        t->ready.push_back(f);
      }
      flush(n, t, true);
    } else {
      // Gathered: it goes when the frame in flight completes. Look at the CQ for that
      // completion now (a streaming sender may not poll), then send what is due.
      ofi_poll(n);
      flush(n, t, true);
    }
  }
  // On the hardware every SMSG message is an FMA PUT into the peer's mailbox.
  stat_add(n, GNI_STAT_FMA_LAUNCH_COUNT);
  count(n->counters, ctr::cdm::smsg_sends);
  count(n->counters, ctr::cdm::smsg_send_bytes, total);
  count(n->counters, ctr::cdm::ofi_ops);
  count(n->counters, ctr::cdm::ofi_bytes, total);
  return GNI_RC_SUCCESS;
}

bool smsg_ofi_failed(const Mailbox& m) { return m.ofi && m.ofi->state.load(std::memory_order_acquire) != 0; }

bool smsg_ofi_released(Ep* ep) {
  SmsgOfi* s = ep->nic->smsg_ofi.load(std::memory_order_acquire);
  if (!s || !ep->rx.view.ctl) return false;
  SmsgOfiRx* r = ep->ofi_rx;
  if (!r || s->rx[r->id].load(std::memory_order_acquire) != r) {  // not yet, or the sender opened again
    std::lock_guard<std::mutex> lk(s->mu);
    auto it = s->rx_by_ctl.find(ep->rx.view.ctl);
    r = ep->ofi_rx = it == s->rx_by_ctl.end() ? nullptr : it->second;
    if (!r) return false;
  }
  // Credits back every quarter mailbox (a streaming sender never stalls on a full one), and at
  // the first release after a sender out of credits asked. smsg_release stored `released`
  // seq_cst before we load `wanted`; the progress thread stores `wanted` before it loads
  // `released` (on_ask): one of the two sees the other.
  const uint32_t released = ep->rx.view.ctl->released.load(std::memory_order_relaxed);
  const uint32_t batch = std::max<uint32_t>(1, ep->rx.view.credits / 4);
  if (released - r->noted.load(std::memory_order_relaxed) >= batch ||
      (r->wanted.load(std::memory_order_seq_cst) && r->wanted.exchange(0, std::memory_order_relaxed)))
    send_note(ep->nic, r, released, true);
  return true;
}

void smsg_ofi_on_message(Nic* n, const void* buf, size_t len) {
  sm::Header h;
  SmsgOfi* s = state_of(n);
  if (!sm::parse_header(buf, len, h)) {
    count(n->counters, ctr::cdm::ofi_dropped);
    return;
  }
  switch (h.type) {
    case sm::kOpen: {
      sm::Open o;
      std::memcpy(&o, buf, sizeof o);
      if (o.reply_len == 0 || o.reply_len > sizeof o.reply_addr) break;
      return on_open(n, s, o);
    }
    case sm::kOpenReply: {
      SmsgOfiTx* t = find_tx(s, h);
      if (!t) break;
      std::lock_guard<std::mutex> lk(t->mu);
      if (t->answered) return;  // late: the Open timed out
      std::memcpy(&t->rep, buf, sizeof t->rep);
      t->answered = true;
      t->cv.notify_all();
      return;
    }
    case sm::kMsg:
      if (SmsgOfiRx* r = find_rx(s, h)) return on_msg(n, r, buf, len);
      break;
    case sm::kBatch:
      if (SmsgOfiRx* r = find_rx(s, h)) return on_batch(n, r, buf, len);
      break;
    case sm::kNote:
      if (SmsgOfiTx* t = find_tx(s, h)) {
        sm::Note note;
        std::memcpy(&note, buf, sizeof note);
        return on_note(n, t, note);
      }
      break;
    case sm::kAsk:
      if (SmsgOfiRx* r = find_rx(s, h)) {
        r->wanted.store(1, std::memory_order_seq_cst);
        return send_note(n, r, r->mb.view.ctl->released.load(std::memory_order_seq_cst), false);
      }
      break;
  }
  count(n->counters, ctr::cdm::ofi_dropped);  // malformed, or for a channel we do not have
}

void smsg_ofi_flush(Nic* n) {
  SmsgOfi* s = n->smsg_ofi.load(std::memory_order_acquire);
  if (!s || !s->any_parked.load(std::memory_order_acquire)) return;
  std::vector<SmsgOfiTx*> v;
  {
    std::lock_guard<std::mutex> lk(s->park_mu);
    v.swap(s->parked);
    s->any_parked.store(false, std::memory_order_relaxed);
  }
  for (SmsgOfiTx* t : v) {
    {
      std::lock_guard<std::mutex> lk(t->qmu);
      t->parked = false;
    }
    flush(n, t, false);
  }
}

OfiIssue smsg_ofi_issue_held(Nic* n, void* item, const OfiOrderTicket& ord) {
  auto* f = static_cast<Frame*>(item);
  SmsgOfiTx* t = f->tx;
  set_ticket(t, f->seq, ord);
  // Its channel failed, or our NIC went down, while it was held: it fails as a send then.
  uint64_t st = t->state.load(std::memory_order_acquire);
  if (!st && n->nic_down.load(std::memory_order_relaxed)) st = cqe::kErrNicDown;
  if (st) {
    message_done(t, f->seq, st);
    Frame::free(f);
    return OfiIssue::kDone;
  }
  release(n, t, f, false);  // no room in the provider: the channel parks it (smsg_ofi_flush)
  return OfiIssue::kDone;
}

void smsg_ofi_drop_held(Nic*, void* item, uint64_t status) {
  auto* f = static_cast<Frame*>(item);
  if (status) message_done(f->tx, f->seq, status);
  Frame::free(f);
}

void smsg_ofi_forget(Nic* n) { delete n->smsg_ofi.exchange(nullptr, std::memory_order_acq_rel); }

}  // namespace nicemu::ugni
