// The read-only section of a CDM region cannot be made writable by the processes that get
// its memfd (the owner at attach, peers by lookup): no writable shared mapping, no
// mprotect to write, no write(), no hole punching, no reopening for write, no unsealing.
// A private writable mapping is allowed and changes nothing that others see.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>

#include <cstring>

#include "harness.h"
#include "nicemu/abi/region_map.h"
#include "nicemu/abi/shm_layout.h"

using namespace harness;
namespace ctl = nicemu::abi::ctl;
namespace abi = nicemu::abi;

namespace {

// What a client holding the read-only memfd can try; every attempt to write must fail.
void check_read_only(int ro_fd, int heap_fd, uint64_t region_size) {
  int seals = fcntl(ro_fd, F_GET_SEALS);
  CHECK((seals & F_SEAL_FUTURE_WRITE) != 0);
  CHECK((seals & F_SEAL_SEAL) != 0);
  CHECK(fcntl(ro_fd, F_ADD_SEALS, F_SEAL_WRITE) == -1);  // sealed seals: no changes at all

  errno = 0;
  CHECK(mmap(nullptr, abi::kRoSize, PROT_READ | PROT_WRITE, MAP_SHARED, ro_fd, 0) == MAP_FAILED);
  CHECK(errno == EPERM);

  void* ro = mmap(nullptr, abi::kRoSize, PROT_READ, MAP_SHARED, ro_fd, 0);
  REQUIRE(ro != MAP_FAILED);
  CHECK(mprotect(ro, abi::kRoSize, PROT_READ | PROT_WRITE) == -1);
  const auto* h = static_cast<const abi::RegionHeader*>(ro);
  CHECK(h->magic == abi::kRegionMagic);

  uint32_t forged = 0xDEADBEEF;
  CHECK(pwrite(ro_fd, &forged, sizeof forged, 0) == -1);
  CHECK(fallocate(ro_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == -1);
  CHECK(ftruncate(ro_fd, 0) == -1);

  // Reopening through /proc gives the same sealed file.
  std::string self = "/proc/self/fd/" + std::to_string(ro_fd);
  int again = open(self.c_str(), O_RDWR);
  if (again >= 0) {
    CHECK(mmap(nullptr, abi::kRoSize, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0) == MAP_FAILED);
    CHECK(write(again, &forged, sizeof forged) == -1);
    close(again);
  }

  // A private copy may be scribbled on; the shared view is unchanged.
  void* priv = mmap(nullptr, abi::kRoSize, PROT_READ | PROT_WRITE, MAP_PRIVATE, ro_fd, 0);
  REQUIRE(priv != MAP_FAILED);
  std::memcpy(priv, &forged, sizeof forged);
  CHECK(h->magic == abi::kRegionMagic);
  munmap(priv, abi::kRoSize);
  munmap(ro, abi::kRoSize);

  // The heap stays writable (rings, mailboxes) and is sized as announced.
  void* heap = mmap(nullptr, region_size - abi::kRoSize, PROT_READ | PROT_WRITE, MAP_SHARED, heap_fd, 0);
  CHECK(heap != MAP_FAILED);
  if (heap != MAP_FAILED) munmap(heap, region_size - abi::kRoSize);
  CHECK(ftruncate(heap_fd, 0) == -1);  // size sealed
}

// The MDD table's memfd, as the owner sealed it: no writable mapping, no write(), no hole
// punched, no resizing, no unsealing.
void check_mdd_sealed(int mdd_fd) {
  CHECK(abi::fd_write_sealed(mdd_fd));
  CHECK(fcntl(mdd_fd, F_ADD_SEALS, F_SEAL_WRITE) == -1);
  errno = 0;
  CHECK(mmap(nullptr, abi::kMddBytes, PROT_READ | PROT_WRITE, MAP_SHARED, mdd_fd, 0) == MAP_FAILED);
  CHECK(errno == EPERM);
  void* ro = mmap(nullptr, abi::kMddBytes, PROT_READ, MAP_SHARED, mdd_fd, 0);
  REQUIRE(ro != MAP_FAILED);
  CHECK(mprotect(ro, abi::kMddBytes, PROT_READ | PROT_WRITE) == -1);
  munmap(ro, abi::kMddBytes);
  uint32_t forged = 1;
  CHECK(pwrite(mdd_fd, &forged, sizeof forged, 0) == -1);
  CHECK(fallocate(mdd_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == -1);
  CHECK(ftruncate(mdd_fd, 0) == -1);
}

}  // namespace

TEST_CASE_FIXTURE(OneNode, "the read-only section stays read-only for its owner and for peers") {
  nicemu::ctl::Connection owner;
  ctl::AttachReply ar{};
  int fds[3];
  char* mdd_rw = nullptr;
  REQUIRE(attach_by_hand(owner, cl.socket(0), 3, c, ar, fds, &mdd_rw));
  REQUIRE(ar.r.rc == GNI_RC_SUCCESS);
  REQUIRE(fds[0] >= 0);
  REQUIRE(fds[1] >= 0);
  REQUIRE(fds[2] >= 0);
  CHECK(ar.ro_size == abi::kRoSize);
  SUBCASE("owner") {
    check_read_only(fds[0], fds[2], ar.region_size);
    // The MDD table: the owner writes it through the one mapping it made before sealing it;
    // no new writable mapping, for the owner either.
    check_mdd_sealed(fds[1]);
    REQUIRE(mdd_rw != nullptr);
    auto* e = reinterpret_cast<abi::RegEntry*>(mdd_rw);
    e[5].length = 4096;
    CHECK(e[5].length == 4096);
  }

  SUBCASE("peer") {
    nicemu::ctl::Connection peer;
    REQUIRE(peer.connect(cl.socket(0)));
    ctl::PeerLookup pl{};
    pl.h.op = uint16_t(ctl::Op::kPeerLookup);
    pl.nic_addr = cl.addr(0);
    pl.mem_domain = ar.mem_domain;
    pl.ptag = c.ptag;
    pl.cookie = c.cookie;
    ctl::PeerLookupReply pr{};
    int pfds[3] = {-1, -1, -1};
    REQUIRE(peer.call(pl, pr, pfds, 3));
    REQUIRE(pr.r.rc == GNI_RC_SUCCESS);
    REQUIRE(pfds[0] >= 0);
    REQUIRE(pfds[1] >= 0);
    REQUIRE(pfds[2] >= 0);
    check_read_only(pfds[0], pfds[2], pr.region_size);
    check_mdd_sealed(pfds[1]);  // a peer cannot forge the owner's registrations
    for (int fd : pfds) close(fd);
  }
  close(fds[0]);
  close(fds[1]);
  close(fds[2]);
}

TEST_CASE("libugni attaches and works on the two-memfd region") {
  CHECK(in_one_child(1, 30, [&](Cluster&, Cred, Gni& g) {
    static char buf[4096];
    gni_mem_handle_t h;
    h = mem_register(g.nic, uint64_t(buf), sizeof buf, g.rcq, GNI_MEM_READWRITE);
    CHILD_CHECK(GNI_MemDeregister(g.nic, &h) == GNI_RC_SUCCESS);
    return 0;
  }) == 0);
}
