// Target-side validation of remote accesses against a registration table, on a region
// built in plain memory the way the daemon lays it out.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace cqe = nicemu::abi::cqe;

namespace {
struct FakeRegion {
  FakeRegion() {
    r = std::make_shared<Region>();
    r->size = abi::kRoSize + (1 << 20);
    r->base = static_cast<char*>(mmap(nullptr, r->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    auto* h = new (r->base) abi::RegionHeader{};
    h->state.store(abi::kRegionAlive);
  }
  gni_mem_handle_t add(uint32_t slot, uint64_t addr, uint64_t len, uint32_t flags, uint32_t domain = 1) {
    auto* e = reinterpret_cast<abi::RegEntry*>(r->base + abi::kRegTableOffset) + slot;
    e->state = abi::kRegLive;
    e->domain = domain;
    e->flags = flags;
    e->address = addr;
    e->length = len;
    e->dst_cq = 3;
    abi::mdh::Fields f{addr & ~uint64_t{4095}, (addr + len - (addr & ~uint64_t{4095}) + 4095) / 4096, domain, slot,
                       (flags & GNI_MEM_READ_ONLY) ? abi::mdh::kFlagReadOnly : 0u};
    gni_mem_handle_t h;
    abi::mdh::encode(f, h.qword1, h.qword2);
    return h;
  }
  void drop(uint32_t slot) {
    auto* e = reinterpret_cast<abi::RegEntry*>(r->base + abi::kRegTableOffset) + slot;
    e->state = abi::kRegFree;
  }
  std::shared_ptr<Region> r;
};
}  // namespace

TEST_CASE("inside the registration: allowed, and the remote-event CQ is reported") {
  FakeRegion f;
  auto h = f.add(5, 0x10040, 4096, 0);
  uint32_t cq = 0;
  CHECK(validate_access(*f.r, h, 0x10040, 4096, true, &cq) == cqe::kOk);
  CHECK(cq == 3);
  CHECK(validate_access(*f.r, h, 0x11000, 64, false, nullptr) == cqe::kOk);
}

TEST_CASE("bounds, read-only, stale handles, other domains, freed slot and forged handles are refused") {
  FakeRegion f;
  auto h = f.add(5, 0x10040, 4096, 0);
  CHECK(validate_access(*f.r, h, 0x10000, 8, true, nullptr) == cqe::kErrBounds);
  CHECK(validate_access(*f.r, h, 0x11040 - 4, 8, true, nullptr) == cqe::kErrBounds);
  CHECK(validate_access(*f.r, h, 0x10040, ~uint64_t{0}, true, nullptr) == cqe::kErrBounds);
  auto ro = f.add(6, 0x20000, 4096, GNI_MEM_READ_ONLY);
  CHECK(validate_access(*f.r, ro, 0x20000, 8, true, nullptr) == cqe::kErrReadOnly);
  CHECK(validate_access(*f.r, ro, 0x20000, 8, false, nullptr) == cqe::kOk);
  auto old = f.add(7, 0x30000, 4096, 0);
  f.add(7, 0x40000, 4096, 0);  // slot reused for other memory: the old handle is stale
  CHECK(validate_access(*f.r, old, 0x30000, 8, true, nullptr) == cqe::kErrProtection);
  auto shorter = f.add(7, 0x40000, 4096, 0);
  f.add(7, 0x40000, 3 * 4096, 0);  // same start, more pages: not the registration it names
  CHECK(validate_access(*f.r, shorter, 0x40000, 8, true, nullptr) == cqe::kErrProtection);
  auto theirs = f.add(8, 0x50000, 4096, 0, 2);
  f.add(8, 0x50000, 4096, 0, 3);  // a copy registered by another CDM (memory domain 3)
  CHECK(validate_access(*f.r, theirs, 0x50000, 8, true, nullptr) == cqe::kErrProtection);
  f.drop(5);
  CHECK(validate_access(*f.r, h, 0x10040, 8, true, nullptr) == cqe::kErrProtection);
  gni_mem_handle_t forged = ro;
  forged.qword2 ^= uint64_t{1} << 42;  // another slot, CRC now wrong
  CHECK(validate_access(*f.r, forged, 0x20000, 8, false, nullptr) == cqe::kErrProtection);
  gni_mem_handle_t zero{};
  CHECK(validate_access(*f.r, zero, 0x20000, 8, false, nullptr) == cqe::kErrProtection);
}

namespace {
// A multi-segment registration in `slot`: offsets 0.. map to the given (address, length)
// pieces, in that order, through the segment table starting at `first`.
gni_mem_handle_t add_segments(FakeRegion& f, uint32_t slot, uint32_t first,
                              std::initializer_list<std::pair<uint64_t, uint64_t>> segs, uint32_t flags = 0) {
  auto* table = reinterpret_cast<abi::SegEntry*>(f.r->base + abi::kSegTableOffset) + first;
  uint64_t off = 0;
  uint32_t n = 0;
  for (auto [a, l] : segs) {
    table[n++] = abi::SegEntry{off, a, l, 0};
    off += l;
  }
  gni_mem_handle_t h = f.add(slot, 0, off, flags);
  auto* e = reinterpret_cast<abi::RegEntry*>(f.r->base + abi::kRegTableOffset) + slot;
  e->seg_count = n;
  e->seg_first = first;
  return h;
}
}  // namespace

TEST_CASE("a plain registration translates to the range itself") {
  FakeRegion f;
  auto h = f.add(5, 0x10040, 4096, 0);
  abi::Extents x;
  CHECK(translate_access(*f.r, h, 0x10100, 256, true, nullptr, x) == cqe::kOk);
  REQUIRE(x.size() == 1);
  CHECK(x[0].va == 0x10100);
  CHECK(x[0].len == 256);
  CHECK(translate_access(*f.r, h, 0x10100, 0, true, nullptr, x) == cqe::kOk);
  CHECK(x.size() == 0);  // zero-length PUT: nothing to move
}

TEST_CASE("offsets of a multi-segment registration translate into pieces across boundaries") {
  FakeRegion f;
  // Segments out of address order, odd lengths: offsets [0,100) [100,1100) [1100,1107).
  auto h = add_segments(f, 9, 40, {{0x50000, 100}, {0x20000, 1000}, {0x90003, 7}});
  abi::Extents x;
  uint32_t cq = 0;
  CHECK(translate_access(*f.r, h, 0, 1107, false, &cq, x) == cqe::kOk);
  CHECK(cq == 3);
  REQUIRE(x.size() == 3);
  CHECK((x[0].va == 0x50000 && x[0].len == 100));
  CHECK((x[1].va == 0x20000 && x[1].len == 1000));
  CHECK((x[2].va == 0x90003 && x[2].len == 7));
  CHECK(translate_access(*f.r, h, 96, 8, true, nullptr, x) == cqe::kOk);  // straddles the first boundary
  REQUIRE(x.size() == 2);
  CHECK((x[0].va == 0x50000 + 96 && x[0].len == 4));
  CHECK((x[1].va == 0x20000 && x[1].len == 4));
  CHECK(translate_access(*f.r, h, 1099, 2, true, nullptr, x) == cqe::kOk);
  REQUIRE(x.size() == 2);
  CHECK((x[0].va == 0x20000 + 999 && x[1].va == 0x90003));
  CHECK(translate_access(*f.r, h, 500, 10, true, nullptr, x) == cqe::kOk);  // inside one segment
  REQUIRE(x.size() == 1);
  CHECK(x[0].va == 0x20000 + 400);
  // Past the end of the concatenation, or at a virtual address instead of an offset.
  CHECK(translate_access(*f.r, h, 1100, 8, false, nullptr, x) == cqe::kErrBounds);
  CHECK(translate_access(*f.r, h, 0x20000, 8, false, nullptr, x) == cqe::kErrBounds);
  CHECK(validate_access(*f.r, h, 1000, 107, false, nullptr) == cqe::kOk);
  CHECK(validate_access(*f.r, h, 1000, 108, false, nullptr) == cqe::kErrBounds);
}

TEST_CASE("segment tables the daemon would never write are refused, not followed") {
  FakeRegion f;
  auto h = add_segments(f, 9, 0, {{0x50000, 100}, {0x20000, 100}});
  auto* seg = reinterpret_cast<abi::SegEntry*>(f.r->base + abi::kSegTableOffset);
  abi::Extents x;
  seg[1].offset = 120;  // a gap between the segments
  CHECK(translate_access(*f.r, h, 90, 20, false, nullptr, x) == cqe::kErrProtection);
  seg[1].offset = 100;
  auto* e = reinterpret_cast<abi::RegEntry*>(f.r->base + abi::kRegTableOffset) + 9;
  e->seg_first = abi::kSegSlots - 1;  // runs off the end of the table
  CHECK(translate_access(*f.r, h, 0, 8, false, nullptr, x) == cqe::kErrProtection);
  e->seg_first = 0;
  e->seg_count = abi::kMaxRegSegments + 1;
  CHECK(translate_access(*f.r, h, 0, 8, false, nullptr, x) == cqe::kErrProtection);
  e->seg_count = 2;
  CHECK(translate_access(*f.r, h, 0, 200, false, nullptr, x) == cqe::kOk);
  auto ro = add_segments(f, 10, 8, {{0x70000, 64}}, GNI_MEM_READ_ONLY);
  CHECK(translate_access(*f.r, ro, 0, 8, true, nullptr, x) == cqe::kErrReadOnly);
  CHECK(translate_access(*f.r, ro, 0, 8, false, nullptr, x) == cqe::kOk);
}
