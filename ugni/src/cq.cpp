// Completion queues: rings in our shared-memory region (allocated by the daemon), consumed
// here; GNI_GetCompleted hands back the exact descriptor that was posted.
#include <time.h>

#include <chrono>

#include "cancel_point.h"
#include "internal.h"
#include "ofi_port.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace cqe = nicemu::abi::cqe;

namespace {

// The entry reported once the NIC is gone: clients see a non-recoverable error, not silence.
constexpr uint64_t kNicDownEntry = cqe::make(cqe::kSrcLocalRequest, cqe::kTypePost, cqe::kErrNicDown, 0, 0xFFFF, 0);

}  // namespace

gni_return_t nicemu::ugni::take_event(Cq* cq, gni_cq_entry_t* event_data) {
  if (cq->ring.take_overrun()) {
    *event_data = cqe::overrun_entry();
    count(cq->nic->counters, ctr::cdm::cq_overruns);
    return GNI_RC_ERROR_RESOURCE;
  }
  uint64_t e = cq->ring.pop();
  if (e == 0 && cq->nic->ofi) {
    // The ofi fabric: this thread reads the provider's completions itself rather than wait
    // for the progress thread to be woken for them (ofi_port.h).
    ofi_poll(cq->nic);
    e = cq->ring.pop();
  }
  if (e == 0) {
    Nic* n = cq->nic;
    // Poll the daemon's health only now and then: the empty path must stay syscall-free.
    const bool down = ((++n->empty_polls & 0x3FF) == 0 && !n->daemon_alive()) ||
                      n->nic_down.load(std::memory_order_relaxed);
    if (!down) return GNI_RC_NOT_DONE;
    // The NIC is down. What our dead daemon held of ours fails first, one error event per
    // post (finding F3): as the hardware reports a failed transaction, in the post's CQ with
    // its descriptor, so a client waiting for that descriptor is not left waiting; so do
    // the posts the ofi fabric's port still has in flight. Then the NIC-down entry, which
    // names no descriptor.
    if (n->ofi && ofi_nic_down(n)) e = cq->ring.pop();
    if (e == 0 && !n->orphan_event(cq, e)) {
      *event_data = kNicDownEntry;
      return GNI_RC_TRANSACTION_ERROR;
    }
  }
  count_event(cq->nic->counters, e);
  if (cq->handler) cq->handler(&e, cq->context);
  *event_data = e;
  return cqe::status_of(e) ? GNI_RC_TRANSACTION_ERROR : GNI_RC_SUCCESS;
}

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

gni_return_t wait_event(Cq* cq, uint64_t timeout, gni_cq_entry_t* event_data);  // GNI_CqWaitEvent's loop

}  // namespace

extern "C" {

gni_return_t GNI_CqCreate(gni_nic_handle_t nic_hndl, uint32_t entry_count, uint32_t delay_count,
                          gni_cq_mode_t mode, void (*handler)(gni_cq_entry_t*, void*), void* context,
                          gni_cq_handle_t* cq_hndl) {
  (void)delay_count;  // interrupt coalescing: there are no interrupts to coalesce
  Nic* n = as_nic(nic_hndl);
  if (!n || !cq_hndl || entry_count == 0 || GNI_CQ_IS_INVALID_EMULATED(mode)) return GNI_RC_INVALID_PARAM;
  abi::ctl::CqCreate req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kCqCreate);
  req.entry_count = entry_count;
  req.mode = mode;
  abi::ctl::CqCreateReply rep{};
  if (gni_return_t rc = daemon_call(n, req, rep); rc != GNI_RC_SUCCESS) return rc;
  auto* cq = new (std::nothrow) Cq;
  if (!cq) return GNI_RC_ERROR_NOMEM;
  cq->nic = n;
  cq->slot = rep.cq_index;
  cq->mode = mode;
  cq->ring = n->self->cq_view(rep.cq_index);
  cq->handler = handler;
  cq->context = context;
  if (!cq->ring.valid()) {
    delete cq;
    return GNI_RC_ERROR_RESOURCE;
  }
  n->live_cqs.fetch_add(1, std::memory_order_relaxed);
  *cq_hndl = reinterpret_cast<gni_cq_handle_t>(cq);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CqDestroy(gni_cq_handle_t cq_hndl) {
  Cq* cq = as_cq(cq_hndl);
  if (!cq) return GNI_RC_INVALID_PARAM;
  if (cq->users.load() != 0) return GNI_RC_ERROR_RESOURCE;
  abi::ctl::CqDestroy req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kCqDestroy);
  req.cq_index = cq->slot;
  abi::ctl::Reply rep{};
  // With the daemon gone there is nothing to release remotely; free our side regardless.
  if (cq->nic->conn.call(req, rep) && rep.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.rc);
  cq->nic->forget_cq(cq);
  cq->nic->live_cqs.fetch_sub(1, std::memory_order_relaxed);
  cq->magic = 0;
  delete cq;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CqGetEvent(gni_cq_handle_t cq_hndl, gni_cq_entry_t* event_data) {
  Cq* cq = as_cq(cq_hndl);
  if (!cq || !event_data) return GNI_RC_INVALID_PARAM;
  return take_event(cq, event_data);
}

gni_return_t GNI_CqTestEvent(gni_cq_handle_t cq_hndl) {
  Cq* cq = as_cq(cq_hndl);
  if (!cq) return GNI_RC_INVALID_PARAM;
  if (cq->ring.has_overrun()) return GNI_RC_ERROR_RESOURCE;
  if (!cq->ring.peek() && cq->nic->ofi) ofi_poll(cq->nic);
  return cq->ring.peek() ? GNI_RC_SUCCESS : GNI_RC_NOT_DONE;
}

gni_return_t GNI_CqWaitEvent(gni_cq_handle_t cq_hndl, uint64_t timeout, gni_cq_entry_t* event_data) {
  Cq* cq = as_cq(cq_hndl);
  if (!cq || !event_data) return GNI_RC_INVALID_PARAM;
  if (!GNI_CQ_IS_BLOCKING(cq->mode)) return GNI_RC_ERROR_RESOURCE;
  // Cancelled only between sleeps (cancel_point.h).
  return deferring_cancel([&] { return wait_event(cq, timeout, event_data); });
}

}  // extern "C"

namespace {

[[gnu::noinline]] gni_return_t wait_event(Cq* cq, uint64_t timeout, gni_cq_entry_t* event_data) {
  const bool forever = timeout == UINT64_MAX;
  const uint64_t start = now_ns();
  const uint64_t deadline = forever ? UINT64_MAX : start + timeout * 1000000ull;
  // Spin briefly first: a futex wake across cores costs tens of microseconds here.
  const uint64_t spin_until = start + spin_ns();
  for (;;) {
    gni_return_t rc = take_event(cq, event_data);
    if (rc != GNI_RC_NOT_DONE) return rc;
    uint64_t t = now_ns();
    if (t >= deadline) return GNI_RC_TIMEOUT;
    if (t < spin_until) {
      abi::spin_step(t - start);
      continue;
    }
    // Posts held for order (ofi_order.h): sleep in the provider instead, and look again.
    if (cq->nic->ofi && ofi_wait(cq->nic, deadline - t)) {
      cancellation_point();
      continue;
    }
    ofi_idle(cq->nic);  // asleep: the progress thread drives the provider and wakes us
    auto* ctl = cq->ring.ctl;
    uint32_t seq = ctl->futex.load(std::memory_order_acquire);
    ctl->waiters.fetch_add(1, std::memory_order_seq_cst);
    if (cq->ring.peek() == 0 && !cq->ring.has_overrun()) {
      // Sleep in slices so a daemon killed outright is still noticed. An entry reserved but
      // not yet written (not quiet: its producer may have looked for waiters before we
      // raised ours) is a matter of nanoseconds: sleep briefly, not a whole slice.
      uint64_t slice = cq->ring.quiet() ? 200000000ull : abi::CqRingView::kUnquietNapNs;
      if (!forever) slice = std::min<uint64_t>(slice, deadline - t);
      abi::futex_wait(&ctl->futex, seq, static_cast<int64_t>(slice));
    }
    ctl->waiters.fetch_sub(1, std::memory_order_seq_cst);
    cancellation_point();
    if (!cq->nic->daemon_alive()) {
      gni_return_t rc2 = take_event(cq, event_data);
      if (rc2 != GNI_RC_NOT_DONE) return rc2;
      *event_data = kNicDownEntry;
      return GNI_RC_TRANSACTION_ERROR;
    }
  }
}

}  // namespace

extern "C" {

gni_return_t GNI_GetCompleted(gni_cq_handle_t cq_hndl, gni_cq_entry_t event_data,
                              gni_post_descriptor_t** post_descr) {
  Cq* cq = as_cq(cq_hndl);
  if (!cq || !post_descr) return GNI_RC_INVALID_PARAM;
  if (cqe::type_of(event_data) != cqe::kTypePost) return GNI_RC_INVALID_PARAM;
  uint64_t tid = cqe::tid_of(event_data);
  Nic* n = cq->nic;
  gni_post_descriptor_t* d = nullptr;
  {
    std::lock_guard<std::mutex> lk(n->inflight_mu);
    if (tid >= n->inflight.size() || n->inflight[tid].desc == nullptr) {
      *post_descr = nullptr;
      return GNI_RC_DESCRIPTOR_ERROR;
    }
    Inflight& f = n->inflight[tid];
    d = f.desc;
    // Which of its events this was: a NIC that goes down fails only the others.
    const uint64_t inf = cqe::info_of(event_data);
    f.modes &= static_cast<uint16_t>(~(((inf & cqe::kInfoLocal) ? GNI_CQMODE_LOCAL_EVENT : 0) |
                                       ((inf & cqe::kInfoGlobal) ? GNI_CQMODE_GLOBAL_EVENT : 0)));
    if (--f.remaining == 0) {
      f.desc = nullptr;
      n->free_tids.push_back(static_cast<uint16_t>(tid));
    }
  }
  uint64_t info = cqe::info_of(event_data);
  if (info & cqe::kInfoLocal) d->cq_mode_complete |= GNI_CQMODE_LOCAL_EVENT;
  if (info & cqe::kInfoGlobal) d->cq_mode_complete |= GNI_CQMODE_GLOBAL_EVENT;
  uint64_t st = cqe::status_of(event_data);
  if (st) d->status = st;
  *post_descr = d;
  return st ? GNI_RC_TRANSACTION_ERROR : GNI_RC_SUCCESS;
}

}  // extern "C"
