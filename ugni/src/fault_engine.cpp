// Fault injection and the reorder engine for same-host transactions. One engine per process:
// a queue of held transactions ordered by (due time, sequence) and a thread that runs them
// when due, under the engine's lock (which also serialises SMSG sends taken through the
// slow path, so a mailbox has one writer). The ordering model decides what a new
// transaction may pass (docs/ordering.md):
//   strict   never held, never passes, nothing passes it;
//   default  a non-posted transaction (GET, AMO) may pass a held posted one (PUT, SMSG);
//   relaxed  may pass and be passed by anything but strict traffic.
// SMSG messages of one EP always stay in order: that is the channel's sequence numbering.
#include "fault_engine.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "fma_requester.h"
#include "nicemu/abi/remote_ops.h"
#include "ordering_model.h"
#include "nicemu/fault/fault_injector.h"
#include "nicemu/fault/fault_page.h"

namespace nicemu::ugni {

namespace af = nicemu::abi::fault;
namespace cqe = nicemu::abi::cqe;
using nicemu::fault::Decision;
using nicemu::fault::monotonic_ns;

const af::Page* fault_off_page() {
  static const af::Page off{};
  return &off;
}

const af::Page* fault_map_page(const std::string& socket) {
  return nicemu::fault::map_page(nicemu::fault::page_path(socket));
}

struct FaultState {
  nicemu::fault::Injector inj;
  uint32_t seq = 1;  // odd: never a published sequence, so the first use reads the page
};

namespace {

using ordering::Class;
using ordering::kDefault;
using ordering::kRelaxed;
using ordering::kStrict;

struct Held {
  Nic* nic = nullptr;
  Ep* ep = nullptr;
  Class cls = kDefault;
  bool posted = true;
  bool smsg = false;      // counts in ep->smsg_held (a message not yet in the mailbox)
  bool rdma = false;      // an RDMA post (a later fenced one of its EP waits for it)
  bool fence = false;     // posted with GNI_RDMAMODE_FENCE: later RDMA posts of its EP wait for it
  std::function<void()> run;
};

// An FMA or RDMA post the engine holds back (reordered or delayed), counted as such; the
// caller sets what it runs.
Held held_post(Nic* n, Ep* ep, Class cls, bool posted) {
  count(n->counters, ctr::cdm::reorder_held);
  Held h;
  h.nic = n;
  h.ep = ep;
  h.cls = cls;
  h.posted = posted;
  return h;
}

struct Engine {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<uint64_t, uint64_t>, Held> q;  // (due ns, sequence) -> transaction
  uint64_t next_seq = 0;
  pid_t thread_pid = 0;  // the thread does not survive fork: a child starts its own

  void start_thread() {
    if (thread_pid == getpid()) return;
    thread_pid = getpid();
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      if (q.empty()) {
        cv.wait(lk);
        continue;
      }
      const uint64_t now = monotonic_ns();
      auto it = q.begin();
      if (it->first.first > now) {
        cv.wait_for(lk, std::chrono::nanoseconds(it->first.first - now));
        continue;
      }
      Held h = std::move(it->second);
      q.erase(it);
      if (h.smsg) --h.ep->smsg_held;
      h.run();
      h.nic->fault_held.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  void hold(uint64_t due, Held h) {
    Nic* n = h.nic;
    if (h.smsg) ++h.ep->smsg_held;
    n->fault_held.fetch_add(1, std::memory_order_relaxed);
    q.emplace(std::make_pair(due, ++next_seq), std::move(h));
    start_thread();
    cv.notify_one();
  }
};

// Never destroyed: its detached thread may still run while the process exits.
Engine& engine() {
  static Engine* e = new Engine;
  return *e;
}

// The injector of `n`, reconfigured when the daemon published a new configuration.
// Called under the engine's lock.
FaultState& state(Nic* n) {
  if (!n->fault_state) n->fault_state = new FaultState;
  FaultState& s = *n->fault_state;
  const uint32_t seq = n->fault_page->seq.load(std::memory_order_acquire);
  if (seq != s.seq) {
    af::Config c{};
    uint64_t epoch = 0;
    uint32_t got = 0;
    if (nicemu::fault::read_config(n->fault_page, c, epoch, got)) {
      // One decision stream per CDM: a run replays per process from the seed.
      s.inj.configure(c, (uint64_t{n->nic_addr} << 32) | n->cdm->inst_id, epoch);
      s.seq = got;
    }
  }
  return s;
}

bool may_pass(const Held& y, Ep* ep, Class cls, bool posted, bool smsg) {
  return ordering::may_pass(ordering::Txn{y.cls, y.posted, y.smsg, y.ep}, ordering::Txn{cls, posted, smsg, ep});
}

// When a new transaction of `n` may run: 0 = now. `passed` tells whether it overtakes a
// held transaction. `rdma`: an RDMA post; `rdma_fence`: one with GNI_RDMAMODE_FENCE.
// Between RDMA posts of one EP a fence on either one keeps them in order: gni_pub.h has the
// fenced post wait for the responses of itself and all earlier posts before the *next*
// descriptor is processed, and clients also set it on the later post expecting it to wait;
// honouring both readings never reorders what the hardware keeps in order. Under the
// engine's lock.
uint64_t due_time(Engine& e, Nic* n, Ep* ep, Class cls, bool posted, bool smsg, uint32_t hold_us, bool& passed,
                  bool rdma = false, bool rdma_fence = false) {
  uint64_t after = 0;
  passed = false;
  for (const auto& [key, y] : e.q) {
    if (y.nic != n) continue;
    const bool fenced = rdma && y.rdma && y.ep == ep && (rdma_fence || y.fence);
    if (may_pass(y, ep, cls, posted, smsg) && !fenced)
      passed = true;
    else
      after = std::max(after, key.first);  // ties run in sequence order: after y
  }
  uint64_t due = hold_us ? monotonic_ns() + uint64_t{hold_us} * 1000 : 0;
  return std::max(due, after);
}

// The class of a transaction into the registration `hndl` of `target`: its PI flags are
// read from the target's table (a handle that does not decode gets the default class; the
// access fails anyway).
Class reg_class(const af::Config& c, const gni_mem_handle_t& hndl, uint16_t dlvr_mode, const Region& target) {
  uint32_t flags = 0;
  if (auto f = abi::mdh::decode(hndl.qword1, hndl.qword2)) {
    abi::RegEntry e{};
    if (target.read_reg(f->slot, e) && e.state == abi::kRegLive) flags = e.flags;
  }
  return ordering::class_of(c.ordering, dlvr_mode, flags);
}

Class fma_class(const af::Config& c, const FmaOp& op, uint16_t dlvr_mode, const Region& target) {
  return reg_class(c, op.remote_mem_hndl, dlvr_mode, target);
}

Class smsg_class(const af::Config& c, const Nic* n) { return ordering::smsg_class_of(c.ordering, n->smsg_dlvr_mode); }

af::Kind fma_kind(int type) {
  if (type == GNI_POST_FMA_GET) return af::kFmaGet;
  if (type == GNI_POST_AMO) return af::kAmo;
  return af::kFmaPut;
}

bool is_failure(af::Action a) {
  return a == af::kError || a == af::kDrop || a == af::kCorrupt || a == af::kLinkDown || a == af::kExhaust;
}

// A post that asked for no local event (or has no CQ) has nowhere to report an error:
// gni_pub.h has transaction errors either kill the process or arrive through the CQ, never
// vanish, so such a post is not failed (a silent loss would blame the client for it).
Decision reportable(Decision d, const Cq* cq, int32_t tid) {
  if (is_failure(d.action) && (!cq || tid < 0)) d.action = af::kNone;
  return d;
}

void count_failure(Nic* n, const Decision& d) {
  count(n->counters, ctr::cdm::fault_errors);
  if (d.action == af::kCorrupt) count(n->counters, ctr::cdm::fault_corrupts);
  if (d.action == af::kLinkDown) count(n->counters, ctr::cdm::fault_link_down);
}

void push_event(Cq* cq, uint16_t cq_mode, uint16_t which, uint64_t source, uint64_t status, int32_t tid,
                uint32_t local_event) {
  if (!cq || tid < 0) return;
  if ((cq_mode & which & GNI_CQMODE_LOCAL_EVENT))
    cq->ring.push(cqe::make(source, cqe::kTypePost, status, cqe::kInfoLocal, uint64_t(tid), local_event));
  if ((cq_mode & which & GNI_CQMODE_GLOBAL_EVENT))
    cq->ring.push(cqe::make(source == cqe::kSrcLocalRequest ? cqe::kSrcLocalResponse : source, cqe::kTypePost,
                            status, cqe::kInfoGlobal, uint64_t(tid), local_event));
}

// Runs one FMA transaction on `target` and posts its events: the remote one if asked and
// it succeeded, and the local ones in `which`.
void run_fma(const FmaOp& op, const Region& target, Cq* cq, uint16_t cq_mode, uint16_t which, int32_t tid,
             uint32_t local_event, uint32_t remote_event) {
  uint32_t dst_cq = abi::kNoCq;
  uint64_t st = op.ep->nic->nic_down.load(std::memory_order_relaxed) ? cqe::kErrNicDown
                                                                      : execute_fma_on(op, target, &dst_cq);
  if (st == cqe::kOk && (cq_mode & GNI_CQMODE_REMOTE_EVENT) && dst_cq != abi::kNoCq)
    push_remote_event(target, dst_cq, cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kOk, 0, 0, remote_event));
  push_event(cq, cq_mode, which, cqe::kSrcLocalRequest, st, tid, local_event);
}

}  // namespace

gni_return_t fault_register(Nic* n, bool update) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lk(e.mu);
  FaultState& s = state(n);
  if (!s.inj.selects(af::kReg)) return GNI_RC_SUCCESS;
  const Decision dec = s.inj.decide(af::kReg, n->nic_addr, monotonic_ns());
  if (dec.action != af::kError && dec.action != af::kExhaust) return GNI_RC_SUCCESS;  // a link window: not ours
  // An update fills in pages of a range whose MDD and PTEs were taken at the reserve
  // (GNI_MEM_UPDATE_REGION in Cray's gni_pub.h): pinning them can fail (exhaust), running out
  // of MDDs or PTEs (error) cannot. Drawn all the same, so the stream replays as before.
  if (update && dec.action == af::kError) return GNI_RC_SUCCESS;
  count_failure(n, dec);
  return dec.action == af::kError ? GNI_RC_ERROR_RESOURCE : GNI_RC_ERROR_NOMEM;
}

gni_return_t fault_post_fma(const FmaOp& op0, gni_post_descriptor_t* d, int32_t tid) {
  Ep* ep = op0.ep;
  Nic* n = ep->nic;
  Cq* cq = ep->src_cq;
  const uint16_t cq_mode = d->cq_mode;
  const uint16_t all = GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_GLOBAL_EVENT;
  uint64_t st = cqe::kOk;
  if (!target_of(ep, op0.remote_mem_hndl, st)) {
    push_event(cq, cq_mode, all, cqe::kSrcLocalRequest, st, tid, ep->local_event);
    return GNI_RC_SUCCESS;
  }
  std::shared_ptr<Region> target = ep->peer;  // held transactions keep the mapping alive
  FmaOp op = op0;
  Engine& e = engine();
  std::unique_lock<std::mutex> lk(e.mu);
  FaultState& s = state(n);
  const af::Config& c = s.inj.config();
  const Decision dec = reportable(s.inj.decide(fma_kind(op.type), ep->remote_addr, monotonic_ns()), cq, tid);
  const Class cls = fma_class(c, op, d->dlvr_mode, *target);
  uint32_t hold = cls == kStrict ? 0 : s.inj.reorder_hold_us();
  if (hold && n->fault_held.load(std::memory_order_relaxed) >= c.reorder_window) hold = 0;

  if (is_failure(dec.action)) {
    // A transient error after the NIC's retries: reported recoverable. A PUT or AMO may have
    // taken effect before the response was lost (dec.effect_done), as on hardware.
    lk.unlock();
    count_failure(n, dec);
    uint32_t dst_cq = abi::kNoCq;
    if (dec.action == af::kError && dec.effect_done) {
      count(n->counters, ctr::cdm::fault_errors_effect_done);
      // The request reached the target, so the target sees what any executed request
      // gives it, its remote event included.
      if (execute_fma_on(op, *target, &dst_cq) == cqe::kOk && (cq_mode & GNI_CQMODE_REMOTE_EVENT) &&
          dst_cq != abi::kNoCq)
        push_remote_event(*target, dst_cq,
                          cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kOk, 0, 0, ep->remote_event));
    }
    push_event(cq, cq_mode, all, cqe::kSrcLocalRequest, cqe::kErrInjected, tid, ep->local_event);
    return GNI_RC_SUCCESS;
  }
  if (dec.action == af::kDelay) {
    count(n->counters, ctr::cdm::fault_delays);
    hold = std::max(hold, dec.delay_us);
  }
  const bool posted = op.type == GNI_POST_FMA_PUT || op.type == GNI_POST_FMA_PUT_W_SYNCFLAG;
  bool passed = false;
  const uint64_t due = due_time(e, n, ep, cls, posted, false, hold, passed);
  if (passed) count(n->counters, ctr::cdm::reorder_passed);
  // A duplicated request is absorbed by the target: a PUT writes the same bytes again, a
  // GET or AMO is answered from the responder's replay cache (never executed twice).
  const int runs = dec.action == af::kDup && posted ? 2 : 1;
  if (due == 0) {
    lk.unlock();
    for (int i = 1; i < runs; ++i) {
      uint32_t dst = abi::kNoCq;
      execute_fma_on(op, *target, &dst);
    }
    run_fma(op, *target, cq, cq_mode, all, tid, ep->local_event, ep->remote_event);
    return GNI_RC_SUCCESS;
  }
  Held h = held_post(n, ep, cls, posted);
  uint16_t later = all;
  std::shared_ptr<std::vector<char>> data;
  if (posted) {
    // The source is read now (LOCAL completion: the buffer may be reused); the write
    // reaches the target when the engine runs it (GLOBAL completion, remote event).
    data = std::make_shared<std::vector<char>>(op.length);
    if (op.length) std::memcpy(data->data(), reinterpret_cast<const void*>(op.local_addr), op.length);
    op.local_addr = reinterpret_cast<uint64_t>(data->data());
    push_event(cq, cq_mode, GNI_CQMODE_LOCAL_EVENT, cqe::kSrcLocalRequest, cqe::kOk, tid, ep->local_event);
    later = GNI_CQMODE_GLOBAL_EVENT;
  }
  const uint32_t le = ep->local_event, re = ep->remote_event;
  h.run = [op, target, cq, cq_mode, later, tid, le, re, data, runs] {
    for (int i = 1; i < runs; ++i) {
      uint32_t dst = abi::kNoCq;
      execute_fma_on(op, *target, &dst);
    }
    run_fma(op, *target, cq, cq_mode, later, tid, le, re);
  };
  e.hold(due, std::move(h));
  return GNI_RC_SUCCESS;
}

namespace {

// Writes message `seq` into the peer's mailbox and posts its events (under the engine's lock).
void smsg_deliver(Ep* ep, uint32_t seq, const std::vector<char>& msg, uint32_t header_length, uint32_t msg_id,
                  uint8_t tag) {
  Nic* n = ep->nic;
  Mailbox& m = ep->tx;
  if (!m.region->alive() || n->nic_down.load(std::memory_order_relaxed)) {
    uint64_t st = n->nic_down ? cqe::kErrNicDown : cqe::kErrPeerGone;
    if (ep->src_cq)
      ep->src_cq->ring.push(cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, st, cqe::kInfoGlobal, 0, msg_id));
    return;
  }
  const uint32_t data_length = static_cast<uint32_t>(msg.size()) - header_length;
  // Credits were taken when the message was accepted, so the slot is free.
  smsg_write_at(m.view, seq, msg.data(), header_length, msg.data() + header_length, data_length, tag);
  stat_add(n, GNI_STAT_FMA_LAUNCH_COUNT);
  count(n->counters, ctr::cdm::smsg_sends);
  count(n->counters, ctr::cdm::smsg_send_bytes, msg.size());
  if (m.dst_cq != abi::kNoCq)
    push_remote_event(*m.region, m.dst_cq,
                      cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, cqe::kOk, 0, 0, ep->remote_event), &m.dst_cache);
  if (ep->src_cq)
    ep->src_cq->ring.push(cqe::make(cqe::kSrcLocalResponse, cqe::kTypeSmsg, cqe::kOk, cqe::kInfoGlobal, 0, msg_id));
}

void smsg_fail(Ep* ep, uint32_t msg_id) {
  count(ep->nic->counters, ctr::cdm::fault_smsg_exhausted);
  // As when the hardware's retransmissions run out: the message is lost and the sender
  // learns it from an error event (recoverable: the peer may still be there).
  if (ep->src_cq)
    ep->src_cq->ring.push(
        cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, cqe::kErrTransient, cqe::kInfoGlobal, 0, msg_id));
}

}  // namespace

gni_return_t fault_smsg_send(Ep* ep, const void* header, uint32_t header_length, const void* data,
                             uint32_t data_length, uint32_t msg_id, uint8_t tag) {
  Nic* n = ep->nic;
  Mailbox& m = ep->tx;
  Engine& e = engine();
  std::unique_lock<std::mutex> lk(e.mu);
  // Sequence numbers are taken at acceptance; while messages are held the mailbox's `sent`
  // lags behind them. Credits count every accepted message: each owns a slot.
  if (ep->smsg_held == 0) ep->smsg_next = m.view.ctl->sent.load(std::memory_order_relaxed);
  if (ep->smsg_next - m.view.released_seen >= m.view.credits) {
    m.view.released_seen = m.view.ctl->released.load(std::memory_order_acquire);
    if (ep->smsg_next - m.view.released_seen >= m.view.credits) {
      stat_add(n, GNI_STAT_SMSG_MBOX_CREDITS_STALL);
      count(n->counters, ctr::cdm::smsg_credit_stalls);
      // As without faults: the receiver raises the credit event (abi/smsg_channel.h).
      if (!smsg_want_credit(m.view, ep->smsg_next)) return GNI_RC_NOT_DONE;
    }
  }
  FaultState& s = state(n);
  const af::Config& c = s.inj.config();
  const uint64_t now = monotonic_ns();
  const Decision dec = s.inj.decide(af::kSmsg, ep->remote_addr, now);
  const Class cls = smsg_class(c, n);
  uint32_t hold = cls == kStrict ? 0 : s.inj.reorder_hold_us();
  if (hold && n->fault_held.load(std::memory_order_relaxed) >= c.reorder_window) hold = 0;
  bool dup = false;
  // Without a CQ the sender could not learn of a lost message (as for silent posts,
  // reportable()): its retransmissions do not run out.
  const bool can_fail = ep->src_cq != nullptr;
  switch (dec.action) {
    case af::kExhaust:
      if (!can_fail) {
        count(n->counters, ctr::cdm::fault_smsg_drops);
        count(n->counters, ctr::cdm::fault_smsg_retransmits);
        stat_add(n, GNI_STAT_SMSG_RETRANS_COUNT);  // as the NIC counts them (GNI_GetNicStat)
        hold = std::max<uint32_t>({hold, c.retransmit_us, 1});
        break;
      }
      smsg_fail(ep, msg_id);
      return GNI_RC_SUCCESS;
    case af::kLinkDown:
      count(n->counters, ctr::cdm::fault_link_down);
      // Retransmissions every retransmit_us run out before the link comes back; the
      // client's GNI_SmsgSetMaxRetrans limit applies when it is the lower one.
      if (can_fail && uint64_t{dec.delay_us} >
          uint64_t{std::min<uint32_t>(c.max_retrans, n->smsg_max_retrans)} * std::max<uint32_t>(c.retransmit_us, 1)) {
        smsg_fail(ep, msg_id);
        return GNI_RC_SUCCESS;
      }
      count(n->counters, ctr::cdm::fault_smsg_retransmits);
      stat_add(n, GNI_STAT_SMSG_RETRANS_COUNT);  // as the NIC counts them (GNI_GetNicStat)
      hold = std::max(hold, dec.delay_us);
      break;
    case af::kCorrupt:
      count(n->counters, ctr::cdm::fault_corrupts);
      [[fallthrough]];
    case af::kDrop:
    case af::kError:  // SMSG has no error completion for a lost packet: it is retransmitted
      count(n->counters, ctr::cdm::fault_smsg_drops);
      count(n->counters, ctr::cdm::fault_smsg_retransmits);
      stat_add(n, GNI_STAT_SMSG_RETRANS_COUNT);  // as the NIC counts them (GNI_GetNicStat)
      hold = std::max<uint32_t>({hold, dec.delay_us, 1});
      break;
    case af::kDelay:
      count(n->counters, ctr::cdm::fault_delays);
      hold = std::max(hold, dec.delay_us);
      break;
    case af::kDup:
      count(n->counters, ctr::cdm::fault_smsg_dups);
      dup = true;
      break;
    default:
      break;
  }
  std::vector<char> msg(uint64_t{header_length} + data_length);
  if (header_length) std::memcpy(msg.data(), header, header_length);
  if (data_length) std::memcpy(msg.data() + header_length, data, data_length);
  const uint32_t seq = ep->smsg_next++;
  bool passed = false;
  const uint64_t due = due_time(e, n, ep, cls, true, true, hold, passed);
  if (passed) count(n->counters, ctr::cdm::reorder_passed);
  if (due == 0) {
    smsg_deliver(ep, seq, msg, header_length, msg_id, tag);
  } else {
    if (hold) count(n->counters, ctr::cdm::reorder_held);
    Held h;
    h.nic = n;
    h.ep = ep;
    h.cls = cls;
    h.smsg = true;
    h.run = [ep, seq, msg, header_length, msg_id, tag] { smsg_deliver(ep, seq, msg, header_length, msg_id, tag); };
    e.hold(due, std::move(h));
  }
  if (dup) {
    // The second copy arrives after the first; the receiving side's sequence check (the
    // message is in its slot or consumed) discards it, so the application sees one message.
    Held h;
    h.nic = n;
    h.ep = ep;
    h.cls = kRelaxed;  // a stray packet orders nothing
    h.run = [ep, seq] {
      // It runs after the first copy (a later due time), so the check always discards it.
      if (smsg_seen(ep->tx.view, seq)) count(ep->nic->counters, ctr::cdm::fault_smsg_dups_suppressed);
    };
    e.hold(std::max(due, now) + uint64_t{std::max<uint32_t>(c.retransmit_us, 1)} * 1000, std::move(h));
  }
  return GNI_RC_SUCCESS;
}

bool fault_post_rdma(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, int32_t tid, bool ring_idle) {
  Nic* n = ep->nic;
  const bool get = post_type(d) == GNI_POST_RDMA_GET;
  const uint16_t all = GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_GLOBAL_EVENT;
  // Only a target the one-copy transfer reaches can be held (or have a failed PUT's effect
  // done); any other goes to the daemon's BTE engine, which knows the right error or route.
  std::shared_ptr<Region> target;
  if (ring_idle) {
    uint64_t st = cqe::kOk;
    target_of(ep, d->remote_mem_hndl, st);
    target = ep->peer;  // held transactions keep the mapping alive
    if (target && target->xmem_refused) target.reset();  // we cannot copy to it: the engine can
  }
  RdmaOp op = rdma_op(ep, d, get);

  Engine& e = engine();
  std::unique_lock<std::mutex> lk(e.mu);
  FaultState& s = state(n);
  const af::Config& c = s.inj.config();
  const Decision dec =
      reportable(s.inj.decide(get ? af::kRdmaGet : af::kRdmaPut, ep->remote_addr, monotonic_ns()), cq, tid);
  if (is_failure(dec.action)) {
    lk.unlock();
    count_failure(n, dec);
    // As an FMA PUT: the transfer may have taken effect before the completion was lost.
    if (dec.action == af::kError && dec.effect_done && target) {
      count(n->counters, ctr::cdm::fault_errors_effect_done);
      uint32_t dst_cq = abi::kNoCq;
      if (rdma_execute_on(n, op, *target, &dst_cq) == cqe::kOk && (op.cq_mode & GNI_CQMODE_REMOTE_EVENT) &&
          dst_cq != abi::kNoCq)
        push_remote_event(*target, dst_cq,
                          cqe::make(cqe::kSrcRemoteDma, cqe::kTypePost, cqe::kOk, 0, 0, op.remote_event));
    }
    push_event(cq, d->cq_mode, all, cqe::kSrcBte, cqe::kErrInjected, tid, ep->local_event);
    return true;
  }
  if (!target) return false;
  const Class cls = reg_class(c, op.remote_mem_hndl, d->dlvr_mode, *target);
  uint32_t hold = cls == kStrict ? 0 : s.inj.reorder_hold_us();
  if (hold && n->fault_held.load(std::memory_order_relaxed) >= c.reorder_window) hold = 0;
  if (dec.action == af::kDelay) {
    count(n->counters, ctr::cdm::fault_delays);
    hold = std::max(hold, dec.delay_us);
  }
  const bool posted = !get;
  bool passed = false;
  const bool fence = (d->rdma_mode & GNI_RDMAMODE_FENCE) != 0;
  const uint64_t due = due_time(e, n, ep, cls, posted, false, hold, passed, true, fence);
  if (passed) count(n->counters, ctr::cdm::reorder_passed);
  // A duplicated PUT writes the same bytes again; a GET is answered once.
  const int runs = dec.action == af::kDup && posted ? 2 : 1;
  // Under injection every post to a reachable target runs here with the one-copy transfer
  // (now or when due), whatever NICEMU_RDMA_DIRECT says: a post queued for the daemon's BTE
  // engine would still be in flight when a later SMSG or FMA transaction runs, which a
  // strict class forbids and the engine cannot see.
  count(n->counters, ctr::cdm::rdma_posts);
  count(n->counters, ctr::cdm::rdma_bytes, d->length);
  auto run = [n, op, target, cq, tid, runs] {
    uint32_t dst_cq = abi::kNoCq;
    uint64_t st = cqe::kOk;
    if (n->nic_down.load(std::memory_order_relaxed)) {
      st = cqe::kErrNicDown;
    } else {
      for (int i = 1; i < runs; ++i) rdma_execute_on(n, op, *target, &dst_cq);
      st = rdma_execute_on(n, op, *target, &dst_cq);
    }
    rdma_post_events(op, *target, cq, tid, st, dst_cq);
  };
  if (due == 0) {
    lk.unlock();
    run();
    return true;
  }
  // The data moves when the engine runs it, so every completion event (local ones too:
  // the source buffer is read then) comes from there.
  Held h = held_post(n, ep, cls, posted);
  h.rdma = true;
  h.fence = fence;
  h.run = std::move(run);
  e.hold(due, std::move(h));
  return true;
}

namespace {

// Whether packet rules, Nth hooks on packets or link windows (at any time of the
// configuration: one may open while a post is in flight) can touch traffic to `peer`.
bool touches_link(const af::Config& c, uint32_t peer) {
  constexpr uint32_t packet = 1u << af::kPacket;
  auto aimed = [peer](uint32_t p) { return p == af::kAnyPeer || p == peer; };
  for (uint32_t i = 0; i < c.rule_count; ++i)
    if ((c.rules[i].kind_mask & packet) && c.rules[i].ppm && aimed(c.rules[i].peer)) return true;
  for (uint32_t i = 0; i < c.nth_count; ++i)
    if (c.nth[i].kind_mask & packet) return true;
  for (uint32_t i = 0; i < c.link_count; ++i)
    if (aimed(c.links[i].peer)) return true;
  return false;
}

}  // namespace

bool fault_link_rules(Nic* n, uint32_t peer) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lk(e.mu);
  const af::Config& c = state(n).inj.config();
  return c.enabled && touches_link(c, peer);
}

uint32_t fault_ordering(Nic* n) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lk(e.mu);
  const af::Config& c = state(n).inj.config();
  return c.enabled ? c.ordering : abi::fault::kOrderAuto;
}

bool fault_post_remote(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t eng, int32_t tid,
                       bool& to_daemons) {
  namespace rop = nicemu::abi::remote;
  Nic* n = ep->nic;
  const bool bte = eng == rop::kBte;
  Engine& e = engine();
  std::unique_lock<std::mutex> lk(e.mu);
  FaultState& s = state(n);
  to_daemons = s.inj.config().enabled && touches_link(s.inj.config(), ep->remote_addr);
  af::Kind k;
  switch (kind) {
    case rop::kPut: k = bte ? af::kRdmaPut : af::kFmaPut; break;
    case rop::kGet: k = bte ? af::kRdmaGet : af::kFmaGet; break;
    case rop::kAmo: k = af::kAmo; break;
    default: return false;  // CQ writes are not injected (fault-injection.md, Limits)
  }
  if (!s.inj.selects(k)) return false;  // no draw: the CDM's stream as before for other kinds
  const Decision dec = reportable(s.inj.decide(k, ep->remote_addr, monotonic_ns()), cq, tid);
  // A link window is the link's: the channel of the daemons' path delays or fails the post.
  if (!is_failure(dec.action) || dec.action == af::kLinkDown) return false;
  lk.unlock();
  count_failure(n, dec);
  // Never executed (error_done does not apply: the request did not reach the other host).
  push_event(cq, d->cq_mode, GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_GLOBAL_EVENT,
             bte ? cqe::kSrcBte : cqe::kSrcLocalRequest, cqe::kErrInjected, tid, ep->local_event);
  return true;
}

void fault_forget_ep(Ep* ep) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lk(e.mu);
  for (auto it = e.q.begin(); it != e.q.end();) {
    if (it->second.ep == ep) {
      it->second.nic->fault_held.fetch_sub(1, std::memory_order_relaxed);
      it = e.q.erase(it);
    } else {
      ++it;
    }
  }
  ep->smsg_held = 0;
}

void fault_forget_nic(Nic* n) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lk(e.mu);
  for (auto it = e.q.begin(); it != e.q.end();) {
    if (it->second.nic == n) {
      if (it->second.smsg) --it->second.ep->smsg_held;
      it = e.q.erase(it);
    } else {
      ++it;
    }
  }
  n->fault_held.store(0, std::memory_order_relaxed);
  delete n->fault_state;
  n->fault_state = nullptr;
}

}  // namespace nicemu::ugni
