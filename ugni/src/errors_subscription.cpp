// NIC error-event subscription (fact sheet §18.2): a subscription object with its mask and
// queue size, and the calls that read it. Which events a subscriber would see: the real
// NIC reports hardware-level faults here (memory ECC, link and translation errors), each
// tagged with a GNI_ERRMASK_* category. nicemu raises none today — a failed transaction is
// reported through its CQ entry (§18.1), which is where clients look — so GetErrorEvent
// returns NOT_DONE and WaitErrorEvents TIMEOUT once its timeout has passed. Link-down and
// injected faults of the UDP fabric are the candidates for TRANSIENT / TRANSACTION events
// (docs/decisions.md).
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;

namespace {

constexpr uint32_t kErrMagic = 0x45525331;  // "ERS1"

struct ErrSubscription {
  uint32_t magic = kErrMagic;
  std::atomic<gni_error_mask_t> mask{0};
  uint32_t queue_size = 0;
  // A thread blocked in GNI_WaitErrorEvents must not outlive the object: release wakes it
  // and waits for it to leave.
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  int waiting = 0;
};

ErrSubscription* as_sub(gni_err_handle_t h) { return from_handle<ErrSubscription, kErrMagic>(h); }

}  // namespace

extern "C" {

gni_return_t GNI_SubscribeErrors(gni_nic_handle_t nic_handle, uint32_t device_id, gni_error_mask_t mask,
                                 uint32_t EEQ_size, gni_err_handle_t* err_handle) {
  Nic* n = as_nic(nic_handle);
  if (!n || !err_handle || EEQ_size == 0) return GNI_RC_INVALID_PARAM;
  if (device_id != 0) return GNI_RC_NO_MATCH;  // one device per node, as GNI_CdmAttach
  auto* s = new (std::nothrow) ErrSubscription;
  if (!s) return GNI_RC_ERROR_NOMEM;
  s->mask.store(mask, std::memory_order_relaxed);
  s->queue_size = EEQ_size;
  *err_handle = reinterpret_cast<gni_err_handle_t>(s);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_ReleaseErrors(gni_err_handle_t err_handle) {
  ErrSubscription* s = as_sub(err_handle);
  if (!s) return GNI_RC_INVALID_PARAM;
  {
    std::unique_lock<std::mutex> lk(s->mu);
    s->released = true;
    s->cv.notify_all();
    s->cv.wait(lk, [s] { return s->waiting == 0; });
  }
  s->magic = 0;
  delete s;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetErrorMask(gni_err_handle_t err_handle, gni_error_mask_t* mask) {
  ErrSubscription* s = as_sub(err_handle);
  if (!s || !mask) return GNI_RC_INVALID_PARAM;
  *mask = s->mask.load(std::memory_order_relaxed);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_SetErrorMask(gni_err_handle_t err_handle, gni_error_mask_t mask_in, gni_error_mask_t* mask_out) {
  ErrSubscription* s = as_sub(err_handle);
  if (!s) return GNI_RC_INVALID_PARAM;
  gni_error_mask_t old = s->mask.exchange(mask_in, std::memory_order_relaxed);
  if (mask_out) *mask_out = old;  // marked IN in the header, but it receives the old mask
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetErrorEvent(gni_err_handle_t err_handle, gni_error_event_t* event) {
  ErrSubscription* s = as_sub(err_handle);
  if (!s || !event) return GNI_RC_INVALID_PARAM;
  return GNI_RC_NOT_DONE;  // nicemu raises no NIC error events (see the top of this file)
}

gni_return_t GNI_WaitErrorEvents(gni_err_handle_t err_handle, gni_error_event_t* events, uint32_t events_size,
                                 uint32_t timeout, uint32_t* num_events) {
  ErrSubscription* s = as_sub(err_handle);
  if (!s || !events || events_size == 0 || !num_events) return GNI_RC_INVALID_PARAM;
  *num_events = 0;
  if (timeout == 0) return GNI_RC_NOT_DONE;  // a poll
  // Nothing will arrive: sleep for the timeout (milliseconds, -1 = forever), or until the
  // subscription is released under us.
  std::unique_lock<std::mutex> lk(s->mu);
  ++s->waiting;
  if (timeout == UINT32_MAX)
    s->cv.wait(lk, [s] { return s->released; });
  else
    s->cv.wait_for(lk, std::chrono::milliseconds(timeout), [s] { return s->released; });
  const bool released = s->released;
  if (--s->waiting == 0) s->cv.notify_all();
  return released ? GNI_RC_NOT_DONE : GNI_RC_TIMEOUT;
}

gni_return_t GNI_SetErrorPtag(gni_err_handle_t err_handle, uint8_t ptag) {
  (void)ptag;
  if (!as_sub(err_handle)) return GNI_RC_INVALID_PARAM;
  return GNI_RC_PERMISSION_ERROR;  // filtering other jobs' errors is privileged (§18.2)
}

}  // extern "C"
