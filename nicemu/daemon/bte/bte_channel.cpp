#include "nicemu/daemon/bte/bte_channel.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/amo/amo_lock.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace cqe = nicemu::abi::cqe;

namespace {
// Internal status: the initiator is gone, so there is nobody to tell; the request is dropped.
constexpr uint64_t kDrop = 0x100;
}  // namespace

BteShared::BteShared(RegionDirectory& r, uint64_t chunk)
    : regions(r), chunk_bytes(chunk), lock_owner(amo::lock_self(getpid())) {}

BteSource::~BteSource() {
  if (doorbell >= 0) ::close(doorbell);
}

// A transfer in progress. Its owner (the channel executing the request) and any helpers
// claim chunks with `next`; the first failure stops everybody.
struct BteTransfer {
  const BteRequest* req = nullptr;
  MappedRegion* initiator = nullptr;
  MappedRegion* target = nullptr;
  BteChannel* owner = nullptr;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> status{0};
  uint32_t helpers = 0;  // under BteShared::mu

  bool helpable() const {
    return status.load(std::memory_order_relaxed) == 0 && next.load(std::memory_order_relaxed) < req->length;
  }
  void fail(uint64_t st) {
    uint64_t zero = 0;
    status.compare_exchange_strong(zero, st);
    next.store(req->length, std::memory_order_relaxed);
  }
};

namespace {

// One chunk of a transfer: both sides still there and still registered, then read the
// source into the bounce buffer and write it out. Checking before every chunk bounds what
// a dying or deregistering process can see happen: at most the chunk in flight. A side
// registered in segments is addressed by offset; its chunk may be several pieces.
uint64_t copy_chunk(const BteTransfer& t, uint64_t off, uint64_t n, char* bounce) {
  const BteRequest& q = *t.req;
  const bool put = q.op == kBtePut;
  if (!t.initiator->alive()) return kDrop;
  if (!t.target->alive()) return t.target->gone_status();
  Extents local, remote;
  if (t.initiator->translate(q.local_qword1, q.local_qword2, q.local_addr + off, n, !put, local))
    return t.initiator->alive() ? cqe::kErrLocalProtection : kDrop;
  if (uint64_t st = t.target->translate(q.remote_qword1, q.remote_qword2, q.remote_addr + off, n, put, remote))
    return t.target->alive() ? st : t.target->gone_status();
  const MappedRegion& src = put ? *t.initiator : *t.target;
  const MappedRegion& dst = put ? *t.target : *t.initiator;
  const Extents& src_pieces = put ? local : remote;
  const Extents& dst_pieces = put ? remote : local;
  const uint64_t src_gone = put ? kDrop : t.target->gone_status();
  const uint64_t dst_gone = put ? t.target->gone_status() : kDrop;
  if (uint64_t st = xmem::copy_pieces(false, src.pid(), src_pieces, bounce, src_gone)) return st;
  // The destination may have died while we read: check again right before writing.
  if (!dst.alive()) return dst_gone;
  return xmem::copy_pieces(true, dst.pid(), dst_pieces, bounce, dst_gone);
}

// Claims and copies chunks until none is left, the transfer failed, or (for a helper) its
// own channel got work.
void run_chunks(BteTransfer& t, char* bounce, uint64_t chunk, BteCounters& ctr, const std::atomic<bool>* stop_if) {
  const uint64_t len = t.req->length;
  for (;;) {
    if (stop_if && stop_if->load(std::memory_order_relaxed)) return;
    uint64_t off = t.next.fetch_add(chunk, std::memory_order_relaxed);
    if (off >= len) return;
    uint64_t n = std::min(chunk, len - off);
    if (uint64_t st = copy_chunk(t, off, n, bounce)) {
      t.fail(st);
      return;
    }
    ctr.chunks.fetch_add(1, std::memory_order_relaxed);
    if (stop_if) ctr.helped_chunks.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

BteChannel::BteChannel(BteShared& shared, uint32_t index)
    : sh_(shared), index_(index), bounce_(shared.chunk_bytes) {}

BteChannel::~BteChannel() { join(); }

void BteChannel::start() { thread_ = std::thread([this] { run(); }); }

void BteChannel::join() {
  if (thread_.joinable()) thread_.join();
}

void BteChannel::run_inline(BteJob& job) {
  sh_.counters.inline_jobs.fetch_add(1, std::memory_order_relaxed);
  execute(job);
  std::lock_guard<std::mutex> lk(sh_.mu);
  if (sh_.finished) sh_.finished(job);
}

void BteChannel::enqueue(BteJob job) {
  queue_.push_back(std::move(job));
  has_work_.store(true, std::memory_order_relaxed);
}

BteTransfer* BteChannel::helpable() const {
  for (BteTransfer* t : sh_.help)
    if (t->owner != this && t->helpable()) return t;
  return nullptr;
}

bool BteChannel::should_wake() const { return sh_.stopping || !queue_.empty() || helpable(); }

void BteChannel::run() {
  std::unique_lock<std::mutex> lk(sh_.mu);
  for (;;) {
    cv_.wait(lk, [this] { return should_wake(); });
    if (!queue_.empty()) {
      BteJob job = std::move(queue_.front());
      queue_.pop_front();
      has_work_.store(!queue_.empty(), std::memory_order_relaxed);
      busy_ = true;
      lk.unlock();
      execute(job);
      lk.lock();
      busy_ = false;
      if (sh_.finished) sh_.finished(job);
      continue;
    }
    if (BteTransfer* t = helpable()) {
      ++t->helpers;
      lk.unlock();
      run_chunks(*t, bounce_.data(), sh_.chunk_bytes, sh_.counters, &has_work_);
      lk.lock();
      if (--t->helpers == 0) t->owner->wake();
      continue;
    }
    if (sh_.stopping) return;
  }
}

// Validates the request against both registration tables, moves the data, completes.
void BteChannel::execute(BteJob& job) {
  if (job.proxy) return execute_proxy(*job.proxy);
  const BteRequest& q = job.req;
  MappedRegion& initiator = *job.source->region;
  sh_.counters.requests.fetch_add(1, std::memory_order_relaxed);
  if (!initiator.alive()) {
    sh_.counters.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t st = cqe::kOk;
  uint32_t dst_cq = kNoCq;
  std::shared_ptr<MappedRegion> target;
  if (q.op != kBtePut && q.op != kBteGet) {
    st = cqe::kErrProtection;  // not a request libugni writes: a corrupted ring
  } else {
    // The domain is the initiator's, from the daemon-written header: a request cannot
    // name another protection domain's memory.
    const RegionHeader& h = initiator.header();
    target = sh_.regions.resolve(RegionKey{q.remote_nic, mdh::route_of(q.remote_qword1, q.remote_qword2), h.ptag, h.cookie}, st);
  }
  if (target) {
    const bool put = q.op == kBtePut;
    if (initiator.check_access(q.local_qword1, q.local_qword2, q.local_addr, q.length, !put, nullptr)) {
      st = cqe::kErrLocalProtection;
    } else {
      st = target->check_access(q.remote_qword1, q.remote_qword2, q.remote_addr, q.length, put, &dst_cq);
      if (st && !target->alive()) st = target->gone_status();
    }
    if (st == cqe::kOk && q.length > 0) st = transfer(job, initiator, *target);
  }
  complete(job, initiator, target.get(), st, dst_cq);
}

void BteChannel::execute_proxy(const ProxyPost& p) {
  sh_.counters.proxied.fetch_add(1, std::memory_order_relaxed);
  const uint64_t st = proxy_execute(p, sh_.regions, bounce_, sh_.lock_owner);
  sh_.proxies.complete(p, st, sh_.counters);
}

uint64_t BteChannel::transfer(BteJob& job, MappedRegion& initiator, MappedRegion& target) {
  BteTransfer t;
  t.req = &job.req;
  t.initiator = &initiator;
  t.target = &target;
  t.owner = this;
  // Worth sharing only if there are chunks for others and the CDM did not ask for a
  // single channel (GNI_CDM_MODE_BTE_SINGLE_CHANNEL).
  const bool share = sh_.channels.size() > 1 && job.req.length > 2 * sh_.chunk_bytes &&
                     !(initiator.header().modes & kBteSingleChannelMode);
  if (share) {
    std::lock_guard<std::mutex> lk(sh_.mu);
    sh_.help.push_back(&t);
    for (auto& c : sh_.channels)
      if (c.get() != this) c->wake();
  }
  run_chunks(t, bounce_.data(), sh_.chunk_bytes, sh_.counters, nullptr);
  if (share) {
    std::unique_lock<std::mutex> lk(sh_.mu);
    std::erase(sh_.help, &t);
    cv_.wait(lk, [&] { return t.helpers == 0; });  // helpers still copy chunks of `t`
  }
  uint64_t st = t.status.load();
  if (st == cqe::kOk) sh_.counters.bytes.fetch_add(job.req.length, std::memory_order_relaxed);
  return st;
}

// Completer: the remote event into the target's CQ (its registration's dst CQ, from the
// read-only table), then the local events the descriptor asked for, with the status.
void BteChannel::complete(const BteJob& job, MappedRegion& initiator, MappedRegion* target, uint64_t status,
                          uint32_t dst_cq) {
  const BteRequest& q = job.req;
  if (status == kDrop || !initiator.alive()) {
    sh_.counters.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (status != cqe::kOk) sh_.counters.errors.fetch_add(1, std::memory_order_relaxed);
  if (status == cqe::kOk && target && (q.cq_mode & kBteEventRemote) && dst_cq != kNoCq) {
    CqRingView v = target->cq_view(dst_cq);
    if (v.valid()) v.push(cqe::make(cqe::kSrcRemoteDma, cqe::kTypePost, cqe::kOk, 0, 0, q.remote_event));
  }
  if (q.tid > cqe::kTidMask) return;  // no local event requested (kBteNoTid)
  CqRingView v = initiator.cq_view(q.src_cq);
  if (!v.valid()) return;  // the CQ was destroyed meanwhile
  if (q.cq_mode & kBteEventLocal)
    v.push(cqe::make(cqe::kSrcBte, cqe::kTypePost, status, cqe::kInfoLocal, q.tid, q.local_event));
  if (q.cq_mode & kBteEventGlobal)
    v.push(cqe::make(cqe::kSrcBte, cqe::kTypePost, status, cqe::kInfoGlobal, q.tid, q.local_event));
}

}  // namespace nicemu::daemon
