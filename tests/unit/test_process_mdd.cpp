// The process's MDD table as the daemon keeps it (process_mdd.h): one table behind every
// region of a process's CDMs of one credential, entries the owner writes next to those the
// daemon makes in slots the owner chose, and the daemon acting only on what it made.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <vector>

#include "cdm_fixture.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"

using namespace nicemu;
using namespace nicemu::daemon;
namespace rc = nicemu::abi::gni;

namespace {

constexpr uint32_t kPtag = 11, kCookie = 0x77000000;

// Two CDMs of one process and credential, over one table, and the owner's writable view.
struct Family {
  std::shared_ptr<ProcessMdd> mdd = std::make_shared<ProcessMdd>(getpid());
  std::unique_ptr<CdmRegion> a = make(1, 1), b = make(2, 2);
  abi::RegEntry* owner = nullptr;
  std::vector<char> mem = std::vector<char>(3 * 4096);

  Family() {
    void* p = mmap(nullptr, abi::kMddBytes, PROT_READ | PROT_WRITE, MAP_SHARED, mdd->memfd(), 0);
    REQUIRE(p != MAP_FAILED);
    owner = static_cast<abi::RegEntry*>(p);
  }
  ~Family() { munmap(owner, abi::kMddBytes); }
  std::unique_ptr<CdmRegion> make(uint32_t inst, uint64_t id) {
    abi::ctl::Attach at{};
    at.inst_id = inst;
    at.ptag = kPtag;
    at.cookie = kCookie;
    return std::make_unique<CdmRegion>(0, rc::kDeviceAries, at, getpid(), id, cdm_fixture::kRegion,
                                       static_cast<uint32_t>(id), mdd);
  }
  // What libugni's MddTable::publish does.
  void owner_writes(uint32_t slot, uint32_t domain, uint64_t address, uint64_t length) {
    abi::RegEntry& e = owner[slot];
    uint32_t seq = 0;
    REQUIRE(abi::reg_write_begin(e, seq));
    e.gen = (e.gen + 1) & abi::mdh::kGenMask;
    e.address = address;
    e.length = length;
    e.dst_cq = abi::kNoCq;
    e.domain = domain;
    e.state = abi::kRegLive;
    abi::reg_write_end(e, seq);
  }
  bool live_in(const CdmRegion& r, uint32_t slot) {
    abi::RegEntry e;
    return abi::region_read_reg(reinterpret_cast<const char*>(r.header()), slot, e) && e.state == abi::kRegLive;
  }
};

}  // namespace

TEST_CASE("an entry the owner writes is seen through every region of its CDMs") {
  Family f;
  f.owner_writes(7, f.a->mem_domain(), uint64_t(f.mem.data()), f.mem.size());
  CHECK(f.live_in(*f.a, 7));
  CHECK(f.live_in(*f.b, 7));
  CHECK(f.a->live_registrations() == 1);
  CHECK(f.b->live_registrations() == 0);  // counted for the CDM it was made through
}

TEST_CASE("the daemon makes registrations only in free slots, and undoes only its own") {
  Family f;
  f.owner_writes(3, f.a->mem_domain(), uint64_t(f.mem.data()), 4096);
  RegSpec spec{uint64_t(f.mem.data()) + 4096, 4096, 0, abi::kNoCq, {}};
  abi::ctl::MemRegisterReply rep{};
  CHECK(f.mdd->store(3, spec, abi::kNoCq, f.a->mem_domain(), rep) == rc::kInvalidParam);  // the owner's
  CHECK(f.mdd->store(abi::kRegSlots, spec, abi::kNoCq, f.a->mem_domain(), rep) == rc::kInvalidParam);
  REQUIRE(f.mdd->store(4, spec, abi::kNoCq, f.a->mem_domain(), rep) == rc::kSuccess);
  auto h = abi::mdh::decode(rep.qword1, rep.qword2);
  REQUIRE(h);
  CHECK(h->slot == 4);
  CHECK(h->domain == f.a->mem_domain());
  CHECK(f.live_in(*f.b, 4));
  CHECK(f.mdd->store(4, spec, abi::kNoCq, f.a->mem_domain(), rep) == rc::kInvalidParam);  // taken now

  // The owner's entry is not the daemon's to remove, whatever handle names it.
  uint64_t q1, q2;
  abi::mdh::encode(abi::mdh::registration_fields(uint64_t(f.mem.data()), 4096, f.a->mem_domain(), 3, false), q1, q2);
  CHECK(f.mdd->deregister(q1, q2) == rc::kInvalidParam);
  CHECK(f.live_in(*f.a, 3));
  CHECK(f.mdd->deregister(rep.qword1, rep.qword2) == rc::kSuccess);
  CHECK_FALSE(f.live_in(*f.a, 4));
  CHECK(f.mdd->deregister(rep.qword1, rep.qword2) == rc::kInvalidParam);  // gone
}

TEST_CASE("a CDM that goes takes its registrations along, not its siblings'") {
  Family f;
  f.owner_writes(1, f.a->mem_domain(), uint64_t(f.mem.data()), 4096);
  f.owner_writes(2, f.b->mem_domain(), uint64_t(f.mem.data()), 4096);
  // A segmented registration through `a` holds a run of the segment table.
  RegSpec segs{0, 0, 0, abi::kNoCq, {}};
  for (uint32_t i = 0; i < abi::kMaxRegSegments; ++i) {
    segs.segments.push_back({uint64_t(f.mem.data()), 64});
    segs.length += 64;
  }
  abi::ctl::MemRegisterReply rep{};
  REQUIRE(f.mdd->store(5, segs, abi::kNoCq, f.a->mem_domain(), rep) == rc::kSuccess);
  f.a->kill(abi::kRegionDead);
  CHECK_FALSE(f.live_in(*f.b, 1));
  CHECK_FALSE(f.live_in(*f.b, 5));
  CHECK(f.live_in(*f.b, 2));
  // Its segment run is free again: the table takes 16 registrations of 1024 segments.
  for (uint32_t s = 100; s < 116; ++s) CHECK(f.mdd->store(s, segs, abi::kNoCq, f.b->mem_domain(), rep) == rc::kSuccess);
  CHECK(f.mdd->store(116, segs, abi::kNoCq, f.b->mem_domain(), rep) == rc::kErrorResource);
}

TEST_CASE("an entry whose seqlock the owner keeps taken stalls nobody") {
  Family f;
  f.owner_writes(9, f.a->mem_domain(), uint64_t(f.mem.data()), 4096);
  f.owner[9].seq.fetch_add(1);  // odd, forever
  abi::RegEntry e;
  CHECK_FALSE(abi::region_read_reg(reinterpret_cast<const char*>(f.a->header()), 9, e));  // readers refuse it
  RegSpec spec{uint64_t(f.mem.data()), 4096, 0, abi::kNoCq, {}};
  abi::ctl::MemRegisterReply rep{};
  CHECK(f.mdd->store(9, spec, abi::kNoCq, f.a->mem_domain(), rep) == rc::kInvalidParam);
  f.a->kill(abi::kRegionDead);  // returns: the entry is left as it is
  CHECK(f.owner[9].seq.load() % 2 == 1);
}
