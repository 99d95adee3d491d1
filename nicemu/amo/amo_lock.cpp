// The AMO lock protocol (see amo_lock.h and nicemu/abi/shm_layout.h).
#include "nicemu/amo/amo_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nicemu/abi/futex.h"

namespace nicemu::amo {

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct ProcStat {
  char state = '?';
  uint32_t start_tag = 0;  // low 32 bits of the start time (clock ticks since boot)
};

// Reads state (field 3) and starttime (field 22) of /proc/<pid>/stat. The command name
// (field 2) may contain spaces and parentheses, so fields are counted after the last ')'.
// errno is ENOENT when the process does not exist.
bool read_stat(pid_t pid, ProcStat& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int e = errno;
  close(fd);
  if (n <= 0) {
    errno = n == 0 ? ENOENT : e;  // an empty read: the process went away meanwhile
    return false;
  }
  buf[n] = '\0';
  char* p = std::strrchr(buf, ')');
  if (!p) return false;
  ++p;
  for (int field = 3; field <= 22; ++field) {
    while (*p == ' ') ++p;
    if (!*p) return false;
    if (field == 3) out.state = *p;
    if (field == 22) {
      out.start_tag = static_cast<uint32_t>(std::strtoull(p, nullptr, 10));
      return true;
    }
    while (*p && *p != ' ') ++p;
  }
  return false;
}

std::atomic<uint64_t> g_self{0};

}  // namespace

uint64_t lock_self(pid_t pid) {
  uint64_t v = g_self.load(std::memory_order_relaxed);
  if (v != 0 && static_cast<pid_t>(v & 0xFFFFFFFF) == pid) return v;
  ProcStat st;
  uint32_t tag = read_stat(pid, st) ? st.start_tag : 0;  // 0: no /proc, the pid alone identifies us
  v = (uint64_t{tag} << 32) | static_cast<uint32_t>(pid);
  g_self.store(v, std::memory_order_relaxed);
  return v;
}

bool lock_holder_alive(uint64_t owner) {
  const auto pid = static_cast<pid_t>(owner & 0xFFFFFFFF);
  const auto tag = static_cast<uint32_t>(owner >> 32);
  if (pid <= 0) return false;  // no process: a corrupted word nobody holds
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  ProcStat st;
  if (!read_stat(pid, st)) return errno != ENOENT;
  if (st.state == 'Z' || st.state == 'X') return false;  // died, not yet reaped by its parent
  return tag == 0 || st.start_tag == tag;                 // a different start time: pid reused
}

abi::AmoLock* lock_for(char* base, uint64_t heap_offset, uint64_t region_size, uint32_t count, uint64_t offset,
                       uint64_t addr) {
  // Count and offset come from the read-only header; check them against the region anyway.
  if (count == 0 || (count & (count - 1)) != 0 || offset % 64 != 0 || offset < heap_offset ||
      offset > region_size || uint64_t{count} * sizeof(abi::AmoLock) > region_size - offset)
    return nullptr;
  // Fibonacci hashing of the 8-byte word: neighbouring words land on different locks.
  const int bits = std::countr_zero(count);
  const uint64_t h = (addr >> 3) * 0x9E3779B97F4A7C15ull;
  const uint64_t idx = bits == 0 ? 0 : h >> (64 - bits);
  return reinterpret_cast<abi::AmoLock*>(base + offset) + idx;
}

LockResult lock_acquire(abi::AmoLock* l, uint64_t me, uint64_t spin_ns, int64_t timeout_ns, int64_t max_total_ns) {
  uint64_t expected = 0;
  if (l->owner.compare_exchange_strong(expected, me, std::memory_order_acquire, std::memory_order_relaxed))
    return LockResult::kAcquired;

  // Spin first: the holder's critical section is two system calls, and a futex wake across
  // cores costs more than that here. The spin yields after its first microseconds: the
  // holder may be waiting for this very CPU.
  const uint64_t spin_start = now_ns(), spin_until = spin_start + spin_ns;
  do {
    abi::spin_step(now_ns() - spin_start);
    expected = l->owner.load(std::memory_order_relaxed);
    if (expected == 0 &&
        l->owner.compare_exchange_weak(expected, me, std::memory_order_acquire, std::memory_order_relaxed))
      return LockResult::kAcquired;
  } while (now_ns() < spin_until);

  int64_t stalled_ns = 0;  // time asleep without seeing any release
  const uint64_t give_up = max_total_ns < 0 ? UINT64_MAX : spin_start + static_cast<uint64_t>(max_total_ns);
  for (;;) {
    if (now_ns() >= give_up) return LockResult::kTimeout;
    const uint32_t seq = l->wake.load(std::memory_order_acquire);
    l->waiters.fetch_add(1, std::memory_order_seq_cst);
    uint64_t cur = l->owner.load(std::memory_order_seq_cst);
    bool slept_out = false;
    if (cur != 0) slept_out = !abi::futex_wait(&l->wake, seq, kLockSliceNs);
    l->waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (cur == 0 || !slept_out) {
      // Free, or released meanwhile (someone is making progress): try to take it.
      expected = 0;
      if (l->owner.compare_exchange_strong(expected, me, std::memory_order_acquire, std::memory_order_relaxed))
        return LockResult::kAcquired;
      stalled_ns = 0;
      continue;
    }
    // A whole slice without a release: is the holder still there?
    cur = l->owner.load(std::memory_order_acquire);
    if (cur == 0) continue;
    if (!lock_holder_alive(cur)) {
      // Exactly that dead owner: a newer holder has another value and is not displaced.
      expected = cur;
      if (l->owner.compare_exchange_strong(expected, me, std::memory_order_acquire, std::memory_order_relaxed))
        return LockResult::kBrokeDeadHolder;
      continue;
    }
    stalled_ns += kLockSliceNs;
    if (stalled_ns >= timeout_ns) return LockResult::kTimeout;
  }
}

void lock_release(abi::AmoLock* l, uint64_t me) {
  // Only our own hold is released: should a waiter ever have taken the lock over from us,
  // storing 0 would release theirs. The locked CAS is also the fence that orders the
  // release before the read of `waiters`.
  l->owner.compare_exchange_strong(me, 0, std::memory_order_seq_cst, std::memory_order_relaxed);
  if (l->waiters.load(std::memory_order_seq_cst) != 0) {
    l->wake.fetch_add(1, std::memory_order_release);
    abi::futex_wake_one(&l->wake);
  }
}

}  // namespace nicemu::amo
