// libugni's per-CDM counters (layout in nicemu/abi/counters_layout.h): a block in our own
// region's heap that the daemon copies into the node's counter page. Updated on the hot
// paths (posts, SMSG, CQ events) with relaxed loads and stores (count()): no system call,
// no fence, no locked instruction, and a cache line no other process writes.
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

// A plain load and store, not a locked add: on x86 even a relaxed fetch_add is a locked
// instruction, a full barrier that drains the store buffer behind the message just written
// (seven of them per SMSG round trip cost a fifth of the message rate). Exact while one
// thread at a time works on the CDM, the common case; threads counting the same counter at
// the same instant can lose an increment, which statistics can afford.
inline void count(ctr::CdmCounterBlock* b, ctr::cdm::Counter c, uint64_t n = 1) {
  b->v[c].store(b->v[c].load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
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
