// FMA requester: GNI_PostFma for same-host targets. As on hardware the CPU drives the
// transfer: the target is validated against its registration table, the data moves by
// cross-memory attach (or memcpy within one process), and the completer below posts the
// local/global events and the target's remote event. Errors become error CQEs, never writes.
#include <cstring>

#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace cqe = nicemu::abi::cqe;

namespace {

// The post type as the integer the caller stored: a descriptor is untrusted input, and a
// value outside the enum must be refused, not loaded as an enum.
int post_type(const gni_post_descriptor_t* d) {
  int t;
  std::memcpy(&t, &d->type, sizeof t);
  return t;
}

// Completer: the events the descriptor asked for, with the transaction's status.
void complete(Ep* ep, gni_post_descriptor_t* d, uint64_t status, int32_t tid) {
  Cq* cq = ep->src_cq;
  if (!cq || tid < 0) return;
  if (d->cq_mode & GNI_CQMODE_LOCAL_EVENT)
    cq->ring.push(cqe::make(cqe::kSrcLocalRequest, cqe::kTypePost, status, cqe::kInfoLocal,
                            static_cast<uint64_t>(tid), ep->local_event));
  if (d->cq_mode & GNI_CQMODE_GLOBAL_EVENT)
    cq->ring.push(cqe::make(cqe::kSrcLocalResponse, cqe::kTypePost, status, cqe::kInfoGlobal,
                            static_cast<uint64_t>(tid), ep->local_event));
}

// The target side of one transaction, executed by the initiator on the target's behalf.
uint64_t execute(Ep* ep, gni_post_descriptor_t* d, uint32_t* dst_cq) {
  Nic* n = ep->nic;
  if (n->nic_down.load(std::memory_order_relaxed)) return cqe::kErrNicDown;
  uint64_t st = cqe::kOk;
  if (!ep->peer || !ep->peer->alive()) {
    ep->peer = n->resolve(ep->remote_addr, ep->remote_id, st);
    if (!ep->peer) return st;
  }
  const Region& target = *ep->peer;
  switch (post_type(d)) {
    case GNI_POST_FMA_PUT:
    case GNI_POST_FMA_PUT_W_SYNCFLAG: {
      st = validate_access(target, d->remote_mem_hndl, d->remote_addr, d->length, true, dst_cq);
      if (st) break;
      if (post_type(d) == GNI_POST_FMA_PUT_W_SYNCFLAG) {
        st = validate_access(target, d->remote_mem_hndl, d->sync_flag_addr, sizeof(uint64_t), true, nullptr);
        if (st) break;
      }
      // FMA PUT sources need not be registered (clients pass unregistered buffers).
      st = xmem_write(target.pid, d->remote_addr, reinterpret_cast<const void*>(d->local_addr), d->length);
      if (!st && post_type(d) == GNI_POST_FMA_PUT_W_SYNCFLAG)
        st = xmem_write(target.pid, d->sync_flag_addr, &d->sync_flag_value, sizeof(uint64_t));
      break;
    }
    case GNI_POST_FMA_GET: {
      if (validate_access(*n->self, d->local_mem_hndl, d->local_addr, d->length, false, nullptr))
        return cqe::kErrLocalProtection;
      st = validate_access(target, d->remote_mem_hndl, d->remote_addr, d->length, false, dst_cq);
      if (!st) st = xmem_read(target.pid, d->remote_addr, reinterpret_cast<void*>(d->local_addr), d->length);
      break;
    }
    default:
      return cqe::kErrProtection;
  }
  // The target may have died while we worked on its memory; a failure then is its death.
  if (!target.alive()) st = cqe::kErrPeerGone;
  return st;
}

}  // namespace

extern "C" {

gni_return_t GNI_PostFma(gni_ep_handle_t ep_hndl, gni_post_descriptor_t* d) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !d) return GNI_RC_INVALID_PARAM;
  if (!ep->bound) return GNI_RC_INVALID_PARAM;
  switch (post_type(d)) {
    case GNI_POST_FMA_PUT:
    case GNI_POST_FMA_PUT_W_SYNCFLAG:
      break;
    case GNI_POST_FMA_GET:
      if (d->length == 0) return GNI_RC_INVALID_PARAM;
      if ((d->remote_addr | d->length) & 3) return GNI_RC_ALIGNMENT_ERROR;
      if (ep->nic->device_type == GNI_DEVICE_GEMINI && (d->local_addr & 3)) return GNI_RC_ALIGNMENT_ERROR;
      break;
    case GNI_POST_AMO:
    case GNI_POST_FMA_GET_W_FLAG:
    case GNI_POST_AMO_W_FLAG:
    case GNI_POST_CE:
      return GNI_RC_ILLEGAL_OP;  // not implemented yet (docs/compatibility.md)
    default:
      return GNI_RC_INVALID_PARAM;
  }
  if (post_type(d) == GNI_POST_FMA_PUT_W_SYNCFLAG && (d->sync_flag_addr & 7)) return GNI_RC_ALIGNMENT_ERROR;
  const uint16_t local = d->cq_mode & (GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_GLOBAL_EVENT);
  if (local == GNI_CQMODE_DUAL_EVENTS && !(ep->nic->cdm->modes & GNI_CDM_MODE_DUAL_EVENTS))
    return GNI_RC_INVALID_PARAM;
  if (local && !ep->src_cq) return GNI_RC_INVALID_PARAM;

  int32_t tid = -1;
  if (local) {
    tid = ep->nic->alloc_tid(d, local == GNI_CQMODE_DUAL_EVENTS ? 2 : 1);
    if (tid < 0) return GNI_RC_ERROR_RESOURCE;
  }
  d->status = 0;
  d->cq_mode_complete = 0;
  uint32_t dst_cq = abi::kNoCq;
  uint64_t st = execute(ep, d, &dst_cq);
  if (st == cqe::kOk && (d->cq_mode & GNI_CQMODE_REMOTE_EVENT) && dst_cq != abi::kNoCq)
    push_remote_event(*ep->peer, dst_cq, cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kOk, 0, 0, ep->remote_event));
  complete(ep, d, st, tid);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
