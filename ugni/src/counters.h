// libugni's per-CDM counters (layout in nicemu/abi/counters_layout.h): a block in our own
// region's heap that the daemon copies into the node's counter page. Updated with relaxed
// fetch_add on the hot paths (posts, SMSG, CQ events): no system call, no fence, and a
// cache line nobody else writes.
#pragma once
#include <cstdint>

#include "nicemu/abi/counters_layout.h"
#include "nicemu/abi/cq_entry.h"

namespace nicemu::ugni {

struct Region;

namespace ctr = nicemu::abi::counters;

// The block of `self`, validated (heap offset, alignment, magic, version); a process-local
// block when the region has none (an older daemon), so counting never needs a branch.
ctr::CdmCounterBlock* map_counter_block(const Region& self);

// Where counts go before attach (and when the region has no block): kept, never read.
inline ctr::CdmCounterBlock* unbound_counter_block() {
  static ctr::CdmCounterBlock local{};
  return &local;
}

inline void count(ctr::CdmCounterBlock* b, ctr::cdm::Counter c, uint64_t n = 1) {
  b->v[c].fetch_add(n, std::memory_order_relaxed);
}

// One event taken from a CQ: by kind, and errors by class (the CQE status).
inline void count_event(ctr::CdmCounterBlock* b, uint64_t e) {
  using namespace nicemu::abi::cqe;
  uint64_t src = source_of(e);
  count(b, src >= kSrcRemoteRequest ? ctr::cdm::cq_remote_events : ctr::cdm::cq_local_events);
  if (uint64_t st = status_of(e); st != kOk && st <= ctr::kErrorClasses)
    count(b, static_cast<ctr::cdm::Counter>(ctr::kErrorBase + st - 1));
}

}  // namespace nicemu::ugni
