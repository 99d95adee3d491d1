#include "counters.h"

#include "internal.h"

namespace nicemu::ugni {

ctr::CdmCounterBlock* map_counter_block(const Region& self) {
  uint64_t off = self.header()->counters_offset;
  if (off == 0 || off % 64 != 0 || !self.in_heap(off, sizeof(ctr::CdmCounterBlock))) return unbound_counter_block();
  auto* b = reinterpret_cast<ctr::CdmCounterBlock*>(self.base + off);
  if (b->magic != ctr::kBlockMagic || b->version != ctr::kVersion || b->slots < ctr::cdm::kCount)
    return unbound_counter_block();
  return b;
}

}  // namespace nicemu::ugni
