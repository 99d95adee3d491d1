#include "nicemu/daemon/bte/bte_proxy.h"

#include <algorithm>
#include <cstring>

#include "nicemu/abi/bte_ring.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/amo/amo_alu.h"
#include "nicemu/amo/amo_lock.h"
#include "nicemu/daemon/bte/bte_channel.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
using namespace nicemu::abi::remote;
namespace cqe = nicemu::abi::cqe;

namespace {

// The target's side in chunks of `bounce`; the source of each chunk is the inline bytes or
// the initiator's memory (by address for FMA, which reads unregistered buffers too, through
// its registration for RDMA).
uint64_t put(const ProxyPost& pp, MappedRegion& t, std::vector<char>& bounce, uint32_t& dst_cq) {
  const RemotePost& p = pp.post;
  MappedRegion& ini = *pp.initiator;
  // The whole transfer first: an access outside the registration writes nothing.
  if (uint64_t st = t.check_access(p.remote_qword1, p.remote_qword2, p.remote_addr, p.length, true, &dst_cq)) return st;
  const bool sync = p.flags & kFlagSyncFlag;
  Extents flag;
  if (sync)
    if (uint64_t st = t.translate(p.remote_qword1, p.remote_qword2, p.sync_flag_addr, sizeof(uint64_t), true, flag))
      return st;
  for (uint64_t off = 0; off < p.length;) {
    const uint64_t n = std::min<uint64_t>(bounce.size(), p.length - off);
    char* src = bounce.data();
    uint64_t st = cqe::kOk;
    if (p.inline_length) {
      src = const_cast<char*>(pp.data.data()) + off;
    } else if (p.engine == kBte) {
      Extents local;
      if (ini.translate(p.local_qword1, p.local_qword2, p.local_addr + off, n, false, local))
        return cqe::kErrLocalProtection;
      st = xmem::copy_pieces(false, ini.pid(), local, src, kProxyDrop);
    } else {
      st = xmem::copy(false, ini.pid(), p.local_addr + off, src, n, kProxyDrop);
      if (st == cqe::kErrMemAccess) st = cqe::kErrLocalProtection;  // the caller's buffer is not mapped
    }
    if (st) return st;
    // Checked again before every chunk: a target that died or deregistered meanwhile sees
    // at most the chunk in flight, and a reused pid is never written.
    if (!t.alive()) return t.gone_status();
    Extents remote;
    if ((st = t.translate(p.remote_qword1, p.remote_qword2, p.remote_addr + off, n, true, remote))) return st;
    if ((st = xmem::copy_pieces(true, t.pid(), remote, src, t.gone_status()))) return st;
    off += n;
  }
  if (!sync) return cqe::kOk;
  uint64_t v = p.operand1;
  return xmem::copy_pieces(true, t.pid(), flag, &v, t.gone_status());
}

uint64_t get(const ProxyPost& pp, MappedRegion& t, std::vector<char>& bounce, uint32_t& dst_cq) {
  const RemotePost& p = pp.post;
  MappedRegion& ini = *pp.initiator;
  if (uint64_t st = t.check_access(p.remote_qword1, p.remote_qword2, p.remote_addr, p.length, false, &dst_cq))
    return st;
  if (ini.check_access(p.local_qword1, p.local_qword2, p.local_addr, p.length, true, nullptr))
    return cqe::kErrLocalProtection;
  for (uint64_t off = 0; off < p.length;) {
    const uint64_t n = std::min<uint64_t>(bounce.size(), p.length - off);
    if (!t.alive()) return t.gone_status();
    Extents remote, local;
    if (uint64_t st = t.translate(p.remote_qword1, p.remote_qword2, p.remote_addr + off, n, false, remote)) return st;
    if (uint64_t st = xmem::copy_pieces(false, t.pid(), remote, bounce.data(), t.gone_status())) return st;
    if (ini.translate(p.local_qword1, p.local_qword2, p.local_addr + off, n, true, local))
      return ini.alive() ? cqe::kErrLocalProtection : kProxyDrop;
    if (uint64_t st = xmem::copy_pieces(true, ini.pid(), local, bounce.data(), kProxyDrop)) return st;
    off += n;
  }
  return cqe::kOk;
}

// Under the target word's AMO lock, as libugni's execute_amo (fma_requester.cpp) and the
// responder for other hosts do: read, compute, write back if it changed.
uint64_t amo_op(const ProxyPost& pp, MappedRegion& t, uint64_t lock_owner, uint32_t& dst_cq) {
  const RemotePost& p = pp.post;
  MappedRegion& ini = *pp.initiator;
  const amo::Command c = *amo::decode(p.amo_cmd);  // proxy_check
  if (c.fetching && ini.check_access(p.local_qword1, p.local_qword2, p.local_addr, c.size, true, nullptr))
    return cqe::kErrLocalProtection;
  if (uint64_t st = t.check_access(p.remote_qword1, p.remote_qword2, p.remote_addr, c.size, true, &dst_cq)) return st;
  Extents word;
  if (uint64_t st = t.translate(p.remote_qword1, p.remote_qword2, p.remote_addr, c.size, true, word)) return st;
  if (word.size() != 1) return cqe::kErrBounds;  // split over two segments: no single word
  const RegionHeader& h = t.header();
  AmoLock* lock = amo::lock_for(t.base(), kRoSize, t.size(), h.amo_lock_count, h.amo_lock_offset, word[0].va);
  if (!lock) return cqe::kErrMemAccess;
  // Bounded in total (the lock is in the target's writable heap, and a target that holds
  // it would hold a channel that other CDMs' RDMA shares): as the responder for other hosts.
  if (amo::lock_acquire(lock, lock_owner, 0, amo::kDaemonLockWaitNs, amo::kDaemonLockWaitNs) == amo::LockResult::kTimeout)
    return cqe::kErrTransient;
  uint64_t old = 0;
  amo::Outcome o;
  uint64_t st = xmem::copy(false, t.pid(), word[0].va, &old, c.size, t.gone_status());
  if (!st) {
    o = amo::apply(c, old, p.operand1, p.operand2);
    if (o.store) st = xmem::copy(true, t.pid(), word[0].va, &o.new_value, c.size, t.gone_status());
  }
  amo::lock_release(lock, lock_owner);
  if (st || !c.fetching) return st;
  Extents local;
  if (ini.translate(p.local_qword1, p.local_qword2, p.local_addr, c.size, true, local))
    return ini.alive() ? cqe::kErrLocalProtection : kProxyDrop;
  return xmem::copy_pieces(true, ini.pid(), local, &o.fetched, kProxyDrop);
}

void post_events(MappedRegion& initiator, const RemotePost& p, uint64_t status) {
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

}  // namespace

uint64_t proxy_check(const RemotePost& p) {
  if (p.kind != kPut && p.kind != kGet && p.kind != kAmo) return cqe::kErrProtection;  // CQ writes need no proxy
  if (p.engine != kFma && p.engine != kBte) return cqe::kErrProtection;
  if (p.inline_length && (p.kind != kPut || p.inline_length != p.length)) return cqe::kErrProtection;
  if (p.kind == kAmo) {
    auto c = amo::decode(p.amo_cmd);
    if (!c || !amo::length_ok(*c, p.length) || (p.remote_addr & (c->size - 1))) return cqe::kErrProtection;
  }
  if (p.chain_id != 0 &&
      (p.chain_members == 0 || p.chain_members > kMaxChainMembers || p.chain_index >= kMaxChainMembers ||
       (p.chain_fail_index != kNoChainFailure &&
        (p.chain_fail_index >= kMaxChainMembers || p.chain_fail_status == cqe::kOk ||
         p.chain_fail_status >= cqe::kErrStatusLast))))
    return cqe::kErrProtection;
  return cqe::kOk;
}

uint64_t proxy_execute(const ProxyPost& pp, RegionDirectory& regions, std::vector<char>& bounce,
                       uint64_t lock_owner) {
  const RemotePost& p = pp.post;
  MappedRegion& ini = *pp.initiator;
  if (!ini.alive()) return kProxyDrop;
  // The domain is the initiator's, from its daemon-written header: a post cannot name
  // another protection domain's memory.
  const RegionHeader& h = ini.header();
  uint64_t st = cqe::kOk;
  auto target =
      regions.resolve(RegionKey{p.remote_nic, mdh::route_of(p.remote_qword1, p.remote_qword2), h.ptag, h.cookie}, st);
  if (!target) return st;
  uint32_t dst_cq = kNoCq;
  switch (p.kind) {
    case kPut:
      st = put(pp, *target, bounce, dst_cq);
      break;
    case kGet:
      st = get(pp, *target, bounce, dst_cq);
      break;
    default:
      st = amo_op(pp, *target, lock_owner, dst_cq);
      break;
  }
  if (st != cqe::kOk && st != kProxyDrop && !target->alive()) st = target->gone_status();
  if (st == cqe::kOk && (p.flags & kFlagRemoteEvent) && dst_cq != kNoCq) {
    CqRingView v = target->cq_view(dst_cq);
    const uint64_t src = p.engine == kBte ? cqe::kSrcRemoteDma : cqe::kSrcRemoteRequest;
    if (v.valid()) v.push(cqe::make(src, cqe::kTypePost, cqe::kOk, 0, 0, p.remote_event));
  }
  return st;
}

void ProxyCompleter::complete(const ProxyPost& pp, uint64_t status, BteCounters& ctr) {
  const RemotePost& p = pp.post;
  MappedRegion& ini = *pp.initiator;
  if (p.chain_id == 0) {
    if (status == kProxyDrop || !ini.alive()) {
      ctr.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (status != cqe::kOk) ctr.errors.fetch_add(1, std::memory_order_relaxed);
    return post_events(ini, p, status);
  }
  std::lock_guard<std::mutex> lk(mu_);
  const auto key = std::make_pair(ini.attach_id(), p.chain_id);
  auto it = chains_.find(key);
  if (it == chains_.end()) {
    if (chains_.size() >= kMaxChains)
      std::erase_if(chains_, [](const auto& c) { return !c.second.initiator->alive(); });
    if (chains_.size() >= kMaxChains) {
      // No room (chains abandoned by live CDMs): this member reports alone.
      if (ini.alive()) post_events(ini, p, cqe::kErrTransient);
      return;
    }
    Chain c;
    c.initiator = pp.initiator;
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
  if (status != cqe::kOk && status != kProxyDrop && p.chain_index < c.fail_index) {
    c.fail_index = p.chain_index;
    c.fail_status = status;
  }
  if (--c.remaining > 0) return;
  const uint64_t st = c.fail_index == kNoChainFailure ? cqe::kOk : c.fail_status;
  if (status == kProxyDrop || !c.initiator->alive()) {
    ctr.dropped.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (st != cqe::kOk) ctr.errors.fetch_add(1, std::memory_order_relaxed);
    post_events(*c.initiator, c.first, st);
  }
  chains_.erase(it);
}

}  // namespace nicemu::daemon
