// The process's invalidation sources and the choice between them. Started by the first
// UDREG_CacheCreate; NICEMU_UDREG_INVALIDATION selects the sources:
//   auto  (default) userfaultfd when the kernel allows it, plus the interposed hooks when
//         they are in the symbol path
//   uffd  userfaultfd only       hooks  interposed hooks only
//   none  no invalidation at all: cached registrations can go stale (tests, benchmarks)
// A range that no source can watch is not cached (Watcher): with no working source at all,
// every registration lives only as long as its references. docs/udreg.md has the details.
#pragma once
#include <cstdint>

#include "watcher.h"

namespace nicemu::udreg {

enum class Mode { kAuto, kUffd, kHooks, kNone };

class MemoryMonitor final : public Watcher {
 public:
  static MemoryMonitor& instance();

  // Idempotent; reads the environment and starts the sources on first call.
  void start();
  // In a fork child whose parent had started the sources: a userfaultfd monitor of its own.
  void restart_after_fork();
  bool watch(uint64_t start, uint64_t end) override;

  Mode mode() const { return mode_; }
  bool hooks_complete() const { return hooks_munmap_ && hooks_free_; }

 private:
  void probe_hooks();

  bool started_ = false;
  Mode mode_ = Mode::kAuto;
  bool hooks_munmap_ = false;  // calls to munmap & co. reach the hooks
  bool hooks_free_ = false;    // calls to free/realloc reach the hooks
  bool debug_ = false;
};

// Hook switches and probes (memory_hooks.cpp).
void hooks_enable(bool on);
bool hooks_probe_munmap();
bool hooks_probe_free();

}  // namespace nicemu::udreg
