// uGNI calls and thread cancellation. Programs cancel threads that sit in or between uGNI
// calls: libfabric's gni provider runs GNI_PostdataProbeWaitById (then probes, tests and
// posts) and GNI_CqVectorMonitor in progress threads with asynchronous cancellation, and
// cancels them at teardown. Cray's libugni is C and unwinds from anywhere. This library is
// C++: an asynchronous cancel that lands in a frame with objects to destroy, anywhere but in
// a call, or inside a lock (pthread_mutex_lock is declared nothrow) ends the process in
// std::terminate.
//
// So such an entry point has no objects to destroy itself: it only checks its arguments and
// hands a [[gnu::noinline]] function to deferring_cancel, which runs it with deferred
// cancellation. A blocking call offers a cancellation point between its sleeps, where it
// holds no lock and is registered as no ring's waiter; the cancel takes effect there,
// within one sleep slice (200 ms), as at the device's blocking ioctl. A cancel that came
// during a non-blocking call is acted on when the caller's type is restored, as the call
// returns, outside every lock of this library.
#pragma once
#include <pthread.h>

#include "gni_pub.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace nicemu::ugni {

// A cancel unwinds frames that have nothing to destroy without running any code in them, so
// AddressSanitizer leaves their stack redzones poisoned and reports the thread's exit as a
// stack overflow. Where an unwind may start, tell it the stack is being abandoned, as it is
// told before longjmp.
inline void before_possible_unwind() {
#if defined(__SANITIZE_ADDRESS__)
  __asan_handle_no_return();
#endif
}

template <typename F>
inline gni_return_t deferring_cancel(F&& f) {
  int old = PTHREAD_CANCEL_DEFERRED;
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old);
  gni_return_t rc = f();
  int unused;
  if (old == PTHREAD_CANCEL_ASYNCHRONOUS) before_possible_unwind();
  pthread_setcanceltype(old, &unused);  // may unwind from here: a cancel came meanwhile
  return rc;
}

// Where a cancelled thread leaves a blocking call (for deferred and asynchronous callers
// alike).
inline void cancellation_point() {
  before_possible_unwind();
  pthread_testcancel();
}

}  // namespace nicemu::ugni
