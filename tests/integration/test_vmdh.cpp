// Virtual-MDH registrations (issue 22): GNI_SetMddResources, GNI_MEM_USE_VMDH with a given
// or a library-chosen index, GNI_MEM_RESERVE_REGION / GNI_MEM_UPDATE_REGION and
// GNI_RebuildMemHndl, the way libfabric's gni provider uses them for FI_MR_SCALABLE: a
// peer turns a bare index into a handle (VA 0, MDH = index, page count unbounded, flag
// VMDH) and addresses offsets from the registration's first page. FMA PUT/GET/AMO, RDMA
// PUT/GET and CQ writes through such handles; the refusals (unknown index, bounds,
// read-only, a reservation not filled in yet); and the block belonging to the node's
// protection domain, not to one process. One node, two nodes, the BTE engine, and
// (NICEMU_TEST_FABRIC=1) across hosts.
#include <doctest/doctest.h>

#include <cstring>

#include "harness.h"

using namespace harness;

namespace {

constexpr size_t kBuf = 3 * 4096;
constexpr uint32_t kBlock = 64;
constexpr uint32_t kRw = 5, kRo = 6, kLazy = 7, kNeighbour = 9;

// The provider's _gnix_convert_key_to_mhdl for a scalable key: no VA, MDH = the index,
// pages unbounded, flag VMDH (0x02 in qword2 bits 41..34); CRC left 0 as for its FMA posts.
gni_mem_handle_t vmdh_handle(uint32_t index) {
  gni_mem_handle_t h{0, 0};
  h.qword1 = uint64_t{index & 0xFFF} << 52;
  h.qword2 = 0xFFFFFFFull | (uint64_t{12} << 28) | (uint64_t{0x02} << 34);
  return h;
}
uint32_t mdh_of(const gni_mem_handle_t& h) { return uint32_t(h.qword1 >> 52) & 0xFFF; }

struct Target {
  uint32_t addr;
  uint64_t rw;
  gni_mem_handle_t rw_issued;  // what GNI_MemRegister returned (VA set)
  uint32_t chosen;             // the index the library chose for (uint32_t)-1
};

int target(Oob& oob, Oob& nb, Cred c) {
  Gni g = open_gni(7, c);
  alignas(4096) static char rw[kBuf + 4096], ro[kBuf], lazy[kBuf], other[4096];
  std::memset(rw, 't', sizeof rw);
  std::memset(ro, 'r', sizeof ro);
  std::memset(lazy, 'l', sizeof lazy);
  gni_mem_handle_t h;
  // "Will fail if GNI_SetMddResources has not been called".
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(rw), kBuf, g.rcq, GNI_MEM_USE_VMDH, kRw, &h) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(GNI_SetMddResources(g.nic, 5000) == GNI_RC_INVALID_PARAM);  // more than the MDH field holds
  CHILD_CHECK(GNI_SetMddResources(g.nic, kBlock) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(rw), kBuf, g.rcq, GNI_MEM_USE_VMDH, kBlock, &h) == GNI_RC_INVALID_PARAM);
  gni_mem_handle_t rwh, roh, lazyh, anyh;
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(rw), kBuf, g.rcq, GNI_MEM_USE_VMDH, kRw, &rwh) == GNI_RC_SUCCESS);
  CHILD_CHECK(mdh_of(rwh) == kRw);
  int yes = 0;
  CHILD_CHECK(GNI_MemHndlQueryAttr(&rwh, GNI_MEMHNDL_ATTR_VMDH, &yes) == GNI_RC_SUCCESS && yes == 1);
  // An index in use: GNI_RC_ERROR_RESOURCE.
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(other), 4096, nullptr, GNI_MEM_USE_VMDH, kRw, &h) ==
              GNI_RC_ERROR_RESOURCE);
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(ro), kBuf, nullptr, GNI_MEM_USE_VMDH | GNI_MEM_READ_ONLY, kRo, &roh) ==
              GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(lazy), kBuf, nullptr, GNI_MEM_USE_VMDH | GNI_MEM_RESERVE_REGION, kLazy,
                              &lazyh) == GNI_RC_SUCCESS);
  anyh = mem_register(g.nic, uint64_t(other), 4096, nullptr, GNI_MEM_USE_VMDH);
  // Multi-segment registrations take indices the same way (and give them back).
  static char seg_a[4096], seg_b[4096];
  gni_mem_segment_t segs[2] = {{uint64_t(seg_a), sizeof seg_a}, {uint64_t(seg_b), sizeof seg_b}};
  gni_mem_handle_t segh;
  CHILD_CHECK(GNI_MemRegisterSegments(g.nic, segs, 2, nullptr, GNI_MEM_USE_VMDH, 11, &segh) == GNI_RC_SUCCESS);
  CHILD_CHECK(mdh_of(segh) == 11);
  CHILD_CHECK(GNI_MemRegisterSegments(g.nic, segs, 2, nullptr, GNI_MEM_USE_VMDH, 11, &h) == GNI_RC_ERROR_RESOURCE);
  CHILD_CHECK(GNI_MemDeregister(g.nic, &segh) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_MemRegisterSegments(g.nic, segs, 2, nullptr, GNI_MEM_USE_VMDH, 11, &segh) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_MemDeregister(g.nic, &segh) == GNI_RC_SUCCESS);
  Target t{g.addr, uint64_t(rw), rwh, mdh_of(anyh)};
  CHILD_CHECK(t.chosen == 0);  // the first free entry of the block
  oob.send(1, t);

  CHILD_CHECK(oob.recv<int>(1) == 1);  // the initiator found the reservation closed
  // Fill in part of the reservation: the first update makes it live.
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(lazy) + kBuf, 4096, nullptr, GNI_MEM_UPDATE_REGION, kLazy, &lazyh) ==
              GNI_RC_INVALID_PARAM);  // outside the reserved pages
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(lazy), 4096, nullptr, GNI_MEM_UPDATE_REGION, kLazy, &lazyh) ==
              GNI_RC_SUCCESS);
  CHILD_CHECK(mdh_of(lazyh) == kLazy);
  oob.send(1, 2);

  CHILD_CHECK(oob.recv<int>(1) == 3);
  for (size_t i = 0; i < 64; ++i) CHILD_CHECK(rw[i] == 'F');                 // FMA PUT at offset 0
  for (size_t i = 4096; i < 4096 + 6000; ++i) CHILD_CHECK(rw[i] == 'R');    // RDMA PUT
  for (size_t i = 1000; i < 1016; ++i) CHILD_CHECK(rw[i] == 'V');           // through the issued handle (by VA)
  uint64_t word;
  std::memcpy(&word, rw + 256, 8);
  CHILD_CHECK(word == 40 + 2);  // FADD
  CHILD_CHECK(lazy[8] == 'L');
  for (size_t i = 0; i < sizeof ro; ++i) CHILD_CHECK(ro[i] == 'r');  // nothing wrote read-only memory
  CHILD_CHECK(rw[kBuf] == 't');                                       // nor past the registration
  gni_cq_entry_t e = 0;
  bool found = false;
  for (int tries = 0; tries < 2000 && !found; ++tries)
    if (GNI_CqWaitEvent(g.rcq, 5, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_DATA(e) == 0xBEEFull) found = true;
  CHILD_CHECK(found);  // the CQ write through the vMDH handle
  // Deregistering frees the index for the next registration.
  CHILD_CHECK(GNI_MemDeregister(g.nic, &rwh) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(rw), kBuf, nullptr, GNI_MEM_USE_VMDH, kRw, &rwh) == GNI_RC_SUCCESS);
  oob.send(1, 4);
  nb.send(1, 4);
  CHILD_CHECK(nb.recv<int>(1) == 5);  // the neighbour is done
  return 0;
}

// Another process of the job on the target's node: the block is the node's, so the
// indices the target took are taken for it too.
int neighbour(Oob& nb, Cred c) {
  Gni g = open_gni(8, c);
  CHILD_CHECK(nb.recv<int>(0) == 4);
  CHILD_CHECK(GNI_SetMddResources(g.nic, kBlock) == GNI_RC_SUCCESS);
  alignas(4096) static char mine[4096];
  gni_mem_handle_t h;
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(mine), 4096, nullptr, GNI_MEM_USE_VMDH, kRw, &h) ==
              GNI_RC_ERROR_RESOURCE);
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(mine), 4096, nullptr, GNI_MEM_USE_VMDH, kNeighbour, &h) ==
              GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_MemDeregister(g.nic, &h) == GNI_RC_SUCCESS);
  nb.send(0, 5);
  return 0;
}

int initiator(Oob& oob, Cred c) {
  Gni g = open_gni(3, c);
  Target t = oob.recv<Target>(0);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, 7);
  alignas(4096) static char src[kBuf], back[kBuf];
  gni_mem_handle_t sh, bh;
  sh = mem_register(g.nic, uint64_t(src), kBuf);
  bh = mem_register(g.nic, uint64_t(back), kBuf);
  const gni_mem_handle_t rw = vmdh_handle(kRw), ro = vmdh_handle(kRo), lazy = vmdh_handle(kLazy);

  // The reservation is closed until its pages are filled in.
  std::memset(src, 'L', 64);
  auto early = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, 8, lazy, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, early) != 0);
  oob.send(0, 1);
  CHILD_CHECK(oob.recv<int>(0) == 2);
  auto late = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, 8, lazy, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, late) == 0);

  // FMA PUT at offset 0 and GET back.
  std::memset(src, 'F', 64);
  auto put = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, 0, rw, 64);
  CHILD_CHECK(post_and_wait(g.cq, ep, put) == 0);
  auto get = make_desc(GNI_POST_FMA_GET, uint64_t(back), bh, 0, rw, 64);
  CHILD_CHECK(post_and_wait(g.cq, ep, get) == 0);
  CHILD_CHECK(std::memcmp(back, src, 64) == 0);
  // A fetching AMO.
  uint64_t forty = 40;
  std::memcpy(src + 128, &forty, 8);
  auto seed = make_desc(GNI_POST_FMA_PUT, uint64_t(src + 128), sh, 256, rw, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, seed) == 0);
  auto fadd = make_desc(GNI_POST_AMO, uint64_t(back + 512), bh, 256, rw, 8);
  fadd.amo_cmd = GNI_FMA_ATOMIC_FADD;
  fadd.first_operand = 2;
  CHILD_CHECK(post_and_wait(g.cq, ep, fadd) == 0);
  uint64_t old = 0;
  std::memcpy(&old, back + 512, 8);
  CHILD_CHECK(old == 40);
  // RDMA PUT and GET across the second and third pages.
  std::memset(src, 'R', 6000);
  auto rput = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), sh, 4096, rw, 6000);
  CHILD_CHECK(post_and_wait(g.cq, ep, rput) == 0);
  std::memset(back, 0, kBuf);
  auto rget = make_desc(GNI_POST_RDMA_GET, uint64_t(back), bh, 4096, rw, 6000);
  CHILD_CHECK(post_and_wait(g.cq, ep, rget) == 0);
  CHILD_CHECK(std::memcmp(back, src, 6000) == 0);
  // The handle the target's GNI_MemRegister issued carries the VA: it addresses by VA.
  std::memset(src, 'V', 16);
  auto byva = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t.rw + 1000, t.rw_issued, 16);
  CHILD_CHECK(post_and_wait(g.cq, ep, byva) == 0);
  gni_mem_handle_t rebuilt;
  CHILD_CHECK(GNI_RebuildMemHndl(&t.rw_issued, kRo, &rebuilt) == GNI_RC_SUCCESS);
  CHILD_CHECK(mdh_of(rebuilt) == kRo);
  CHILD_CHECK(GNI_RebuildMemHndl(&sh, kRo, &rebuilt) == GNI_RC_INVALID_PARAM);  // not a vMDH handle
  // Read-only memory can be read.
  auto roget = make_desc(GNI_POST_FMA_GET, uint64_t(back), bh, 0, ro, 16);
  CHILD_CHECK(post_and_wait(g.cq, ep, roget) == 0);
  CHILD_CHECK(back[0] == 'r');

  // Refusals, as error completions (the target checks that nothing was written).
  std::memset(src, 'X', kBuf);
  auto past = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, kBuf - 8, rw, 64);
  CHILD_CHECK(post_and_wait(g.cq, ep, past) != 0);
  auto rpast = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), sh, 4096, rw, kBuf);
  CHILD_CHECK(post_and_wait(g.cq, ep, rpast) != 0);
  auto ro_put = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, 0, ro, 16);
  CHILD_CHECK(post_and_wait(g.cq, ep, ro_put) != 0);
  auto unknown = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, 0, vmdh_handle(40), 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, unknown) != 0);
  // A CQ write through the vMDH handle.
  auto cqw = cqwrite_desc(rw, 0xBEEF);
  CHILD_CHECK(post_and_wait(g.cq, ep, cqw) == 0);
  oob.send(0, 3);
  CHILD_CHECK(oob.recv<int>(0) == 4);
  return 0;
}

void run(int target_node, int initiator_node) {
  Cluster cl(2);
  Cred c = cl.credential();
  Oob oob, nb;
  pid_t t = cl.spawn(target_node, [&] { return target(oob, nb, c); });
  pid_t i = cl.spawn(initiator_node, [&] { return initiator(oob, c); });
  pid_t n = cl.spawn(target_node, [&] { return neighbour(nb, c); });
  CHECK(cl.wait(i) == 0);
  CHECK(cl.wait(n) == 0);
  CHECK(cl.wait(t) == 0);
}

}  // namespace

TEST_CASE("vMDH registrations: one node") {
  if (across_hosts()) return;  // across hosts means two nodes
  run(0, 0);
}

TEST_CASE("vMDH registrations: two emulated nodes") { run(1, 0); }
