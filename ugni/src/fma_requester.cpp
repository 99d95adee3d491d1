// FMA requester: GNI_PostFma for same-host targets. As on hardware the CPU drives the
// transfer: the target is validated against its registration table, the data moves by
// cross-memory attach (or memcpy within one process), and the completer below posts the
// local/global events and the target's remote event. Errors become error CQEs, never writes.
// AMOs run under the target's AMO lock (amo_lock.h) with the arithmetic of amo_alu.h.
#include <bit>
#include <cstring>

#include "amo_alu.h"
#include "amo_lock.h"
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

// The AMO opcode as stored, for the same reason.
uint32_t amo_command(const gni_post_descriptor_t* d) {
  uint32_t c;
  std::memcpy(&c, &d->amo_cmd, sizeof c);
  return c;
}

// Per-CDM counters (counters.h) of one post.
void count_post(ctr::CdmCounterBlock* b, int type, uint64_t length) {
  if (type == GNI_POST_AMO) return count(b, ctr::cdm::amo_posts);
  const bool get = type == GNI_POST_FMA_GET;
  count(b, get ? ctr::cdm::fma_get_posts : ctr::cdm::fma_put_posts);
  count(b, get ? ctr::cdm::fma_get_bytes : ctr::cdm::fma_put_bytes, length);
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

// The target side of an AMO: under the lock of the target word (shared by every initiator),
// read it, compute, write it back if it changed; fetching forms then store the old value
// in the registered local buffer. A READ_ONLY target is refused even when the operation
// would not change it (a failed compare-and-swap), as a write request.
uint64_t execute_amo(Nic& n, const Region& target, const gni_post_descriptor_t* d, uint32_t* dst_cq) {
  static_assert(std::endian::native == std::endian::little);  // a 4-byte operand is the low half
  const amo::Command c = *amo::decode(amo_command(d));       // checked when posted
  if (c.fetching && validate_access(*n.self, d->local_mem_hndl, d->local_addr, c.size, false, nullptr))
    return cqe::kErrLocalProtection;
  uint64_t st = validate_access(target, d->remote_mem_hndl, d->remote_addr, c.size, true, dst_cq);
  if (st) return st;
  abi::AmoLock* lock = amo_lock_for(target, d->remote_addr);
  if (!lock) return cqe::kErrMemAccess;  // a region without a lock table cannot serve AMOs
  // A holder that neither releases nor dies: not executed, the client may repost.
  if (amo_lock_acquire(lock) == AmoLockResult::kTimeout) return cqe::kErrTransient;
  uint64_t old = 0;
  amo::Outcome out;
  st = xmem_read(target.pid, d->remote_addr, &old, c.size);
  if (!st) {
    out = amo::apply(c, old, d->first_operand, d->second_operand);
    if (out.store) st = xmem_write(target.pid, d->remote_addr, &out.new_value, c.size);
  }
  amo_lock_release(lock);
  if (!st && c.fetching) std::memcpy(reinterpret_cast<void*>(d->local_addr), &out.fetched, c.size);
  return st;
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
    case GNI_POST_AMO:
      st = execute_amo(*n, target, d, dst_cq);
      break;
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
    case GNI_POST_AMO: {
      // §12.4/§13: a known opcode, length = operand size, target aligned to it.
      auto c = amo::decode(amo_command(d));
      if (!c || d->length != c->size) return GNI_RC_INVALID_PARAM;
      if (d->remote_addr & (c->size - 1)) return GNI_RC_ALIGNMENT_ERROR;
      break;
    }
    case GNI_POST_FMA_GET_W_FLAG:
    case GNI_POST_AMO_W_FLAG:
    case GNI_POST_CE:
      return GNI_RC_ILLEGAL_OP;  // not implemented (docs/compatibility.md says why)
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
  ep->nic->stats[GNI_STAT_FMA_LAUNCH_COUNT].fetch_add(1, std::memory_order_relaxed);
  count_post(ep->nic->counters, post_type(d), d->length);
  uint32_t dst_cq = abi::kNoCq;
  uint64_t st = execute(ep, d, &dst_cq);
  if (st == cqe::kOk && (d->cq_mode & GNI_CQMODE_REMOTE_EVENT) && dst_cq != abi::kNoCq)
    push_remote_event(*ep->peer, dst_cq, cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kOk, 0, 0, ep->remote_event));
  complete(ep, d, st, tid);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
