#include "nicemu/daemon/remote/msgq_relay.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/shm_layout.h"

namespace nicemu::daemon {

using namespace nicemu::abi::remote;
namespace rc = nicemu::abi::gni;
namespace cqe = nicemu::abi::cqe;

namespace {
constexpr uint64_t kPollMinUs = 100, kPollMaxUs = 5000;

template <typename Queues>
size_t queued(const Queues& by_node) {
  size_t n = 0;
  for (auto& [node, q] : by_node) n += q.size();
  return n;
}
}

MsgqRelay::MsgqRelay(uint32_t self, FabricSend send, PeerUp up, FindSegment find, EachSegment each, PostCqe post)
    : self_(self),
      send_(std::move(send)),
      up_(std::move(up)),
      find_(std::move(find)),
      each_(std::move(each)),
      post_(std::move(post)) {}

void MsgqRelay::complete(uint64_t attach_id, uint32_t cq, uint32_t msg_id, uint32_t status) {
  ++ctr_.completed;
  if (status != cqe::kOk) ++ctr_.completed_errors;
  if (cq != abi::kNoCq)
    post_(attach_id, cq, cqe::make(cqe::kSrcLocalResponse, cqe::kTypeMsgq, status, cqe::kInfoGlobal, 0, msg_id));
}

void MsgqRelay::fail_pending(uint32_t node) {
  if (auto p = pending_.find(node); p != pending_.end()) {
    for (const Pending& x : p->second) complete(x.attach_id, x.cq, x.msg_id, cqe::kErrTransient);
    pending_.erase(p);
  }
  if (auto w = waiting_.find(node); w != waiting_.end()) {
    ctr_.send_failed += w->second.size();
    for (const MsgqDeliver& d : w->second) give_back(node, d.ptag, d.cookie, 1);
    waiting_.erase(w);
  }
}

bool MsgqRelay::forward(const CdmRegion& cdm, const MsgqSegment& seg, const MsgqRemoteSend& m) {
  // As for a same-host send: only to a node this node connected to (GNI_MsgqConnect). The
  // library checked both; a refusal here (a connection released meanwhile, or a forged
  // request) still completes the send, with an error, and returns its credit.
  if (uint32_t{m.hdr_len} + m.msg_len > seg.attrs().max_msg_sz || m.dst_pe == self_ || !seg.connected_to(m.dst_pe)) {
    give_back(m.dst_pe, cdm.credential().ptag, cdm.credential().cookie, 1);
    complete(cdm.attach_id(), m.snd_cq, m.msg_id, cqe::kErrNoPeer);
    return false;
  }
  MsgqDeliver d{};
  d.h = abi::ctl::make_header<MsgqDeliver>(abi::ctl::Op::kMsgqDeliver, 0);
  d.origin_pe = self_;
  d.src_inst = cdm.inst_id();
  d.dst_inst = m.dst_inst;
  d.ptag = cdm.credential().ptag;
  d.cookie = cdm.credential().cookie;
  d.hdr_len = m.hdr_len;
  d.msg_len = m.msg_len;
  d.tag = m.tag;
  std::memcpy(d.payload, m.payload, uint32_t{m.hdr_len} + m.msg_len);
  auto w = waiting_.find(m.dst_pe);
  if (w == waiting_.end() && send_(m.dst_pe, &d, sizeof d)) {
    ++ctr_.forwarded;
  } else if (up_(m.dst_pe)) {
    // The fabric's backlog to that node is full: behind the others, in order.
    ++ctr_.waited;
    waiting_[m.dst_pe].push_back(d);
  } else {
    // The peer is down: the message is lost, counted (logged the first time and every
    // 1000th, so a dead peer cannot flood the log), completed with an error after those
    // before it; its credit comes back at once.
    if (ctr_.send_failed++ % 1000 == 0)
      spdlog::warn("nic {}: MSGQ message for node {} inst {} lost: the fabric channel to it is down", self_, m.dst_pe,
                   m.dst_inst);
    fail_pending(m.dst_pe);
    give_back(m.dst_pe, d.ptag, d.cookie, 1);
    complete(cdm.attach_id(), m.snd_cq, m.msg_id, cqe::kErrTransient);
    return true;
  }
  pending_[m.dst_pe].push_back(Pending{cdm.attach_id(), m.snd_cq, m.msg_id});
  return true;
}

void MsgqRelay::give_back(uint32_t node, uint32_t ptag, uint32_t cookie, uint64_t n) {
  MsgqSegment* seg = find_(Credential{ptag, cookie});
  abi::msgq::TxCredit* cr = seg ? seg->tx_credit(node) : nullptr;
  if (!cr) {
    ++ctr_.stale_credits;  // the connection (or the whole queue) is gone: nothing to give back to
    return;
  }
  // `returned` never passes `sent` (a report cannot be larger
  // than what was sent, unless the peer lies or the connection was renewed meanwhile).
  // A CAS: with fabric_data = ofi the members' libraries add credits too (msgq_ofi.h).
  uint64_t r = cr->returned.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t sent = cr->sent.load(std::memory_order_acquire);
    const uint64_t v = std::min(r + n, std::max(sent, r));
    if (v == r || cr->returned.compare_exchange_weak(r, v, std::memory_order_acq_rel)) break;
  }
  ctr_.credits_received += n;
}

void MsgqRelay::drain_waiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto& q = it->second;
    while (!q.empty() && send_(it->first, &q.front(), sizeof q.front())) {
      ++ctr_.forwarded;
      q.pop_front();
    }
    if (!q.empty() && !up_(it->first)) {
      const uint32_t node = it->first;
      ++it;
      fail_pending(node);  // erases waiting_[node]
      continue;
    }
    it = q.empty() ? waiting_.erase(it) : std::next(it);
  }
}

int MsgqRelay::put(const MsgqDeliver& d) {
  MsgqSegment* seg = find_(Credential{d.ptag, d.cookie});
  MsgqSegment::RingPos at;
  const int r = seg ? seg->deliver_remote(d.origin_pe, d.src_inst, d.dst_inst, d.tag, d.payload, d.hdr_len,
                                          d.payload + d.hdr_len, d.msg_len, &at)
                    : rc::kInvalidState;  // no queue of that domain here (any more)
  if (r != rc::kNotDone) stored(d, r, at);
  return r;
}

// Target side: a message stored (its credit comes back when the ring's head passes it) or
// refused for good (its credit comes back with the next report).
void MsgqRelay::stored(const MsgqDeliver& d, int r, const MsgqSegment::RingPos& at) {
  Outstanding& o = out_[Key{d.ptag, d.cookie, d.origin_pe}];
  if (r != rc::kSuccess) {
    // Logged the first time and every 1000th, so a confused peer cannot flood the log.
    if (ctr_.undeliverable++ % 1000 == 0)
      spdlog::warn("nic {}: MSGQ message from node {} inst {} for inst {} refused: no queue of that domain, no ring "
                   "for that node or no such destination here",
                   self_, d.origin_pe, d.src_inst, d.dst_inst);
    ++o.unreported;
    outcome(d.origin_pe, cqe::kErrPeerGone);
    return;
  }
  outcome(d.origin_pe, cqe::kOk);
  ++ctr_.delivered;
  if (!o.pos.empty() && (o.ring != at.ring || o.gen != at.gen)) {  // the old ring is gone
    o.unreported += o.pos.size();
    o.pos.clear();
  }
  o.ring = at.ring;
  o.gen = at.gen;
  o.pos.push_back(at.pos);
}

const char* MsgqRelay::receive(uint32_t from, const abi::ctl::Header& h, const uint8_t* msg, size_t len) {
  switch (static_cast<abi::ctl::Op>(h.op)) {
    case abi::ctl::Op::kMsgqDeliver:  // the progress hook after this receive batch reports credits
      return deliver(from, msg, len) ? nullptr : "bad MsgqDeliver";
    case abi::ctl::Op::kMsgqCredit:
      return credit(from, msg, len) ? nullptr : "bad MsgqCredit";
    case abi::ctl::Op::kMsgqResult:
      return result(from, msg, len) ? nullptr : "bad MsgqResult";
    default:
      return "not an MSGQ message";
  }
}

bool MsgqRelay::deliver(uint32_t from, const uint8_t* msg, size_t len) {
  MsgqDeliver d;
  if (len != sizeof d) return false;
  std::memcpy(&d, msg, sizeof d);
  if (d.origin_pe != from || uint32_t{d.hdr_len} + d.msg_len > kMsgqMaxPayload) return false;
  // Behind held messages: order per origin is kept by never overtaking them.
  if (held_.empty() && put(d) != rc::kNotDone) return true;
  if (held_.size() >= kMaxHeld) {
    ++ctr_.overflow;
    ++out_[Key{d.ptag, d.cookie, d.origin_pe}].unreported;
    outcome(d.origin_pe, cqe::kErrTransient);
    return true;
  }
  ++ctr_.held;
  held_.push_back(d);
  retry_held();
  return true;
}

bool MsgqRelay::credit(uint32_t from, const uint8_t* msg, size_t len) {
  MsgqCredit c;
  if (len != sizeof c) return false;
  std::memcpy(&c, msg, sizeof c);
  if (c.origin_pe != from) return false;
  ++ctr_.credit_reports;
  give_back(from, c.ptag, c.cookie, c.freed);
  return true;
}

// Target side: the next message of `origin`, in arrival order, had this outcome.
void MsgqRelay::outcome(uint32_t origin, uint32_t status) {
  auto& runs = results_[origin];
  if (!runs.empty() && runs.back().status == status && runs.back().count < UINT32_MAX)
    ++runs.back().count;
  else
    runs.push_back(MsgqResultRun{1, status});
}

void MsgqRelay::send_results() {
  for (auto it = results_.begin(); it != results_.end();) {
    auto& runs = it->second;
    size_t done = 0;
    while (done < runs.size()) {
      const uint32_t n = static_cast<uint32_t>(std::min<size_t>(runs.size() - done, kMsgqMaxRuns));
      std::vector<uint8_t> buf(sizeof(MsgqResult) + n * sizeof(MsgqResultRun));
      MsgqResult r{};
      r.h = abi::ctl::make_header<MsgqResult>(abi::ctl::Op::kMsgqResult, 0);
      r.h.length = static_cast<uint32_t>(buf.size());  // the runs follow
      r.origin_pe = self_;
      r.runs = n;
      std::memcpy(buf.data(), &r, sizeof r);
      std::memcpy(buf.data() + sizeof r, runs.data() + done, n * sizeof(MsgqResultRun));
      if (!send_(it->first, buf.data(), buf.size())) break;  // backlog full: the rest next turn
      ++ctr_.result_messages;
      done += n;
    }
    runs.erase(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(done));
    it = runs.empty() ? results_.erase(it) : std::next(it);
  }
}

bool MsgqRelay::result(uint32_t from, const uint8_t* msg, size_t len) {
  MsgqResult r;
  if (len < sizeof r) return false;
  std::memcpy(&r, msg, sizeof r);
  if (r.origin_pe != from || r.runs == 0 || r.runs > kMsgqMaxRuns || len != sizeof r + r.runs * sizeof(MsgqResultRun))
    return false;
  auto p = pending_.find(from);
  uint64_t total = 0;
  for (uint32_t i = 0; i < r.runs; ++i) {
    MsgqResultRun run;
    std::memcpy(&run, msg + sizeof r + i * sizeof run, sizeof run);
    if (run.status >= cqe::kErrStatusLast) return false;
    total += run.count;
  }
  // About more messages than wait for an answer: a confused or lying peer. Nothing posted.
  if (p == pending_.end() || total > p->second.size()) return false;
  for (uint32_t i = 0; i < r.runs; ++i) {
    MsgqResultRun run;
    std::memcpy(&run, msg + sizeof r + i * sizeof run, sizeof run);
    for (uint32_t k = 0; k < run.count; ++k) {
      const Pending& x = p->second.front();
      complete(x.attach_id, x.cq, x.msg_id, run.status);
      p->second.pop_front();
    }
  }
  if (p->second.empty()) pending_.erase(p);
  return true;
}

void MsgqRelay::retry_held() {
  while (!held_.empty()) {
    if (put(held_.front()) == rc::kNotDone) return;
    held_.pop_front();
  }
}

// Target side: reports what receivers freed, one MsgqCredit per (domain, origin).
void MsgqRelay::settle() {
  bool moved = false;
  for (auto it = out_.begin(); it != out_.end();) {
    auto& [key, o] = *it;
    const auto [ptag, cookie, origin] = key;
    MsgqSegment* seg = find_(Credential{ptag, cookie});
    std::optional<uint64_t> head = seg && !o.pos.empty() ? seg->ring_head(o.ring, o.gen) : std::nullopt;
    if (!head) {  // no segment or ring any more: every slot it held is free
      o.unreported += o.pos.size();
      o.pos.clear();
    } else {
      while (!o.pos.empty() && o.pos.front() < *head) {
        o.pos.pop_front();
        ++o.unreported;
      }
    }
    if (o.unreported) {
      moved = true;
      MsgqCredit c{};
      c.h = abi::ctl::make_header<MsgqCredit>(abi::ctl::Op::kMsgqCredit, 0);
      c.origin_pe = self_;
      c.ptag = ptag;
      c.cookie = cookie;
      c.freed = static_cast<uint32_t>(std::min<uint64_t>(o.unreported, UINT32_MAX));
      if (send_(origin, &c, sizeof c)) {  // refused (backlog full): again next turn
        ctr_.credits_sent += c.freed;
        o.unreported -= c.freed;
      }
    }
    it = o.pos.empty() && o.unreported == 0 ? out_.erase(it) : std::next(it);
  }
  poll_us_ = moved ? kPollMinUs : std::min(poll_us_ * 2, kPollMaxUs);
}

void MsgqRelay::progress() {
  retry_held();
  drain_waiting();
  send_results();
  settle();
}

void MsgqRelay::peer_lost(uint32_t node) {
  // Sender side: what waited for it is lost, and so is whatever it had not reported freed
  // (its daemon restarted or is unreachable): every credit of connections to it comes back.
  fail_pending(node);
  each_([&](MsgqSegment& seg) {
    if (abi::msgq::TxCredit* cr = seg.tx_credit(node))
      cr->returned.store(cr->sent.load(std::memory_order_acquire), std::memory_order_release);
  });
  // Target side: its senders start over with all their credits and completions, so nothing
  // is owed them.
  results_.erase(node);
  for (auto it = out_.begin(); it != out_.end();) it = std::get<2>(it->first) == node ? out_.erase(it) : std::next(it);
}

nlohmann::json MsgqRelay::status() const {
  return nlohmann::json{{"forwarded", ctr_.forwarded},
                        {"send_failed", ctr_.send_failed},
                        {"waited", ctr_.waited},
                        {"waiting", queued(waiting_)},
                        {"delivered", ctr_.delivered},
                        {"held", ctr_.held},
                        {"holding", held_.size()},
                        {"undeliverable", ctr_.undeliverable},
                        {"overflow", ctr_.overflow},
                        {"credits_sent", ctr_.credits_sent},
                        {"credit_reports", ctr_.credit_reports},
                        {"credits_received", ctr_.credits_received},
                        {"stale_credits", ctr_.stale_credits},
                        {"completed", ctr_.completed},
                        {"completed_errors", ctr_.completed_errors},
                        {"awaiting_results", queued(pending_)},
                        {"result_messages", ctr_.result_messages}};
}

}  // namespace nicemu::daemon
