#include "memory_monitor.h"

#include <pthread.h>

#include <atomic>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "invalidation_ring.h"
#include "uffd_source.h"

namespace nicemu::udreg {

namespace {

std::atomic<bool> g_forked{false};

void after_fork_in_child() {
  // The child has the parent's caches but no monitor thread and no userfaultfd
  // registrations: whatever was reported or pending is lost for it. Its next
  // UDREG_CacheCreate starts a monitor of its own.
  uffd_forget_after_fork();
  invalidation_ring().reset_gate();
  invalidation_ring().bump_epoch();
  g_forked.store(true);
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kAuto: return "auto";
    case Mode::kUffd: return "uffd";
    case Mode::kHooks: return "hooks";
    case Mode::kNone: return "none";
  }
  return "?";
}

}  // namespace

MemoryMonitor& MemoryMonitor::instance() {
  static MemoryMonitor* m = new MemoryMonitor;  // never destroyed: caches may outlive static destructors
  return *m;
}

void MemoryMonitor::start() {
  if (started_) return;
  started_ = true;
  const char* dbg = getenv("NICEMU_UDREG_DEBUG");
  debug_ = dbg && *dbg && strcmp(dbg, "0") != 0;

  const char* env = getenv("NICEMU_UDREG_INVALIDATION");
  std::string value = env ? env : "auto";
  if (value == "auto" || value.empty())
    mode_ = Mode::kAuto;
  else if (value == "uffd")
    mode_ = Mode::kUffd;
  else if (value == "hooks")
    mode_ = Mode::kHooks;
  else if (value == "none")
    mode_ = Mode::kNone;
  else
    std::fprintf(stderr, "udreg: NICEMU_UDREG_INVALIDATION=%s is not one of auto, uffd, hooks, none: using auto\n",
                 value.c_str());

  pthread_atfork(nullptr, nullptr, after_fork_in_child);

  std::string uffd_why = "not requested";
  bool uffd = false;
  if (mode_ == Mode::kAuto || mode_ == Mode::kUffd) uffd = uffd_start(&uffd_why);
  if (mode_ == Mode::kAuto || mode_ == Mode::kHooks) {
    hooks_munmap_ = hooks_probe_munmap();
    hooks_free_ = hooks_probe_free();
    hooks_enable(hooks_munmap_);
  }

  if (debug_)
    std::fprintf(stderr, "udreg: invalidation mode %s: userfaultfd %s%s%s, hooks: munmap %s, free %s\n",
                 mode_name(mode_), uffd ? "on" : "off", uffd ? "" : " — ", uffd ? "" : uffd_why.c_str(),
                 hooks_munmap_ ? "seen" : "not seen", hooks_free_ ? "seen" : "not seen");
  if (mode_ == Mode::kNone) {
    if (debug_) std::fprintf(stderr, "udreg: invalidation disabled: cached registrations can go stale\n");
    return;
  }
  if (!uffd && !hooks_complete()) {
    std::fprintf(stderr,
                 "udreg: no invalidation source sees every unmap (userfaultfd: %s; interposed hooks: %s): "
                 "registrations are not kept once unreferenced\n",
                 uffd_why.c_str(),
                 mode_ == Mode::kUffd ? "not requested"
                 : !hooks_munmap_     ? "libudreg is not ahead of libc in the symbol search order"
                                      : "free() does not reach them (another allocator or a sanitizer)");
  }
}

void MemoryMonitor::restart_after_fork() {
  if (!g_forked.exchange(false) || !started_) return;
  if (mode_ != Mode::kAuto && mode_ != Mode::kUffd) return;
  std::string why;
  if (!uffd_start(&why) && debug_) std::fprintf(stderr, "udreg: userfaultfd in the fork child: %s\n", why.c_str());
}

bool MemoryMonitor::watch(uint64_t start, uint64_t end) {
  if (mode_ == Mode::kNone) return true;  // deliberately unsafe: nothing is ever invalidated
  if (uffd_watch(start, end)) return true;
  return hooks_complete() && (mode_ == Mode::kAuto || mode_ == Mode::kHooks);
}

}  // namespace nicemu::udreg
