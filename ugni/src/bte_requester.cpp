// BTE requester: GNI_PostRdma. RDMA is the NIC's offload engine, so unlike FMA the library
// does not move the data: it checks what it can locally (binding, type, alignment, event
// modes, the local registration), captures the post in a request and queues it in the
// CDM's submission ring (nicemu/abi/bte_ring.h), then returns. The daemon's BTE engine
// validates the target, moves the data and posts the completion events; the doorbell
// (an eventfd) is written only when the engine sleeps.
#include <unistd.h>

#include <cstring>

#include "fault_engine.h"
#include "internal.h"

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

void release_tid(Nic* n, int32_t tid) {
  if (tid < 0) return;
  std::lock_guard<std::mutex> lk(n->inflight_mu);
  n->inflight[static_cast<size_t>(tid)].desc = nullptr;
  n->free_tids.push_back(static_cast<uint16_t>(tid));
}

}  // namespace

extern "C" {

gni_return_t GNI_PostRdma(gni_ep_handle_t ep_hndl, gni_post_descriptor_t* d) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !d || !ep->bound) return GNI_RC_INVALID_PARAM;
  Nic* n = ep->nic;
  const int type = post_type(d);
  if (type != GNI_POST_RDMA_PUT && type != GNI_POST_RDMA_GET) return GNI_RC_INVALID_PARAM;
  const bool get = type == GNI_POST_RDMA_GET;
  if (d->rdma_mode & GNI_RDMAMODE_PHYS_ADDR) return GNI_RC_INVALID_PARAM;  // kernel clients only
  if (get) {
    // §12.4: GET remote address and length 4-byte aligned; on Gemini the local address too.
    if (d->length == 0) return GNI_RC_INVALID_PARAM;
    if ((d->remote_addr | d->length) & 3) return GNI_RC_ALIGNMENT_ERROR;
    if (n->device_type == GNI_DEVICE_GEMINI && (d->local_addr & 3)) return GNI_RC_ALIGNMENT_ERROR;
  }
  const uint16_t local = d->cq_mode & (GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_GLOBAL_EVENT);
  if (local == GNI_CQMODE_DUAL_EVENTS && !(n->cdm->modes & GNI_CDM_MODE_DUAL_EVENTS)) return GNI_RC_INVALID_PARAM;
  // §12.2: the descriptor's src_cq_hndl, if set, takes this post's local events.
  Cq* cq = ep->src_cq;
  if (d->src_cq_hndl) {
    cq = as_cq(d->src_cq_hndl);
    if (!cq || cq->nic != n) return GNI_RC_INVALID_PARAM;
  }
  if (local && !cq) return GNI_RC_INVALID_PARAM;
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
  if (!open_queue(n)) return GNI_RC_ERROR_RESOURCE;
  if (ep->bte_id == 0) ep->bte_id = n->bte.next_ep_id.fetch_add(1, std::memory_order_relaxed);

  int32_t tid = -1;
  if (local) {
    tid = n->alloc_tid(d, local == GNI_CQMODE_DUAL_EVENTS ? 2 : 1);
    if (tid < 0) return GNI_RC_ERROR_RESOURCE;
  }
  d->status = 0;
  d->cq_mode_complete = 0;
  if (n->nic_down.load(std::memory_order_relaxed)) {
    // Nobody will execute it: complete it here, as an error, like every post after NIC down.
    if (d->cq_mode & GNI_CQMODE_LOCAL_EVENT)
      cq->ring.push(cqe::make(cqe::kSrcBte, cqe::kTypePost, cqe::kErrNicDown, cqe::kInfoLocal, uint64_t(tid),
                              ep->local_event));
    if (d->cq_mode & GNI_CQMODE_GLOBAL_EVENT)
      cq->ring.push(cqe::make(cqe::kSrcBte, cqe::kTypePost, cqe::kErrNicDown, cqe::kInfoGlobal, uint64_t(tid),
                              ep->local_event));
    return GNI_RC_SUCCESS;
  }
  if (fault_path(n) && fault_fail_rdma(ep, cq, d, tid)) [[unlikely]]
    return GNI_RC_SUCCESS;  // failed by injection: its error events are in the CQ
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
  r.remote_nic = ep->remote_addr;
  r.remote_inst = ep->remote_id;
  r.local_addr = d->local_addr;
  r.local_qword1 = d->local_mem_hndl.qword1;
  r.local_qword2 = d->local_mem_hndl.qword2;
  r.remote_addr = d->remote_addr;
  r.remote_qword1 = d->remote_mem_hndl.qword1;
  r.remote_qword2 = d->remote_mem_hndl.qword2;
  r.length = d->length;
  switch (n->bte.view.push(r)) {
    case abi::BteRingView::Push::kFull:
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
