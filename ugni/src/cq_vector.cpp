// Blocking waits over several CQs (fact sheet §11.2). GNI_CqVectorWaitEvent dequeues from
// the first CQ of the vector that has an entry; GNI_CqVectorMonitor only says which one has
// (Open MPI's progress thread runs it, unlocked, while other threads post to and poll the
// same CQs, and then lets them consume). Both spin for spin_ns() and then register as a
// waiter on every ring of the vector, re-check, and sleep on all the rings' `futex` words
// at once with futex_waitv — the wake-up contract is in nicemu/abi/shm_layout.h at
// CqRingCtl. No library lock is held while blocked.
//
// GNI_CqInterruptMask/Unmask keep a count per CQ: there are no interrupts to mask, but a
// vector wait over a masked CQ returns NOT_DONE without processing an event, as the API
// documents, and taking a mask wakes a waiter that is asleep on that CQ.
#include <time.h>

#include <algorithm>
#include <cerrno>

#include "cancel_point.h"
#include "internal.h"
#include "ofi_port.h"

using namespace nicemu;
using namespace nicemu::ugni;

namespace {

// Sleep in slices so that a daemon killed outright (nobody bumps our futex words) is
// noticed, as GNI_CqWaitEvent does.
constexpr uint64_t kSliceNs = 200'000'000;
// Without futex_waitv (kernel before 5.16, a seccomp filter, or more CQs than one call
// takes) the waiter sleeps on the first ring only, in short slices, so an entry in any
// other ring is seen within this much.
constexpr uint64_t kFallbackSliceNs = 1'000'000;

std::atomic<bool> g_waitv_refused{false};

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The vector after validation: every handle is a live CQ in BLOCKING mode.
struct Vector {
  gni_cq_handle_t* h;
  uint32_t n;
  Cq* at(uint32_t i) const { return reinterpret_cast<Cq*>(h[i]); }
};

gni_return_t check(gni_cq_handle_t* h, uint32_t n, Vector& out) {
  if (!h || n == 0) return GNI_RC_INVALID_PARAM;
  bool all_blocking = true;
  for (uint32_t i = 0; i < n; ++i) {
    Cq* cq = as_cq(h[i]);
    if (!cq) return GNI_RC_INVALID_PARAM;
    all_blocking = all_blocking && GNI_CQ_IS_BLOCKING(cq->mode);
  }
  if (!all_blocking) return GNI_RC_ERROR_RESOURCE;
  out = Vector{h, n};
  return GNI_RC_SUCCESS;
}

bool any_masked(const Vector& v) {
  for (uint32_t i = 0; i < v.n; ++i)
    if (v.at(i)->interrupt_mask.load(std::memory_order_seq_cst) != 0) return true;
  return false;
}

// The first CQ in vector order with something to report: an entry, an overrun, or its NIC
// gone (its next GNI_CqGetEvent returns the NIC-down error). -1 if none.
int64_t first_ready(const Vector& v) {
  for (uint32_t i = 0; i < v.n; ++i) {
    Cq* cq = v.at(i);
    if (cq->ring.peek() != 0 || cq->ring.has_overrun() || cq->nic->nic_down.load(std::memory_order_relaxed))
      return i;
  }
  return -1;
}

// The ofi fabric (ofi_port.h): while spinning, each CDM of the vector's CQs has its
// provider driven by this thread; before sleeping, its progress thread again.
void drive_ofi(const Vector& v, bool poll) {
  for (uint32_t i = 0; i < v.n; ++i) {
    Nic* n = v.at(i)->nic;
    if (!n->ofi || (i > 0 && n == v.at(i - 1)->nic)) continue;
    if (poll)
      ofi_poll(n);
    else
      ofi_idle(n);
  }
}

// Before sleeping: the first CDM of the vector whose port holds posts for order has this
// thread sleep in its provider instead (ofi_wait); true if one did.
bool wait_ofi(const Vector& v, uint64_t max_ns) {
  for (uint32_t i = 0; i < v.n; ++i) {
    Nic* n = v.at(i)->nic;
    if (n->ofi && (i == 0 || n != v.at(i - 1)->nic) && ofi_wait(n, max_ns)) return true;
  }
  return false;
}

// Every ring quiet (CqRingView::quiet): nothing reserved, no overrun; a ring's producer that
// reserves after this sees its raised `waiters` and wakes it.
bool all_quiet(const Vector& v) {
  for (uint32_t i = 0; i < v.n; ++i)
    if (!v.at(i)->ring.quiet()) return false;
  return true;
}

// One sleep of at most `slice_ns` until a ring of the vector is woken. Returns 0 or EINTR.
int sleep_once(const Vector& v, uint64_t slice_ns) {
  abi::FutexWaitv words[abi::kFutexWaitvMax];
  const uint32_t m = std::min(v.n, abi::kFutexWaitvMax);
  // Each ring's futex value is read before its `waiters` goes up: a producer that pushes
  // after the re-check below sees the waiter and bumps the word, so the wait returns.
  for (uint32_t i = 0; i < v.n; ++i) {
    abi::CqRingCtl* ctl = v.at(i)->ring.ctl;
    if (i < m) words[i] = abi::futex_waitv_entry(&ctl->futex, ctl->futex.load(std::memory_order_acquire));
    ctl->waiters.fetch_add(1, std::memory_order_seq_cst);
  }
  int err = 0;
  if (first_ready(v) < 0 && !any_masked(v)) {
    // An entry reserved but not yet written (a ring not quiet): its producer may have looked
    // for waiters before we raised ours, and will store it within nanoseconds. Sleep briefly.
    if (!all_quiet(v)) slice_ns = std::min<uint64_t>(slice_ns, abi::CqRingView::kUnquietNapNs);
    if (v.n <= abi::kFutexWaitvMax && !g_waitv_refused.load(std::memory_order_relaxed)) {
      err = abi::futex_wait_any(words, m, static_cast<int64_t>(slice_ns));
      if (err != 0 && err != ETIMEDOUT && err != EINTR) {
        // ENOSYS or EPERM (no futex_waitv here), or anything else that would make this
        // loop spin instead of sleep: the fallback from now on.
        g_waitv_refused.store(true, std::memory_order_relaxed);
        err = 0;
      }
    } else {
      abi::futex_wait(&v.at(0)->ring.ctl->futex, static_cast<uint32_t>(words[0].val),
                      static_cast<int64_t>(std::min(slice_ns, kFallbackSliceNs)));
    }
  }
  for (uint32_t i = 0; i < v.n; ++i) v.at(i)->ring.ctl->waiters.fetch_sub(1, std::memory_order_seq_cst);
  return err == EINTR ? EINTR : 0;
}

// Waits until a CQ of the vector has something to report (SUCCESS, *which set), the
// deadline passes (TIMEOUT), a CQ is masked (NOT_DONE), or — with `stop_on_signal` — a
// signal interrupts the sleep (INVALID_STATE, GNI_CqVectorMonitor's documented code).
// Runs with deferred cancellation (the entry points' deferring_cancel): cancelled only
// between sleeps (cancel_point.h).
gni_return_t wait_ready(const Vector& v, uint64_t deadline, bool stop_on_signal, uint32_t* which) {
  const uint64_t start = now_ns(), spin_until = start + spin_ns();
  for (;;) {
    if (any_masked(v)) return GNI_RC_NOT_DONE;
    if (int64_t r = first_ready(v); r >= 0) {
      *which = static_cast<uint32_t>(r);
      return GNI_RC_SUCCESS;
    }
    const uint64_t t = now_ns();
    if (t >= deadline) return GNI_RC_TIMEOUT;
    if (t < spin_until) {  // a futex wake across cores costs tens of microseconds here
      drive_ofi(v, true);
      abi::spin_step(t - start);
      continue;
    }
    if (wait_ofi(v, std::min(kSliceNs, deadline - t))) {
      cancellation_point();
      continue;
    }
    drive_ofi(v, false);
    if (sleep_once(v, std::min(kSliceNs, deadline - t)) == EINTR && stop_on_signal) return GNI_RC_INVALID_STATE;
    cancellation_point();  // no ring counts us as its waiter any more
    // Is every daemon still there? (A NIC found down makes its CQs ready above.)
    for (uint32_t i = 0; i < v.n; ++i)
      if (i == 0 || v.at(i)->nic != v.at(i - 1)->nic) v.at(i)->nic->daemon_alive();
  }
}

gni_return_t vector_wait_event(gni_cq_handle_t* cq_hndls, uint32_t num_cqs, uint64_t timeout,
                               gni_cq_entry_t* event_data, uint32_t* which);
gni_return_t vector_monitor(gni_cq_handle_t* cq_hndls, uint32_t num_cqs, uint64_t timeout, uint32_t* which);

uint64_t deadline_after(uint64_t timeout_ms) {
  const uint64_t t = now_ns();
  if (timeout_ms == UINT64_MAX || timeout_ms > (UINT64_MAX - t) / 1000000) return UINT64_MAX;  // -1: forever
  return t + timeout_ms * 1000000;
}

}  // namespace

extern "C" {

gni_return_t GNI_CqVectorWaitEvent(gni_cq_handle_t* cq_hndls, uint32_t num_cqs, uint64_t timeout,
                                   gni_cq_entry_t* event_data, uint32_t* which) {
  return deferring_cancel([&] { return vector_wait_event(cq_hndls, num_cqs, timeout, event_data, which); });
}

gni_return_t GNI_CqVectorMonitor(gni_cq_handle_t* cq_hndls, uint32_t num_cqs, uint64_t timeout, uint32_t* which) {
  return deferring_cancel([&] { return vector_monitor(cq_hndls, num_cqs, timeout, which); });
}

}  // extern "C"

namespace {

[[gnu::noinline]] gni_return_t vector_wait_event(gni_cq_handle_t* cq_hndls, uint32_t num_cqs, uint64_t timeout,
                                                 gni_cq_entry_t* event_data, uint32_t* which) {
  Vector v{};
  if (!event_data || !which) return GNI_RC_INVALID_PARAM;
  if (gni_return_t rc = check(cq_hndls, num_cqs, v); rc != GNI_RC_SUCCESS) return rc;
  const uint64_t deadline = deadline_after(timeout);
  for (;;) {
    uint32_t w = 0;
    gni_return_t rc = wait_ready(v, deadline, false, &w);
    if (rc != GNI_RC_SUCCESS) return rc;
    rc = take_event(v.at(w), event_data);
    if (rc != GNI_RC_NOT_DONE) {
      *which = w;
      return rc;
    }
    // Another thread consumed that entry first: wait again for what is left of the timeout.
  }
}

[[gnu::noinline]] gni_return_t vector_monitor(gni_cq_handle_t* cq_hndls, uint32_t num_cqs, uint64_t timeout,
                                              uint32_t* which) {
  Vector v{};
  if (!which) return GNI_RC_INVALID_PARAM;
  if (gni_return_t rc = check(cq_hndls, num_cqs, v); rc != GNI_RC_SUCCESS) return rc;
  return wait_ready(v, deadline_after(timeout), true, which);
}

}  // namespace

extern "C" {

gni_return_t GNI_CqInterruptMask(gni_cq_handle_t cq_hndl) {
  Cq* cq = as_cq(cq_hndl);
  if (!cq || !GNI_CQ_IS_BLOCKING(cq->mode)) return GNI_RC_INVALID_PARAM;
  uint32_t m = cq->interrupt_mask.load(std::memory_order_relaxed);
  do {
    if (m == UINT32_MAX) return GNI_RC_NOT_DONE;
  } while (!cq->interrupt_mask.compare_exchange_weak(m, m + 1, std::memory_order_seq_cst));
  // A vector waiter asleep on this CQ re-checks and returns NOT_DONE (its registration in
  // `waiters` and our mask store are ordered as a producer's entry and its wake are).
  cq->ring.wake();
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CqInterruptUnmask(gni_cq_handle_t cq_hndl) {
  Cq* cq = as_cq(cq_hndl);
  if (!cq || !GNI_CQ_IS_BLOCKING(cq->mode)) return GNI_RC_INVALID_PARAM;
  uint32_t m = cq->interrupt_mask.load(std::memory_order_relaxed);
  do {
    if (m == 0) return GNI_RC_NOT_DONE;  // not masked: nothing to decrement
  } while (!cq->interrupt_mask.compare_exchange_weak(m, m - 1, std::memory_order_seq_cst));
  return GNI_RC_SUCCESS;
}

}  // extern "C"
