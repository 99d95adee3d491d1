// Process-shared futex wait/wake on 32-bit words in shared memory (no FUTEX_PRIVATE_FLAG:
// waiters and wakers are different processes mapping the same memfd).
#pragma once
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace nicemu::abi {

// Returns false on timeout. timeout_ns < 0 waits forever.
inline bool futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  struct timespec ts;
  struct timespec* tsp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    tsp = &ts;
  }
  long r = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, tsp, nullptr, 0);
  return !(r == -1 && errno == ETIMEDOUT);
}

inline void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// For locks: one waiter can take it, waking the others would only put them back to sleep.
inline void futex_wake_one(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// Waiting on several words at once (futex_waitv, Linux 5.16): the kernel's struct
// futex_waitv, spelled out so that older kernel headers still build.
struct FutexWaitv {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(FutexWaitv) == 24);
inline constexpr uint32_t kFutexWaitvMax = 128;  // FUTEX_WAITV_MAX

inline FutexWaitv futex_waitv_entry(std::atomic<uint32_t>* word, uint32_t expected) {
  // 32-bit word (FUTEX_32 = 2), process-shared (no FUTEX2_PRIVATE).
  return FutexWaitv{expected, reinterpret_cast<uintptr_t>(word), 2, 0};
}

// Sleeps until one of the n (<= kFutexWaitvMax) words is woken or no longer holds its
// expected value. timeout_ns < 0 waits forever. Returns 0 (woken, or a value had already
// changed), ETIMEDOUT, EINTR (a signal), or ENOSYS / EPERM where the kernel or a seccomp
// filter refuses futex_waitv — the caller then falls back to futex_wait on one word.
inline int futex_wait_any(FutexWaitv* v, uint32_t n, int64_t timeout_ns) {
  constexpr long kSysFutexWaitv = 449;  // the same number on every architecture
  struct timespec ts;
  struct timespec* tsp = nullptr;
  if (timeout_ns >= 0) {  // futex_waitv takes an absolute deadline
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + timeout_ns % 1000000000;
    ts.tv_sec += timeout_ns / 1000000000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    tsp = &ts;
  }
  long r = syscall(kSysFutexWaitv, v, n, 0, tsp, CLOCK_MONOTONIC);
  if (r >= 0 || errno == EAGAIN) return 0;
  return errno;
}

// One step of a spin before a futex sleep, `spun_ns` into it: a pause for the first 5 µs,
// then a yield, so that what the spinner waits for — a daemon, a lock holder or a peer
// sharing its CPU — is not held off by the spinning (a yield returns at once when nothing
// else waits for the CPU).
inline void spin_step(uint64_t spun_ns) {
  constexpr uint64_t kPureSpinNs = 5000;
  if (spun_ns >= kPureSpinNs) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace nicemu::abi
