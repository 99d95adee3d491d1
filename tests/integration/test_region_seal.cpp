// The read-only section of a CDM region cannot be made writable by the processes that get
// its memfd (the owner at attach, peers by lookup): no writable shared mapping, no
// mprotect to write, no write(), no hole punching, no reopening for write, no unsealing.
// A private writable mapping is allowed and changes nothing that others see.
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

// A memfd sealed against writers (the read-only section by the daemon, the MDD table by its
// owner), as a client holding it sees it: no writable mapping, no mprotect to write, no
// write(), no hole punched, no resizing, no unsealing, not even reopened through /proc.
void check_write_sealed(int fd, uint64_t bytes) {
  int seals = fcntl(fd, F_GET_SEALS);
  CHECK((seals & F_SEAL_FUTURE_WRITE) != 0);
  CHECK((seals & F_SEAL_SEAL) != 0);
  CHECK(abi::fd_write_sealed(fd));
  CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == -1);  // sealed seals: no changes at all

  errno = 0;
  CHECK(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  CHECK(errno == EPERM);
  void* ro = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(ro != MAP_FAILED);
  CHECK(mprotect(ro, bytes, PROT_READ | PROT_WRITE) == -1);
  munmap(ro, bytes);

  uint32_t forged = 0xDEADBEEF;
  CHECK(pwrite(fd, &forged, sizeof forged, 0) == -1);
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == -1);
  CHECK(ftruncate(fd, 0) == -1);

  // Reopening through /proc gives the same sealed file.
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  int again = open(self.c_str(), O_RDWR);
  if (again >= 0) {
    CHECK(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0) == MAP_FAILED);
    CHECK(write(again, &forged, sizeof forged) == -1);
    close(again);
  }
}

// The region's read-only memfd and heap as a client holding them sees them.
void check_read_only(int ro_fd, int heap_fd, uint64_t region_size) {
  check_write_sealed(ro_fd, abi::kRoSize);
  void* ro = mmap(nullptr, abi::kRoSize, PROT_READ, MAP_SHARED, ro_fd, 0);
  REQUIRE(ro != MAP_FAILED);
  const auto* h = static_cast<const abi::RegionHeader*>(ro);
  CHECK(h->magic == abi::kRegionMagic);

  // A private copy may be scribbled on; the shared view is unchanged.
  uint32_t forged = 0xDEADBEEF;
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
    check_write_sealed(fds[1], abi::kMddBytes);
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
    check_write_sealed(pfds[1], abi::kMddBytes);  // a peer cannot forge the owner's registrations
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
