// Finds the executable's writable load segment (data, bss) with dl_iterate_phdr.
#include "data_segment.h"

#include <link.h>

namespace nicemu::dmapp {

namespace {

struct Found {
  uint64_t lo = 0, hi = 0;
  bool done = false;
};

int visit(struct dl_phdr_info* info, size_t, void* arg) {
  auto* f = static_cast<Found*>(arg);
  if (f->done) return 1;
  f->done = true;  // the first object reported is the executable itself
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_W)) continue;
    const uint64_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (!f->lo || lo < f->lo) f->lo = lo;
    if (hi > f->hi) f->hi = hi;
  }
  return 1;
}

}  // namespace

bool find_data_segment(uint64_t& base, uint64_t& len) {
  Found f;
  dl_iterate_phdr(visit, &f);
  if (!f.lo) return false;
  constexpr uint64_t kPage = 4096;
  base = f.lo & ~(kPage - 1);
  len = ((f.hi + kPage - 1) & ~(kPage - 1)) - base;
  return true;
}

}  // namespace nicemu::dmapp
