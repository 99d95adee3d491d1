// Blocking calls and thread cancellation. Programs cancel threads that sit in uGNI's blocking
// calls: libfabric's gni provider runs GNI_PostdataProbeWaitById and GNI_CqVectorMonitor in
// progress threads with asynchronous cancellation and cancels them at teardown. Cray's
// libugni is C and unwinds from anywhere; this library is C++, and an asynchronous cancel
// that lands inside a lock (pthread_mutex_lock is declared nothrow) ends the process in
// std::terminate. So a blocking call runs with deferred cancellation and offers a
// cancellation point between its sleeps, where it holds no lock and is registered as no
// ring's waiter: the cancel then takes effect there, within one sleep slice (200 ms).
#pragma once
#include <pthread.h>

namespace nicemu::ugni {

class CancelDeferral {
 public:
  CancelDeferral() { pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old_); }
  // Restoring asynchronous cancellation acts on a cancel that came meanwhile (say while a
  // probe held its lock): the thread unwinds from here, which a destructor may do only
  // when it is not noexcept.
  ~CancelDeferral() noexcept(false) {
    int unused;
    pthread_setcanceltype(old_, &unused);
  }
  CancelDeferral(const CancelDeferral&) = delete;
  CancelDeferral& operator=(const CancelDeferral&) = delete;

 private:
  int old_ = PTHREAD_CANCEL_DEFERRED;
};

// Where a cancelled thread leaves a blocking call (for deferred and asynchronous callers
// alike, as the device's blocking ioctl would be).
inline void cancellation_point() { pthread_testcancel(); }

}  // namespace nicemu::ugni
