// BTE requester: GNI_PostRdma. The library checks what it can locally (binding, type,
// alignment, event modes, the local registration), then:
//  - same-host target, nothing of the CDM's BTE ring in flight: it runs the transfer itself
//    with one cross-memory copy (process_vm_writev/readv straight between the two
//    processes' buffers, as a CMA transport does), validated against the target's
//    registration table, and posts the events the BTE engine would (local/global with
//    the BTE source, the remote event as remote DMA, error completions for bad access).
//    The daemon's engine copies through a bounce buffer (two copies, plus a doorbell
//    wake-up), which halves bandwidth at best;
//  - otherwise it captures the post in a request and queues it in the CDM's submission
//    ring (nicemu/abi/bte_ring.h). The daemon's BTE engine validates the target, moves the
//    data and posts the completion events; the doorbell (an eventfd) is written only when
//    the engine sleeps.
// Waiting for an idle ring keeps the order of the CDM's posts: a post never overtakes one
// queued before it, and one run here is complete before GNI_PostRdma returns.
#include <unistd.h>

#include <cstring>

#include "fault_engine.h"
#include "internal.h"
#include "nicemu/abi/remote_ops.h"
#include "nicemu/common/params.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace cqe = nicemu::abi::cqe;

static_assert(GNI_CQMODE_LOCAL_EVENT == abi::kBteEventLocal && GNI_CQMODE_GLOBAL_EVENT == abi::kBteEventGlobal &&
              GNI_CQMODE_REMOTE_EVENT == abi::kBteEventRemote);
static_assert(GNI_CDM_MODE_BTE_SINGLE_CHANNEL == abi::kBteSingleChannelMode);

namespace {

int post_type(const gni_post_descriptor_t* d) {
  int t;
  std::memcpy(&t, &d->type, sizeof t);  // untrusted: a value outside the enum is refused
  return t;
}

// Maps the ring on the first RDMA post of the CDM (one control round trip, then never again).
bool open_queue(Nic* n) {
  BteQueue& q = n->bte;
  if (q.open.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lk(q.mu);
  if (q.open.load(std::memory_order_relaxed)) return true;
  abi::ctl::BteOpen req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kBteOpen);
  abi::ctl::BteOpenReply rep{};
  int fd = -1;
  if (!n->conn.call(req, rep, &fd) || rep.r.rc != GNI_RC_SUCCESS || fd < 0) {
    if (fd >= 0) close(fd);
    return false;
  }
  const uint32_t cap = rep.capacity;
  if (cap == 0 || (cap & (cap - 1)) != 0 || !n->self->in_heap(rep.ctl_offset, abi::bte_ring_bytes(cap))) {
    close(fd);
    return false;
  }
  q.view.ctl = reinterpret_cast<abi::BteRingCtl*>(n->self->base + rep.ctl_offset);
  q.view.slots = reinterpret_cast<abi::BteSlot*>(n->self->base + rep.ctl_offset + sizeof(abi::BteRingCtl));
  q.view.mask = cap - 1;
  q.doorbell = fd;
  q.open.store(true, std::memory_order_release);
  return true;
}

bool direct_enabled() {
  static const bool on = params::env_uint(params::param("rdma_direct")) != 0;
  return on;
}

// Whether every request this CDM queued on its ring has completed (bte_ring.h, `done`).
bool ring_idle(const Nic* n) {
  const BteQueue& q = n->bte;
  if (!q.open.load(std::memory_order_acquire)) return true;
  return q.view.ctl->done.load(std::memory_order_acquire) == q.view.ctl->tail.load(std::memory_order_acquire);
}

// The one-copy path. False if the target is not a process of this host we can reach
// (the daemon then executes the post). Completes the post, errors included, otherwise.
bool run_direct(Nic* n, Ep* ep, Cq* cq, const gni_post_descriptor_t* d, bool get, int32_t tid) {
  uint64_t st = cqe::kOk;
  if (!target_of(ep, d->remote_mem_hndl, st)) return false;  // unknown here: the engine knows the right error (or route)
  const Region& target = *ep->peer;
  if (target.xmem_refused) [[unlikely]] {
    count(n->counters, ctr::cdm::xmem_fallback_posts);  // the engine may reach it (Region::xmem_refused)
    return false;
  }
  const RdmaOp op = rdma_op(ep, d, get);
  uint32_t dst_cq = abi::kNoCq;
  st = rdma_execute_on(n, op, target, &dst_cq);
  rdma_post_events(op, target, cq, tid, st, dst_cq);
  return true;
}

}  // namespace

namespace nicemu::ugni {

RdmaOp rdma_op(const Ep* ep, const gni_post_descriptor_t* d, bool get) {
  RdmaOp op;
  op.get = get;
  copy_transfer(op, d);
  op.cq_mode = d->cq_mode;
  op.local_event = ep->local_event;
  op.remote_event = ep->remote_event;
  return op;
}

uint64_t rdma_execute_on(Nic* n, const RdmaOp& op, const Region& target, uint32_t* dst_cq) {
  abi::Extents local, remote;
  if (translate_access(*n->self, op.local_mem_hndl, op.local_addr, op.length, op.get, nullptr, local))
    return cqe::kErrLocalProtection;
  uint64_t st = translate_access(target, op.remote_mem_hndl, op.remote_addr, op.length, !op.get, dst_cq, remote);
  if (!st) st = op.get ? xmem_read_scatter(target.pid, remote, local) : xmem_write_gather(target.pid, remote, local);
  // The target may have died while we worked on its memory; a failure then is its death.
  if (!target.alive()) st = cqe::kErrPeerGone;
  return st;
}

void rdma_post_events(const RdmaOp& op, const Region& target, Cq* cq, int32_t tid, uint64_t st, uint32_t dst_cq) {
  if (st == cqe::kOk && (op.cq_mode & GNI_CQMODE_REMOTE_EVENT) && dst_cq != abi::kNoCq)
    push_remote_event(target, dst_cq, cqe::make(cqe::kSrcRemoteDma, cqe::kTypePost, cqe::kOk, 0, 0, op.remote_event));
  rdma_local_events(cq, op.cq_mode, op.local_event, tid, st);
}

void rdma_local_events(Cq* cq, uint16_t cq_mode, uint32_t local_event, int32_t tid, uint64_t st) {
  if (tid < 0 || !cq) return;
  if (cq_mode & GNI_CQMODE_LOCAL_EVENT)
    cq->ring.push(cqe::make(cqe::kSrcBte, cqe::kTypePost, st, cqe::kInfoLocal, uint64_t(tid), local_event));
  if (cq_mode & GNI_CQMODE_GLOBAL_EVENT)
    cq->ring.push(cqe::make(cqe::kSrcBte, cqe::kTypePost, st, cqe::kInfoGlobal, uint64_t(tid), local_event));
}

}  // namespace nicemu::ugni

extern "C" {

gni_return_t GNI_PostRdma(gni_ep_handle_t ep_hndl, gni_post_descriptor_t* d) {
  Ep* ep = posting_ep(ep_hndl, d);
  if (!ep) return GNI_RC_INVALID_PARAM;
  Nic* n = ep->nic;
  const int type = post_type(d);
  if (type != GNI_POST_RDMA_PUT && type != GNI_POST_RDMA_GET) return GNI_RC_INVALID_PARAM;
  const bool get = type == GNI_POST_RDMA_GET;
  // GNI_RDMAMODE_PHYS_ADDR (Cray's header: a physical local address, for kernel clients)
  // means nothing to a user-space post, whose addresses are virtual; Cray's user library
  // runs such posts (programs written for XC systems set it on large notified PUTs), and so
  // does this one: the bit is ignored, as documented in docs/compatibility.md.
  if (get) {
    // §12.4: GET remote address and length 4-byte aligned; on Gemini the local address too.
    if (d->length == 0) return GNI_RC_INVALID_PARAM;
    if ((d->remote_addr | d->length) & 3) return GNI_RC_ALIGNMENT_ERROR;
    if (n->device_type == GNI_DEVICE_GEMINI && (d->local_addr & 3)) return GNI_RC_ALIGNMENT_ERROR;
  }
  Cq* cq;
  if (!post_cq(ep, d, cq)) return GNI_RC_INVALID_PARAM;
  if (gni_return_t rc = check_events(ep, cq, d); rc != GNI_RC_SUCCESS) return rc;
  // The local side must be registered with this NIC and cover the transfer (§10.3); a GET
  // writes into it, so it must not be read-only.
  switch (validate_access(*n->self, d->local_mem_hndl, d->local_addr, d->length, get, nullptr)) {
    case cqe::kOk:
      break;
    case cqe::kErrReadOnly:
      return GNI_RC_PERMISSION_ERROR;
    default:
      return GNI_RC_INVALID_PARAM;
  }
  // §12.4: a PUT into a region its handle marks read-only. (The target checks its own table
  // too: a handle that lies about the flag gets an error completion, never a write.)
  if (!get) {
    auto f = abi::mdh::decode(d->remote_mem_hndl.qword1, d->remote_mem_hndl.qword2);
    if (f && (f->flags & abi::mdh::kFlagReadOnly)) return GNI_RC_PERMISSION_ERROR;
  }
  int32_t tid;
  if (!start_post(n, d, tid)) return GNI_RC_ERROR_RESOURCE;
  if (n->nic_down.load(std::memory_order_relaxed)) {
    // Nobody will execute it: complete it here, as an error, like every post after NIC down.
    rdma_local_events(cq, d->cq_mode, ep->local_event, tid, cqe::kErrNicDown);
    return GNI_RC_SUCCESS;
  }
  // A target on another host: our daemon carries it over the fabric (remote_post.cpp).
  if (posts_through_daemon(ep)) [[unlikely]] {
    count(n->counters, ctr::cdm::rdma_posts);
    count(n->counters, ctr::cdm::rdma_bytes, d->length);
    return post_remote(ep, cq, d, get ? abi::remote::kGet : abi::remote::kPut, abi::remote::kBte, tid);
  }
  // Injection and reordering decide first: a post may be failed (its error events are in
  // the CQ) or held by the reorder engine, which runs it later with the one-copy transfer.
  if (fault_path(n) && fault_post_rdma(ep, cq, d, tid, ring_idle(n))) [[unlikely]]
    return GNI_RC_SUCCESS;
  if (direct_enabled() && ring_idle(n) && run_direct(n, ep, cq, d, get, tid)) {
    count(n->counters, ctr::cdm::rdma_posts);
    count(n->counters, ctr::cdm::rdma_bytes, d->length);
    return GNI_RC_SUCCESS;
  }
  if (!open_queue(n)) {
    release_tid(n, tid);
    return GNI_RC_ERROR_RESOURCE;
  }
  if (ep->bte_id == 0) ep->bte_id = n->bte.next_ep_id.fetch_add(1, std::memory_order_relaxed);
  abi::BteRequest r{};
  r.op = get ? abi::kBteGet : abi::kBtePut;
  r.cq_mode = d->cq_mode;
  r.rdma_mode = d->rdma_mode;
  r.dlvr_mode = d->dlvr_mode;
  r.src_cq = cq ? cq->slot : abi::kNoCq;
  r.tid = tid < 0 ? abi::kBteNoTid : static_cast<uint32_t>(tid);
  r.local_event = ep->local_event;
  r.remote_event = ep->remote_event;
  r.ep_id = ep->bte_id;
  copy_transfer_to_daemon(r, ep, d);
  n->to_daemon(tid, cq, ep->local_event, true);  // before the daemon can see it
  switch (n->bte.view.push(r)) {
    case abi::BteRingView::Push::kFull:
      n->to_daemon(tid, cq, ep->local_event, true, false);
      release_tid(n, tid);
      return GNI_RC_ERROR_RESOURCE;  // §12.4: queue full, the client retries later
    case abi::BteRingView::Push::kRing: {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t k = ::write(n->bte.doorbell, &one, sizeof one);
      break;
    }
    case abi::BteRingView::Push::kOk:
      break;
  }
  count(n->counters, ctr::cdm::rdma_posts);
  count(n->counters, ctr::cdm::rdma_bytes, d->length);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
