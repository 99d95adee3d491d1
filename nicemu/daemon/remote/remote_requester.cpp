#include "nicemu/daemon/remote/remote_requester.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "nicemu/abi/bte_ring.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/amo/amo_alu.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
using namespace nicemu::abi::remote;
namespace cqe = nicemu::abi::cqe;

namespace {

// Internal status: the initiator's own process is gone; nobody is told.
constexpr uint64_t kGone = 0x100;

uint64_t piece_length(const RemotePost& p, uint64_t off) {
  if (p.kind == kAmo) return p.length;
  if (p.kind == kCqWrite) return 0;
  return std::min<uint64_t>(kRmaPiece, p.length - off);
}

bool fetching_amo(const RemotePost& p) {
  auto c = amo::decode(p.amo_cmd);
  return c && c->fetching;
}

}  // namespace

RemoteRequester::RemoteRequester(FabricSend send, Reachable reachable)
    : send_(std::move(send)), reachable_(std::move(reachable)) {}

void RemoteRequester::post(const std::shared_ptr<MappedRegion>& initiator, const RemotePost& in,
                           const uint8_t* inline_data) {
  ++ctr_.posts;
  Op op;
  op.post = in;
  op.initiator = initiator;
  RemotePost& p = op.post;
  if (p.chain_id != 0 &&
      (p.chain_members == 0 || p.chain_members > kMaxChainMembers || p.chain_index >= kMaxChainMembers ||
       (p.chain_fail_index != kNoChainFailure &&
        (p.chain_fail_index >= kMaxChainMembers || p.chain_fail_status == cqe::kOk ||
         p.chain_fail_status >= cqe::kErrStatusLast)))) {
    // Not a chain the library could have made: an error event of its own, as a plain post.
    p.chain_id = 0;
    op.id = next_id_++;
    op.status = cqe::kErrProtection;
    complete(op);
    return;
  }
  uint64_t st = cqe::kOk;
  // The library checked all of this; a post that fails here is forged or corrupted.
  const bool kind_ok = p.kind == kPut || p.kind == kGet || p.kind == kAmo || p.kind == kCqWrite;
  if (!kind_ok || (p.engine != kFma && p.engine != kBte) || (p.inline_length && (p.kind != kPut || p.inline_length != p.length)))
    st = cqe::kErrProtection;
  else if (p.kind == kAmo && (!amo::decode(p.amo_cmd) || !amo::length_ok(*amo::decode(p.amo_cmd), p.length)))
    st = cqe::kErrProtection;
  // The initiator's side: GET and fetching AMOs write into its registration, RDMA PUT
  // reads from one (an FMA PUT reads the caller's buffer by address, registered or not).
  else if (p.kind == kGet || (p.kind == kAmo && fetching_amo(p)))
    st = initiator->check_access(p.local_qword1, p.local_qword2, p.local_addr, p.length, true, nullptr)
             ? cqe::kErrLocalProtection
             : cqe::kOk;
  else if (p.kind == kPut && p.engine == kBte && !p.inline_length)
    st = initiator->check_access(p.local_qword1, p.local_qword2, p.local_addr, p.length, false, nullptr)
             ? cqe::kErrLocalProtection
             : cqe::kOk;
  if (st == cqe::kOk) st = reachable_(p.remote_nic);
  if (auto it = per_initiator_.find(initiator->attach_id());
      st == cqe::kOk && it != per_initiator_.end() && it->second >= kMaxPerInitiator) {
    ++ctr_.refused;
    st = cqe::kErrTransient;
  }
  op.id = next_id_++;
  if (st != cqe::kOk) {
    op.status = st;
    complete(op);
    return;
  }
  if (p.inline_length) op.inline_data.assign(inline_data, inline_data + p.inline_length);
  ++per_initiator_[initiator->attach_id()];
  op.counted = true;
  const uint64_t id = op.id;
  const uint32_t node = p.remote_nic;
  ops_.emplace(id, std::move(op));
  PeerState& ps = peers_[node];
  ps.ops.push_back(id);
  pump_peer(node, ps);
}

RemoteRequester::Sent RemoteRequester::send_piece(Op& op, PeerState& ps) {
  const RemotePost& p = op.post;
  const uint64_t n = piece_length(p, op.next);
  if (ps.bytes_in_flight > 0 && ps.bytes_in_flight + n > kPeerWindow) return Sent::kWindowFull;
  buf_.resize(sizeof(RmaRequest) + (p.kind == kPut ? n : 0));
  RmaRequest q{};
  q.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, static_cast<uint16_t>(abi::ctl::Op::kRmaRequest), 0,
                    static_cast<uint32_t>(buf_.size())};
  q.id = op.id;
  q.kind = p.kind;
  q.engine = p.engine;
  const bool last = p.kind == kAmo || p.kind == kCqWrite || op.next + n >= p.length;
  q.flags = static_cast<uint16_t>((p.flags & (kFlagSyncFlag | kFlagRemoteEvent)) | (last ? kFlagLast : 0));
  // The domain is the initiator's, from its daemon-written header: a post cannot name another
  // protection domain's memory.
  q.ptag = op.initiator->header().ptag;
  q.cookie = op.initiator->header().cookie;
  q.remote_event = p.remote_event;
  q.amo_cmd = p.amo_cmd;
  q.base_addr = p.remote_addr;
  q.total_length = p.kind == kCqWrite ? 0 : p.length;
  q.offset = p.kind == kPut || p.kind == kGet ? op.next : 0;
  q.length = n;
  q.qword1 = p.remote_qword1;
  q.qword2 = p.remote_qword2;
  q.operand1 = p.operand1;
  q.operand2 = p.operand2;
  q.sync_flag_addr = p.sync_flag_addr;
  std::memcpy(buf_.data(), &q, sizeof q);
  if (p.kind == kPut && n > 0) {
    char* dst = buf_.data() + sizeof q;
    uint64_t st = cqe::kOk;
    if (!op.inline_data.empty()) {
      std::memcpy(dst, op.inline_data.data() + op.next, n);
    } else if (p.engine == kBte) {
      Extents local;
      st = op.initiator->translate(p.local_qword1, p.local_qword2, p.local_addr + op.next, n, false, local);
      if (st) st = cqe::kErrLocalProtection;
      else st = xmem::copy_pieces(false, op.initiator->pid(), local, dst, kGone);
    } else {
      st = xmem::copy(false, op.initiator->pid(), p.local_addr + op.next, dst, n, kGone);
      if (st == cqe::kErrMemAccess) st = cqe::kErrLocalProtection;
    }
    if (st) {
      // Nothing more of it goes out; it completes when the pieces already sent are answered.
      if (op.status == cqe::kOk) op.status = st;
      op.sent_all = true;
      return Sent::kSent;
    }
  }
  if (!send_(p.remote_nic, buf_.data(), buf_.size())) return Sent::kRefused;
  ++ctr_.pieces;
  ctr_.bytes_out += p.kind == kPut ? n : 0;
  ps.bytes_in_flight += n;
  ++op.in_flight;
  op.next += n;
  if (last) op.sent_all = true;
  return Sent::kSent;
}

void RemoteRequester::pump_peer(uint32_t node, PeerState& ps) {
  while (!ps.ops.empty()) {
    auto it = ops_.find(ps.ops.front());
    if (it == ops_.end()) {
      ps.ops.pop_front();
      continue;
    }
    Op& op = it->second;
    // A failed piece ends the transfer: the rest is not sent (the status is final anyway).
    if (op.status != cqe::kOk) op.sent_all = true;
    while (!op.sent_all) {
      const Sent s = send_piece(op, ps);
      if (s == Sent::kSent) continue;
      ps.stalled = true;
      if (s == Sent::kWindowFull) return;  // answers drain the window and pump again
      // The fabric refused: the peer is down, or its send backlog is full (retried by timer).
      if (reachable_(node) != cqe::kOk) return peer_lost(node);
      if (std::find(queue_.begin(), queue_.end(), node) == queue_.end()) queue_.push_back(node);
      return;
    }
    ps.ops.pop_front();
    if (op.in_flight == 0) {  // failed before its first piece left
      complete(op);
      ops_.erase(it);
    }
  }
  if (std::exchange(ps.stalled, false) && all_sent_) all_sent_(node);
}

bool RemoteRequester::unsent(uint64_t attach_id, uint32_t node) const {
  auto p = peers_.find(node);
  if (p == peers_.end()) return false;
  for (uint64_t id : p->second.ops)
    if (auto it = ops_.find(id); it != ops_.end() && !it->second.sent_all && it->second.initiator->attach_id() == attach_id)
      return true;
  return false;
}

void RemoteRequester::pump() {
  std::deque<uint32_t> q;
  q.swap(queue_);
  for (uint32_t node : q)
    if (auto it = peers_.find(node); it != peers_.end()) pump_peer(node, it->second);
}

bool RemoteRequester::reply(uint32_t from, const uint8_t* msg, size_t len) {
  RmaReply r;
  if (len < sizeof r) return false;
  std::memcpy(&r, msg, sizeof r);
  if (r.length != len - sizeof r) return false;
  auto it = ops_.find(r.id);
  // An answer for an operation failed meanwhile (peer declared lost, then heard again) is
  // stale; one from another node than the target is forged.
  if (it == ops_.end()) return true;
  Op& op = it->second;
  const RemotePost& p = op.post;
  if (p.remote_nic != from || op.in_flight == 0) return false;
  const uint64_t n = piece_length(p, r.offset);
  // A piece that was sent: PUT/GET at a piece boundary below what went out, others at 0.
  if (r.offset % kRmaPiece != 0 || (r.offset != 0 && r.offset >= op.next)) return false;
  if (r.status == cqe::kOk && p.kind == kGet && r.length != n) return false;
  if (r.status != cqe::kOk && r.length != 0) return false;
  if (r.status >= cqe::kErrStatusLast) return false;

  PeerState& ps = peers_[from];
  ps.bytes_in_flight -= std::min(ps.bytes_in_flight, n);
  --op.in_flight;
  op.answered += n;
  ctr_.bytes_in += r.length;
  uint64_t st = r.status;
  if (st == cqe::kOk && op.status == cqe::kOk && op.initiator->alive()) {
    // Into the initiator's registration, checked again: it may have deregistered meanwhile.
    if (p.kind == kGet) {
      Extents local;
      st = op.initiator->translate(p.local_qword1, p.local_qword2, p.local_addr + r.offset, n, true, local);
      if (st) st = cqe::kErrLocalProtection;
      else st = xmem::copy_pieces(true, op.initiator->pid(), local, const_cast<char*>(reinterpret_cast<const char*>(msg + sizeof r)), kGone);
    } else if (p.kind == kAmo && fetching_amo(p)) {
      Extents local;
      st = op.initiator->translate(p.local_qword1, p.local_qword2, p.local_addr, p.length, true, local);
      if (st) st = cqe::kErrLocalProtection;
      else st = xmem::copy_pieces(true, op.initiator->pid(), local, reinterpret_cast<char*>(&r.fetched), kGone);
    }
  }
  if (st != cqe::kOk && op.status == cqe::kOk) op.status = st;
  if (op.sent_all && op.in_flight == 0) {
    complete(op);
    ops_.erase(it);
  }
  pump_peer(from, ps);
  return true;
}

void RemoteRequester::peer_lost(uint32_t node) {
  auto pit = peers_.find(node);
  if (pit == peers_.end()) return;
  peers_.erase(pit);
  std::erase(queue_, node);
  for (auto it = ops_.begin(); it != ops_.end();) {
    if (it->second.post.remote_nic != node) {
      ++it;
      continue;
    }
    ++ctr_.lost;
    // A transaction error the client may retry (cqe::status_recoverable).
    if (it->second.status == cqe::kOk) it->second.status = cqe::kErrTransient;
    complete(it->second);
    it = ops_.erase(it);
  }
}

void RemoteRequester::complete(Op& op) {
  const RemotePost& p = op.post;
  if (op.counted) {
    auto it = per_initiator_.find(op.initiator->attach_id());
    if (it != per_initiator_.end() && --it->second == 0) per_initiator_.erase(it);
    op.counted = false;
  }
  if (p.chain_id != 0) return chain_member_done(op);
  if (op.status == kGone || !op.initiator->alive()) {
    ++ctr_.dropped;
    return;
  }
  if (op.status != cqe::kOk) ++ctr_.errors;
  post_events(*op.initiator, p, op.status);
}

void RemoteRequester::chain_member_done(Op& op) {
  const RemotePost& p = op.post;
  const auto key = std::make_pair(op.initiator->attach_id(), p.chain_id);
  auto it = chains_.find(key);
  if (it == chains_.end()) {
    if (chains_.size() >= kMaxChains)
      std::erase_if(chains_, [](const auto& c) { return !c.second.initiator->alive(); });
    if (chains_.size() >= kMaxChains) {
      // No room (chains abandoned by live CDMs): this member reports alone.
      ++ctr_.refused;
      if (op.initiator->alive()) post_events(*op.initiator, p, cqe::kErrTransient);
      return;
    }
    ++ctr_.chains;
    Chain c;
    c.initiator = op.initiator;
    c.first = p;
    c.remaining = p.chain_members;
    it = chains_.emplace(key, std::move(c)).first;
  }
  Chain& c = it->second;
  // What the library ran itself (every member says the same; taken from each all the same).
  if (p.chain_fail_index < c.fail_index) {
    c.fail_index = p.chain_fail_index;
    c.fail_status = p.chain_fail_status;
  }
  if (op.status != cqe::kOk && op.status != kGone && p.chain_index < c.fail_index) {
    c.fail_index = p.chain_index;
    c.fail_status = op.status;
  }
  if (--c.remaining > 0) return;
  const uint64_t st = c.fail_index == kNoChainFailure ? cqe::kOk : c.fail_status;
  if (op.status == kGone || !c.initiator->alive()) {
    ++ctr_.dropped;
  } else {
    if (st != cqe::kOk) ++ctr_.errors;
    post_events(*c.initiator, c.first, st);
  }
  chains_.erase(it);
}

void RemoteRequester::post_events(MappedRegion& initiator, const RemotePost& p, uint64_t status) {
  if (p.tid == kBteNoTid || p.tid > cqe::kTidMask) return;
  CqRingView v = initiator.cq_view(p.src_cq);
  if (!v.valid()) return;  // the CQ was destroyed meanwhile
  const bool bte = p.engine == kBte;
  if (p.cq_mode & kBteEventLocal)
    v.push(cqe::make(bte ? cqe::kSrcBte : cqe::kSrcLocalRequest, cqe::kTypePost, status, cqe::kInfoLocal, p.tid,
                     p.local_event));
  if (p.cq_mode & kBteEventGlobal)
    v.push(cqe::make(bte ? cqe::kSrcBte : cqe::kSrcLocalResponse, cqe::kTypePost, status, cqe::kInfoGlobal, p.tid,
                     p.local_event));
}

nlohmann::json RemoteRequester::status() const {
  uint64_t in_flight = 0;
  for (auto& [n, p] : peers_) in_flight += p.bytes_in_flight;
  return nlohmann::json{{"posts", ctr_.posts},       {"pieces", ctr_.pieces},   {"bytes_out", ctr_.bytes_out},
                        {"bytes_in", ctr_.bytes_in}, {"errors", ctr_.errors},   {"peer_lost", ctr_.lost},
                        {"dropped", ctr_.dropped},   {"refused", ctr_.refused}, {"chains", ctr_.chains},
                        {"chains_open", chains_.size()}, {"outstanding", ops_.size()}, {"bytes_in_flight", in_flight}};
}

}  // namespace nicemu::daemon
