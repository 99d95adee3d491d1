// Fuzz target: the daemon's copy of a client's counter block (CdmCounterBlock in the
// region heap, abi/counters_layout.h) into the node's counter page (StatsPage::refresh,
// cdm_attached, cdm_detached), with the page's CDM table scribbled as a client of the
// daemon's uid could (the page is a file of mode 0644 owned by that uid).
//
// Input: flags (u8: bit 0 the page's CDM entries are marked taken by the input's bytes);
// then operations until the input ends: an op byte (0: a counter of the block gets a u64
// of the input, at index op >> 2; 1: the magic gets a u32; 2: refresh; 3: a second CDM
// attaches or detaches).
//
// Checks: the totals never go down (only growth is added, saturating), they grow by no
// more than the block's values went up, and the attached and untracked gauges are back to
// zero once every CDM detached.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "fuzz_driver.h"
#include "nicemu/daemon/stats_page.h"
#include "shm_fixture.h"

namespace cn = nicemu::abi::counters;
using nicemu::daemon::StatsPage;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static StatsPage page("", 0);
  static uint64_t next_id = 1;
  shm_fuzz::Reader in{data, size};
  const uint8_t flags = in.take<uint8_t>();

  // The page's CDM table as a client may have left it.
  auto* entries = reinterpret_cast<cn::CdmEntry*>(const_cast<char*>(reinterpret_cast<const char*>(&page.header())) +
                                                  cn::kCdmTableOffset);
  std::vector<uint32_t> states(cn::kCdmEntries);
  for (uint32_t i = 0; i < cn::kCdmEntries; ++i) {
    states[i] = entries[i].state;
    if (flags & 1) entries[i].state = in.take<uint8_t>() & 1 ? cn::kEntryLive : cn::kEntryFree;
  }

  cn::CdmCounterBlock block{};
  block.magic = cn::kBlockMagic;
  block.version = cn::kVersion;
  block.slots = cn::kCdmSlots;
  const uint64_t id = next_id++, id2 = next_id++;
  page.cdm_attached(id, 1, 2, 3, 4, 5);
  bool second = false;
  std::vector<uint64_t> before(cn::cdm::kCount), grown(cn::cdm::kCount, 0), last(cn::cdm::kCount, 0);
  for (uint32_t c = 0; c < cn::cdm::kCount; ++c) before[c] = page.total(cn::cdm::Counter(c));
  std::vector<uint64_t> prev = before;

  auto refresh = [&] {
    page.refresh(id, &block);
    if (block.magic != cn::kBlockMagic) return;
    for (uint32_t c = 0; c < cn::cdm::kCount; ++c) {
      const uint64_t v = block.v[c].load();
      if (v > last[c]) grown[c] = v - last[c] > UINT64_MAX - grown[c] ? UINT64_MAX : grown[c] + (v - last[c]);
      last[c] = v;
    }
  };
  while (!in.empty()) {
    const uint8_t op = in.take<uint8_t>();
    switch (op & 3) {
      case 0:
        block.v[(op >> 2) % cn::kCdmSlots].store(in.take<uint64_t>());
        break;
      case 1:
        block.magic = in.take<uint32_t>();
        break;
      case 2:
        refresh();
        break;
      case 3:
        if (second) page.cdm_detached(id2, nullptr);
        else page.cdm_attached(id2, 1, 2, 3, 4, 5);
        second = !second;
        break;
    }
    for (uint32_t c = 0; c < cn::cdm::kCount; ++c) {
      const uint64_t t = page.total(cn::cdm::Counter(c));
      if (t < prev[c] || t - before[c] > grown[c]) {
        std::fprintf(stderr, "total %u: %llu -> %llu, the block grew by %llu\n", c,
                     static_cast<unsigned long long>(prev[c]), static_cast<unsigned long long>(t),
                     static_cast<unsigned long long>(grown[c]));
        std::abort();
      }
      prev[c] = t;
    }
  }
  if (second) page.cdm_detached(id2, nullptr);
  page.cdm_detached(id, nullptr);
  if (page.node(cn::node::cdms_attached).value() != 0 || page.node(cn::node::cdms_untracked).value() != 0) {
    std::fprintf(stderr, "attached/untracked gauges not back to 0\n");
    std::abort();
  }
  for (uint32_t i = 0; i < cn::kCdmEntries; ++i) entries[i].state = states[i];
  return 0;
}
