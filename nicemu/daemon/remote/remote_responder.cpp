#include "nicemu/daemon/remote/remote_responder.h"

#include <unistd.h>

#include <cstring>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/amo/amo_alu.h"
#include "nicemu/amo/amo_lock.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
using namespace nicemu::abi::remote;
namespace cqe = nicemu::abi::cqe;

RemoteResponder::RemoteResponder(uint32_t self, RegionDirectory& regions, FabricSend send)
    : self_(self), regions_(regions), send_(std::move(send)), lock_owner_(amo::lock_self(getpid())) {}

bool RemoteResponder::request(uint32_t from, const uint8_t* msg, size_t len) {
  RmaRequest q;
  if (len < sizeof q) return false;
  std::memcpy(&q, msg, sizeof q);
  const uint64_t payload = len - sizeof q;
  switch (q.kind) {
    case kPut:
      if (q.length != payload || q.length > kRmaPiece) return false;
      break;
    case kGet:
      if (payload != 0 || q.length > kRmaPiece) return false;
      break;
    case kAmo:
    case kCqWrite:
      if (payload != 0 || q.offset != 0) return false;
      break;
    default:
      return false;
  }
  if (q.engine != kFma && q.engine != kBte) return false;
  if (q.offset > q.total_length || q.length > q.total_length - q.offset) return false;
  ++ctr_.requests;
  ctr_.bytes_in += payload;

  uint64_t st = cqe::kOk, fetched = 0;
  uint32_t dst_cq = kNoCq;
  buf_.clear();
  auto target = regions_.resolve(RegionKey{self_, mdh::route_of(q.qword1, q.qword2), q.ptag, q.cookie}, st);
  if (target) st = execute(q, msg + sizeof q, *target, fetched, buf_, dst_cq);
  if (st && target && !target->alive()) st = target->gone_status();

  const auto key = std::make_pair(from, q.id);
  const bool last = q.flags & kFlagLast;
  if (st != cqe::kOk) {
    ++ctr_.errors;
    // The initiator stops a failed transfer, so its last piece may never come: the set is
    // bounded (forgetting an old entry can only matter for a last piece that never comes).
    if (!last) {
      if (failed_.size() >= kMaxFailed) failed_.clear();
      failed_.insert(key);
    }
  }
  bool ok_whole = st == cqe::kOk;
  if (last) ok_whole = ok_whole && failed_.erase(key) == 0;
  // The remote event, once the whole transfer is in (CQ writes are their own entry).
  if (last && ok_whole && target && q.kind != kCqWrite && (q.flags & kFlagRemoteEvent) && dst_cq != kNoCq) {
    CqRingView v = target->cq_view(dst_cq);
    const uint64_t src = q.engine == kBte ? cqe::kSrcRemoteDma : cqe::kSrcRemoteRequest;
    if (v.valid()) v.push(cqe::make(src, cqe::kTypePost, cqe::kOk, 0, 0, q.remote_event));
  }

  // Built in place after the GET bytes already in buf_ (no allocation per answer).
  const size_t data = st == cqe::kOk ? buf_.size() : 0;
  out_.resize(sizeof(RmaReply) + data);
  RmaReply r{};
  r.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, static_cast<uint16_t>(abi::ctl::Op::kRmaReply), 0,
                         static_cast<uint32_t>(out_.size())};
  r.id = q.id;
  r.offset = q.offset;
  r.status = st;
  r.fetched = fetched;
  r.length = data;
  std::memcpy(out_.data(), &r, sizeof r);
  if (data) std::memcpy(out_.data() + sizeof r, buf_.data(), data);
  ctr_.bytes_out += data;
  answer(from, out_);
  return true;
}

uint64_t RemoteResponder::execute(const RmaRequest& q, const uint8_t* data, MappedRegion& t, uint64_t& fetched,
                                  std::vector<char>& out, uint32_t& dst_cq) {
  switch (q.kind) {
    case kPut: {
      // The whole transfer first: an access outside the registration writes nothing.
      if (uint64_t st = t.check_access(q.qword1, q.qword2, q.base_addr, q.total_length, true, &dst_cq)) return st;
      Extents pieces;
      if (uint64_t st = t.translate(q.qword1, q.qword2, q.base_addr + q.offset, q.length, true, pieces)) return st;
      char* src = const_cast<char*>(reinterpret_cast<const char*>(data));
      if (uint64_t st = xmem::copy_pieces(true, t.pid(), pieces, src, t.gone_status())) return st;
      if ((q.flags & kFlagSyncFlag) && (q.flags & kFlagLast)) {
        Extents flag;
        if (uint64_t st = t.translate(q.qword1, q.qword2, q.sync_flag_addr, sizeof(uint64_t), true, flag)) return st;
        uint64_t v = q.operand1;
        if (uint64_t st = xmem::copy_pieces(true, t.pid(), flag, reinterpret_cast<char*>(&v), t.gone_status()))
          return st;
      }
      return cqe::kOk;
    }
    case kGet: {
      if (uint64_t st = t.check_access(q.qword1, q.qword2, q.base_addr, q.total_length, false, &dst_cq)) return st;
      Extents pieces;
      if (uint64_t st = t.translate(q.qword1, q.qword2, q.base_addr + q.offset, q.length, false, pieces)) return st;
      out.resize(q.length);
      return xmem::copy_pieces(false, t.pid(), pieces, out.data(), t.gone_status());
    }
    case kAmo: {
      ++ctr_.amos;
      auto c = amo::decode(q.amo_cmd);
      if (!c || !amo::length_ok(*c, q.total_length) || q.length != q.total_length || (q.base_addr & (c->size - 1)))
        return cqe::kErrProtection;  // the initiating library checked these: a forged request
      Extents word;
      if (uint64_t st = t.translate(q.qword1, q.qword2, q.base_addr, c->size, true, word)) return st;
      if (word.size() != 1) return cqe::kErrBounds;  // split over two segments: no single word
      const RegionHeader& h = t.header();
      AmoLock* lock = amo::lock_for(t.base(), kRoSize, t.size(), h.amo_lock_count, h.amo_lock_offset, word[0].va);
      if (!lock) return cqe::kErrMemAccess;
      // Bounded in total: the lock is in the target's writable heap, and its owner could
      // keep waking waiters without ever releasing (regression in tests/unit/test_amo_lock.cpp).
      if (amo::lock_acquire(lock, lock_owner_, 0, amo::kDaemonLockWaitNs, amo::kDaemonLockWaitNs) == amo::LockResult::kTimeout)
        return cqe::kErrTransient;
      uint64_t old = 0;
      uint64_t st = xmem::copy(false, t.pid(), word[0].va, reinterpret_cast<char*>(&old), c->size, t.gone_status());
      if (!st) {
        amo::Outcome o = amo::apply(*c, old, q.operand1, q.operand2);
        if (o.store)
          st = xmem::copy(true, t.pid(), word[0].va, reinterpret_cast<char*>(&o.new_value), c->size, t.gone_status());
        fetched = o.fetched;
      }
      amo::lock_release(lock, lock_owner_);
      if (!st) t.check_access(q.qword1, q.qword2, q.base_addr, c->size, true, &dst_cq);
      return st;
    }
    case kCqWrite: {
      ++ctr_.cq_writes;
      uint32_t cq = kNoCq;
      if (uint64_t st = region_cq_write_target(t.base(), q.qword1, q.qword2, cq)) return st;
      // A full target CQ loses the entry and flags its overrun, as the hardware does.
      CqRingView v = t.cq_view(cq);
      if (v.valid()) v.push(cqe::make_cqwrite(q.operand1));
      return cqe::kOk;
    }
    default:
      return cqe::kErrProtection;
  }
}

void RemoteResponder::answer(uint32_t to, const std::vector<char>& msg) {
  auto it = pending_.find(to);
  if (it == pending_.end() && send_(to, msg.data(), msg.size())) return;
  // Behind answers already waiting (order), or the fabric has no room now: kept, retried.
  ++ctr_.deferred;
  pending_[to].push_back(msg);
}

void RemoteResponder::retry() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& q = it->second;
    while (!q.empty() && send_(it->first, q.front().data(), q.front().size())) q.pop_front();
    it = q.empty() ? pending_.erase(it) : std::next(it);
  }
}

void RemoteResponder::peer_lost(uint32_t node) {
  pending_.erase(node);
  std::erase_if(failed_, [node](const auto& k) { return k.first == node; });
}

nlohmann::json RemoteResponder::status() const {
  size_t queued = 0;
  for (auto& [n, q] : pending_) queued += q.size();
  return nlohmann::json{{"requests", ctr_.requests}, {"bytes_in", ctr_.bytes_in},   {"bytes_out", ctr_.bytes_out},
                        {"amos", ctr_.amos},         {"cq_writes", ctr_.cq_writes}, {"errors", ctr_.errors},
                        {"deferred", ctr_.deferred}, {"queued", queued}};
}

}  // namespace nicemu::daemon
