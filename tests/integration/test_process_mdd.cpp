// Registrations belong to the process, not to one CDM: a handle registered through one of a
// process's CDMs is valid for accesses that arrive through its other CDMs of the same
// domain on that node (UCX registers through its memory domain's CDM and posts through its
// interfaces'). Deregistration and the registering CDM's destruction end it everywhere.
#include <doctest/doctest.h>

#include <cstring>

#include "harness.h"
#include "nicemu/abi/cq_entry.h"

using namespace harness;
namespace cqe = nicemu::abi::cqe;

namespace {

struct Target {
  uint32_t addr, inst;   // the CDM the initiator binds to (not the registering one)
  uint64_t buf;
  gni_mem_handle_t h;    // registered through the process's other CDM
  uint64_t late_buf;
  gni_mem_handle_t late_h;  // registered before the bound CDM existed
};

uint64_t post(Gni& g, gni_ep_handle_t ep, gni_post_type_t type, uint64_t local, gni_mem_handle_t lh, uint64_t remote,
              gni_mem_handle_t rh, uint64_t len) {
  gni_post_descriptor_t d = make_desc(type, local, lh, remote, rh, len);
  return post_and_wait(g.cq, ep, d);
}

void across_cdms(int nodes) {
  Cluster cl(nodes);
  Cred c = cl.credential();
  Oob oob;
  pid_t t = cl.spawn(nodes - 1, [&] {
    // The "memory domain" CDM registers; the "interface" CDM is what peers bind to.
    gni_cdm_handle_t md_cdm;
    gni_nic_handle_t md_nic;
    uint32_t a = 0;
    CHILD_CHECK(GNI_CdmCreate(100, c.ptag, c.cookie, 0, &md_cdm) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmAttach(md_cdm, 0, &a, &md_nic) == GNI_RC_SUCCESS);
    static uint64_t late[8];
    Target info{};
    info.late_h = mem_register(md_nic, uint64_t(late), sizeof late);
    Gni iface = open_gni(7, c);
    static uint64_t buf[8];
    info.h = mem_register(md_nic, uint64_t(buf), sizeof buf);
    info.addr = iface.addr;
    info.inst = iface.inst;
    info.buf = uint64_t(buf);
    info.late_buf = uint64_t(late);
    oob.send(1, info);
    CHILD_CHECK(oob.recv<int>(1) == 1);  // the initiator wrote both
    CHILD_CHECK(buf[0] == 0x1111 && late[0] == 0x2222);
    // Deregistered through the interface CDM: gone in the memory domain's CDM too.
    CHILD_CHECK(GNI_MemDeregister(iface.nic, &info.late_h) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MemDeregister(md_nic, &info.late_h) == GNI_RC_INVALID_PARAM);
    oob.send(1, 2);
    CHILD_CHECK(oob.recv<int>(1) == 3);
    // Destroying the registering CDM ends its registrations for the other CDM as well.
    CHILD_CHECK(GNI_CdmDestroy(md_cdm) == GNI_RC_SUCCESS);
    oob.send(1, 4);
    CHILD_CHECK(oob.recv<int>(1) == 5);
    CHILD_CHECK(late[0] == 0x2222 && buf[0] == 0x1111);  // the refused writes left nothing
    return 0;
  });
  pid_t i = cl.spawn(0, [&] {
    Gni g = open_gni(3, c);
    Target tg = oob.recv<Target>(0);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, tg.addr, tg.inst);
    static uint64_t src[2] = {0x1111, 0x2222};
    static uint64_t back[1];
    gni_mem_handle_t back_h;
    back_h = mem_register(g.nic, uint64_t(back), sizeof back);
    CHILD_CHECK(post(g, ep, GNI_POST_FMA_PUT, uint64_t(&src[0]), {}, tg.buf, tg.h, 8) == 0);
    CHILD_CHECK(post(g, ep, GNI_POST_FMA_PUT, uint64_t(&src[1]), {}, tg.late_buf, tg.late_h, 8) == 0);
    CHILD_CHECK(post(g, ep, GNI_POST_FMA_GET, uint64_t(back), back_h, tg.buf, tg.h, 8) == 0);
    CHILD_CHECK(back[0] == 0x1111);
    oob.send(0, 1);
    CHILD_CHECK(oob.recv<int>(0) == 2);
    static uint64_t bad = 0xBAD;
    CHILD_CHECK(post(g, ep, GNI_POST_FMA_PUT, uint64_t(&bad), {}, tg.late_buf, tg.late_h, 8) == cqe::kErrProtection);
    oob.send(0, 3);
    CHILD_CHECK(oob.recv<int>(0) == 4);
    CHILD_CHECK(post(g, ep, GNI_POST_FMA_PUT, uint64_t(&bad), {}, tg.buf, tg.h, 8) == cqe::kErrProtection);
    oob.send(0, 5);
    return 0;
  });
  CHECK(cl.wait(i) == 0);
  CHECK(cl.wait(t) == 0);
}

}  // namespace

TEST_CASE("a handle registered through one CDM serves the process's other CDMs (one node)") { across_cdms(1); }

TEST_CASE("a handle registered through one CDM serves the process's other CDMs (two nodes)") { across_cdms(2); }
