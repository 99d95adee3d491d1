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
  gni_mem_handle_t add(uint32_t slot, uint64_t addr, uint64_t len, uint32_t flags, uint32_t gen = 1) {
    auto* e = reinterpret_cast<abi::RegEntry*>(r->base + abi::kRegTableOffset) + slot;
    e->state = abi::kRegLive;
    e->gen = gen;
    e->flags = flags;
    e->address = addr;
    e->length = len;
    e->dst_cq = 3;
    abi::mdh::Fields f{addr & ~uint64_t{4095}, (addr + len - (addr & ~uint64_t{4095}) + 4095) / 4096, gen, slot,
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

TEST_CASE("bounds, read-only, stale generation, freed slot and forged handles are refused") {
  FakeRegion f;
  auto h = f.add(5, 0x10040, 4096, 0);
  CHECK(validate_access(*f.r, h, 0x10000, 8, true, nullptr) == cqe::kErrBounds);
  CHECK(validate_access(*f.r, h, 0x11040 - 4, 8, true, nullptr) == cqe::kErrBounds);
  CHECK(validate_access(*f.r, h, 0x10040, ~uint64_t{0}, true, nullptr) == cqe::kErrBounds);
  auto ro = f.add(6, 0x20000, 4096, GNI_MEM_READ_ONLY);
  CHECK(validate_access(*f.r, ro, 0x20000, 8, true, nullptr) == cqe::kErrReadOnly);
  CHECK(validate_access(*f.r, ro, 0x20000, 8, false, nullptr) == cqe::kOk);
  auto old = f.add(7, 0x30000, 4096, 0, 1);
  f.add(7, 0x30000, 4096, 0, 2);  // slot reused: the old handle is stale
  CHECK(validate_access(*f.r, old, 0x30000, 8, true, nullptr) == cqe::kErrProtection);
  f.drop(5);
  CHECK(validate_access(*f.r, h, 0x10040, 8, true, nullptr) == cqe::kErrProtection);
  gni_mem_handle_t forged = ro;
  forged.qword2 ^= uint64_t{1} << 42;  // another slot, CRC now wrong
  CHECK(validate_access(*f.r, forged, 0x20000, 8, false, nullptr) == cqe::kErrProtection);
  gni_mem_handle_t zero{};
  CHECK(validate_access(*f.r, zero, 0x20000, 8, false, nullptr) == cqe::kErrProtection);
}
