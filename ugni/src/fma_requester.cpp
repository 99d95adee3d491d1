// FMA requester: GNI_PostFma for same-host targets. As on hardware the CPU drives the
// transfer: the target is validated against its registration table, the data moves by
// cross-memory attach (or memcpy within one process), and the completer below posts the
// local/global events and the target's remote event. Errors become error CQEs, never writes.
// AMOs run under the target's AMO lock (amo_lock.h) with the arithmetic of amo_alu.h.
// Addresses through a multi-segment registration are offsets, translated into the owner's
// pieces by the target's segment table (region_access.h).
#include "fma_requester.h"

#include <bit>
#include <cstring>

#include "nicemu/amo/amo_alu.h"
#include "amo_lock.h"
#include "fault_engine.h"
#include "nicemu/abi/remote_ops.h"

namespace nicemu::ugni {

namespace cqe = nicemu::abi::cqe;

namespace {

// Gen-2 (Aries) AMO opcodes carry bit 0x40 (§13); a Gemini NIC has only the gen-1 set.
constexpr uint32_t kAmoGen2Bit = 0x40;

// The target side of an AMO: under the lock of the target word (shared by every initiator),
// read it, compute, write it back if it changed; fetching forms then store the old value
// in the registered local buffer. A READ_ONLY target is refused even when the operation
// would not change it (a failed compare-and-swap), as a write request.
uint64_t execute_amo(Nic& n, const Region& target, const FmaOp& op, uint32_t* dst_cq) {
  static_assert(std::endian::native == std::endian::little);  // a 4-byte operand is the low half
  const amo::Command c = *amo::decode(op.amo_cmd);            // checked when posted
  abi::Extents local, remote;
  if (c.fetching && translate_access(*n.self, op.local_mem_hndl, op.local_addr, c.size, false, nullptr, local))
    return cqe::kErrLocalProtection;
  uint64_t st = translate_access(target, op.remote_mem_hndl, op.remote_addr, c.size, true, dst_cq, remote);
  if (st) return st;
  // An operand split over two segments has no single word to lock and update.
  if (remote.size() != 1) return cqe::kErrBounds;
  const uint64_t va = remote[0].va;
  abi::AmoLock* lock = amo_lock_for(target, va);
  if (!lock) return cqe::kErrMemAccess;  // a region without a lock table cannot serve AMOs
  // A holder that neither releases nor dies: not executed, the client may repost.
  if (amo_lock_acquire(lock) == AmoLockResult::kTimeout) return cqe::kErrTransient;
  uint64_t old = 0;
  amo::Outcome out;
  st = xmem_read(target.pid, va, &old, c.size);
  if (!st) {
    out = amo::apply(c, old, op.first_operand, op.second_operand);
    if (out.store) st = xmem_write(target.pid, va, &out.new_value, c.size);
  }
  amo_lock_release(lock);
  if (!st && c.fetching) scatter_local(local, &out.fetched);
  return st;
}

uint64_t execute_put(const Region& target, const FmaOp& op, uint32_t* dst_cq) {
  abi::Extents remote, flag;
  uint64_t st = translate_access(target, op.remote_mem_hndl, op.remote_addr, op.length, true, dst_cq, remote);
  if (st) return st;
  const bool sync = op.type == GNI_POST_FMA_PUT_W_SYNCFLAG;
  if (sync) {
    st = translate_access(target, op.remote_mem_hndl, op.sync_flag_addr, sizeof(uint64_t), true, nullptr, flag);
    if (st) return st;
  }
  // FMA PUT sources need not be registered (clients pass unregistered buffers), and are
  // read by VA even when the target is a multi-segment registration.
  st = xmem_write_pieces(target.pid, remote, reinterpret_cast<const void*>(op.local_addr));
  if (!st && sync) st = xmem_write_pieces(target.pid, flag, &op.sync_flag_value);
  return st;
}

uint64_t execute_get(Nic& n, const Region& target, const FmaOp& op, uint32_t* dst_cq) {
  abi::Extents local, remote;
  if (translate_access(*n.self, op.local_mem_hndl, op.local_addr, op.length, false, nullptr, local))
    return cqe::kErrLocalProtection;
  uint64_t st = translate_access(target, op.remote_mem_hndl, op.remote_addr, op.length, false, dst_cq, remote);
  if (!st) st = xmem_read_scatter(target.pid, remote, local);
  return st;
}

// Per-CDM counters (counters.h) of one post.
void count_post(ctr::CdmCounterBlock* b, int type, uint64_t length) {
  if (type == GNI_POST_AMO) return count(b, ctr::cdm::amo_posts);
  const bool get = type == GNI_POST_FMA_GET;
  count(b, get ? ctr::cdm::fma_get_posts : ctr::cdm::fma_put_posts);
  count(b, get ? ctr::cdm::fma_get_bytes : ctr::cdm::fma_put_bytes, length);
}

}  // namespace

int post_type(const gni_post_descriptor_t* d) {
  int t;
  std::memcpy(&t, &d->type, sizeof t);
  return t;
}

uint32_t amo_command(const gni_fma_cmd_type_t& cmd) {
  uint32_t c;
  static_assert(sizeof c == sizeof cmd);
  std::memcpy(&c, &cmd, sizeof c);
  return c;
}

FmaOp fma_op_of(Ep* ep, const gni_post_descriptor_t* d) {
  FmaOp op;
  op.type = post_type(d);
  op.ep = ep;
  copy_transfer(op, d);
  op.amo_cmd = amo_command(d->amo_cmd);
  op.first_operand = d->first_operand;
  op.second_operand = d->second_operand;
  op.sync_flag_addr = d->sync_flag_addr;
  op.sync_flag_value = d->sync_flag_value;
  return op;
}

gni_return_t check_fma(const FmaOp& op) {
  const bool gemini = op.ep->nic->device_type == GNI_DEVICE_GEMINI;
  switch (op.type) {
    case GNI_POST_FMA_PUT:
      return GNI_RC_SUCCESS;
    case GNI_POST_FMA_PUT_W_SYNCFLAG:
      return (op.sync_flag_addr & 7) ? GNI_RC_ALIGNMENT_ERROR : GNI_RC_SUCCESS;
    case GNI_POST_FMA_GET:
      if (op.length == 0) return GNI_RC_INVALID_PARAM;
      if ((op.remote_addr | op.length) & 3) return GNI_RC_ALIGNMENT_ERROR;
      if (gemini && (op.local_addr & 3)) return GNI_RC_ALIGNMENT_ERROR;
      return GNI_RC_SUCCESS;
    case GNI_POST_AMO: {
      // §12.4/§13: a known opcode of this device, length = operand size (or both operands'
      // for AX/CSWAP, amo_alu.h), target aligned.
      auto c = amo::decode(op.amo_cmd);
      if (!c || !amo::length_ok(*c, op.length)) return GNI_RC_INVALID_PARAM;
      if (gemini && (op.amo_cmd & kAmoGen2Bit)) return GNI_RC_INVALID_PARAM;
      if (op.remote_addr & (c->size - 1)) return GNI_RC_ALIGNMENT_ERROR;
      return GNI_RC_SUCCESS;
    }
    default:
      return GNI_RC_INVALID_PARAM;
  }
}

uint64_t execute_fma(const FmaOp& op, uint32_t* dst_cq) {
  Ep* ep = op.ep;
  Nic* n = ep->nic;
  if (n->nic_down.load(std::memory_order_relaxed)) return cqe::kErrNicDown;
  uint64_t st = cqe::kOk;
  if (!target_of(ep, op.remote_mem_hndl, st)) return st;
  return execute_fma_on(op, *ep->peer, dst_cq);
}

uint64_t execute_fma_on(const FmaOp& op, const Region& target, uint32_t* dst_cq) {
  Nic* n = op.ep->nic;
  uint64_t st = cqe::kOk;
  switch (op.type) {
    case GNI_POST_FMA_PUT:
    case GNI_POST_FMA_PUT_W_SYNCFLAG:
      st = execute_put(target, op, dst_cq);
      break;
    case GNI_POST_FMA_GET:
      st = execute_get(*n, target, op, dst_cq);
      if (st == cqe::kErrLocalProtection) return st;
      break;
    case GNI_POST_AMO:
      st = execute_amo(*n, target, op, dst_cq);
      if (st == cqe::kErrLocalProtection) return st;
      break;
    default:
      return cqe::kErrProtection;
  }
  // The target may have died while we worked on its memory; a failure then is its death.
  if (!target.alive()) st = cqe::kErrPeerGone;
  return st;
}

void push_fma_remote_event(const FmaOp& op, uint32_t dst_cq) {
  if (dst_cq == abi::kNoCq || !op.ep->peer) return;
  push_remote_event(*op.ep->peer, dst_cq,
                    cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kOk, 0, 0, op.ep->remote_event));
}

void complete_fma(Cq* cq, uint16_t cq_mode, uint32_t local_event, uint64_t status, int32_t tid) {
  if (!cq || tid < 0) return;
  if (cq_mode & GNI_CQMODE_LOCAL_EVENT)
    cq->ring.push(cqe::make(cqe::kSrcLocalRequest, cqe::kTypePost, status, cqe::kInfoLocal,
                            static_cast<uint64_t>(tid), local_event));
  if (cq_mode & GNI_CQMODE_GLOBAL_EVENT)
    cq->ring.push(cqe::make(cqe::kSrcLocalResponse, cqe::kTypePost, status, cqe::kInfoGlobal,
                            static_cast<uint64_t>(tid), local_event));
}

void complete_fma(Cq* cq, const gni_post_descriptor_t* d, uint32_t local_event, uint64_t status, int32_t tid) {
  complete_fma(cq, d->cq_mode, local_event, status, tid);
}

}  // namespace nicemu::ugni

using namespace nicemu;
using namespace nicemu::ugni;

extern "C" {

gni_return_t GNI_PostFma(gni_ep_handle_t ep_hndl, gni_post_descriptor_t* d) {
  Ep* ep = posting_ep(ep_hndl, d);
  if (!ep) return GNI_RC_INVALID_PARAM;
  switch (post_type(d)) {
    case GNI_POST_CE:
      return post_ce(ep, d);  // ce.cpp: the operand goes to the daemons' collective engine
    case GNI_POST_FMA_GET_W_FLAG:
    case GNI_POST_AMO_W_FLAG:
      return GNI_RC_ILLEGAL_OP;  // not implemented (docs/compatibility.md says why)
    default:
      break;
  }
  const FmaOp op = fma_op_of(ep, d);
  if (gni_return_t rc = check_fma(op); rc != GNI_RC_SUCCESS) return rc;
  if (gni_return_t rc = check_events(ep, ep->src_cq, d); rc != GNI_RC_SUCCESS) return rc;
  int32_t tid;
  if (!start_post(ep->nic, d, tid)) return GNI_RC_ERROR_RESOURCE;
  stat_add(ep->nic, GNI_STAT_FMA_LAUNCH_COUNT);
  count_post(ep->nic->counters, post_type(d), d->length);
  // A target on another host, or one we may not reach by cross-memory attach: our daemon
  // carries it (remote_post.cpp).
  if (fma_through_daemon(ep, op.remote_mem_hndl)) [[unlikely]] {
    namespace rop = nicemu::abi::remote;
    const int t = post_type(d);
    const uint16_t kind = t == GNI_POST_FMA_GET ? rop::kGet : t == GNI_POST_AMO ? rop::kAmo : rop::kPut;
    return post_remote(ep, ep->src_cq, d, kind, rop::kFma, tid);
  }
  if (fault_path(ep->nic)) [[unlikely]]
    return fault_post_fma(op, d, tid);  // fault_engine.cpp: injection and the reorder engine
  uint32_t dst_cq = abi::kNoCq;
  const uint64_t st = execute_fma(op, &dst_cq);
  if (st == cqe::kOk && (d->cq_mode & GNI_CQMODE_REMOTE_EVENT)) push_fma_remote_event(op, dst_cq);
  complete_fma(ep->src_cq, d, ep->local_event, st, tid);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
