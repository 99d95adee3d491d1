// Cray-native behaviours beyond Open MPI and UCX (issue 20), each written from the API's
// documentation: EPs bound with the program's own ids (memory is reached through the NIC
// address and the memory handle), GNI_CdmAttach with device -1, SMSG credits that come
// back as an event, two-operand AMOs posted with both operands' length, and
// GNI_RDMAMODE_PHYS_ADDR on a user-space RDMA post. Run on one node, on two emulated nodes
// and (NICEMU_TEST_FABRIC=1) across hosts.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "harness.h"

using namespace harness;

namespace {

constexpr size_t kBuf = 16384;
constexpr uint32_t kTargetInst = 7, kInitInst = 3;
// The labels the initiator binds with: unrelated to any inst_id (rank*1000 + peer).
constexpr uint32_t kLabel = 3 * 1000 + 7;

struct Target {
  uint32_t addr;
  uint64_t buf;
  gni_mem_handle_t h;  // registered with the remote-event CQ
};

// Posts `d` and waits for its event; checks the event names the descriptor and carries
// `inst` (the bound id, or EpSetEventData's local value). Returns the CQE status.
uint64_t complete(gni_cq_handle_t cq, gni_ep_handle_t ep, gni_post_descriptor_t& d, uint32_t inst) {
  CHILD_CHECK(post(ep, d) == GNI_RC_SUCCESS);
  gni_cq_entry_t e = 0;
  const uint64_t status = wait_completion(cq, d, 10000, &e);
  CHILD_CHECK(GNI_CQ_GET_INST_ID(e) == inst);
  return status;
}

// The target: one registration with a remote-event CQ; after the initiator is done, its
// bytes and the remote events (which carry the initiator's remote event data).
int target(Oob& oob, Cred c) {
  Gni g = open_gni(kTargetInst, c);
  static char buf[kBuf];
  std::memset(buf, 't', sizeof buf);
  Target t{g.addr, uint64_t(buf), {}};
  t.h = mem_register(g.nic, t.buf, kBuf, g.rcq, GNI_MEM_READWRITE);
  oob.send(1, t);
  CHILD_CHECK(oob.recv<int>(1) == 1);
  for (size_t i = 0; i < 64; ++i) CHILD_CHECK(buf[i] == 'F');            // FMA PUT
  for (size_t i = 1024; i < 1024 + 256; ++i) CHILD_CHECK(buf[i] == 'S');  // PUT_W_SYNCFLAG
  for (size_t i = 4096; i < 4096 + 8192; ++i) CHILD_CHECK(buf[i] == 'R');  // RDMA PUT
  uint64_t word;
  std::memcpy(&word, buf + 2048, 8);
  CHILD_CHECK(word == 0x5A5A);  // the sync flag
  std::memcpy(&word, buf + 512, 8);
  CHILD_CHECK(word == 5 + 10);  // FADD
  std::memcpy(&word, buf + 520, 8);
  CHILD_CHECK(word == ((0xF0F0ull & 0xFF00ull) ^ 0x0003ull));  // AX posted with 16 bytes
  std::memcpy(&word, buf + 528, 8);
  CHILD_CHECK(word == 0x77);  // CSWAP posted with 16 bytes
  // Remote events: the REMOTE_EVENT PUT with the initiator's inst_id (the default), the
  // one after EpSetEventData with its remote value, and the CQ write's value.
  std::vector<gni_cq_entry_t> ev;
  for (int tries = 0; tries < 1000 && ev.size() < 3; ++tries) {
    gni_cq_entry_t e;
    if (GNI_CqWaitEvent(g.rcq, 10, &e) == GNI_RC_SUCCESS) ev.push_back(e);
  }
  CHILD_CHECK(ev.size() == 3);
  CHILD_CHECK(GNI_CQ_GET_TYPE(ev[0]) == GNI_CQ_EVENT_TYPE_POST && GNI_CQ_GET_REM_INST_ID(ev[0]) == kInitInst);
  CHILD_CHECK(GNI_CQ_GET_TYPE(ev[1]) == GNI_CQ_EVENT_TYPE_POST && GNI_CQ_GET_REM_INST_ID(ev[1]) == 0x66);
  CHILD_CHECK(GNI_CQ_GET_DATA(ev[2]) == 0xC0FFEEull);
  oob.send(1, 2);
  return 0;
}

int initiator(Oob& oob, Cred c) {
  Gni g = open_gni(kInitInst, c);
  Target t = oob.recv<Target>(0);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, kLabel);
  static char src[kBuf], back[kBuf];
  gni_mem_handle_t back_h;
  back_h = mem_register(g.nic, uint64_t(back), kBuf);

  // FMA PUT with a remote event, then GET it back: local events report the bound id.
  std::memset(src, 'F', 64);
  auto put = make_desc(GNI_POST_FMA_PUT, uint64_t(src), {}, t.buf, t.h, 64);
  put.cq_mode = GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT;
  CHILD_CHECK(complete(g.cq, ep, put, kLabel) == 0);
  auto get = make_desc(GNI_POST_FMA_GET, uint64_t(back), back_h, t.buf, t.h, 64);
  CHILD_CHECK(complete(g.cq, ep, get, kLabel) == 0);
  CHILD_CHECK(std::memcmp(back, src, 64) == 0);

  // AMOs: a fetching FADD (operand size) and the non-fetching two-operand commands posted
  // with both operands' length, as programs written for Cray XC machines do.
  uint64_t init[3] = {5, 0xF0F0, 0x55};
  std::memcpy(src, init, sizeof init);
  auto seed = make_desc(GNI_POST_FMA_PUT, uint64_t(src), {}, t.buf + 512, t.h, sizeof init);
  CHILD_CHECK(complete(g.cq, ep, seed, kLabel) == 0);
  auto fadd = make_desc(GNI_POST_AMO, uint64_t(back), back_h, t.buf + 512, t.h, 8);
  fadd.amo_cmd = GNI_FMA_ATOMIC_FADD;
  fadd.first_operand = 10;
  std::memset(back, 0, 8);
  CHILD_CHECK(complete(g.cq, ep, fadd, kLabel) == 0);
  uint64_t fetched;
  std::memcpy(&fetched, back, 8);
  CHILD_CHECK(fetched == 5);
  auto ax = make_desc(GNI_POST_AMO, 0, {}, t.buf + 520, t.h, 16);
  ax.amo_cmd = GNI_FMA_ATOMIC_AX;
  ax.first_operand = 0xFF00;
  ax.second_operand = 0x0003;
  CHILD_CHECK(complete(g.cq, ep, ax, kLabel) == 0);
  auto cswap = make_desc(GNI_POST_AMO, 0, {}, t.buf + 528, t.h, 16);
  cswap.amo_cmd = GNI_FMA_ATOMIC2_CSWAP;
  cswap.first_operand = 0x55;
  cswap.second_operand = 0x77;
  CHILD_CHECK(complete(g.cq, ep, cswap, kLabel) == 0);
  // A fetching form keeps the operand size; a length that fits no form is refused.
  auto fax = make_desc(GNI_POST_AMO, uint64_t(back), back_h, t.buf + 520, t.h, 16);
  fax.amo_cmd = GNI_FMA_ATOMIC2_FAX;
  CHILD_CHECK(GNI_PostFma(ep, &fax) == GNI_RC_INVALID_PARAM);
  ax.length = 24;
  CHILD_CHECK(GNI_PostFma(ep, &ax) == GNI_RC_INVALID_PARAM);

  // PUT with a sync flag.
  std::memset(src, 'S', 256);
  auto sync = make_desc(GNI_POST_FMA_PUT_W_SYNCFLAG, uint64_t(src), {}, t.buf + 1024, t.h, 256);
  sync.sync_flag_addr = t.buf + 2048;
  sync.sync_flag_value = 0x5A5A;
  CHILD_CHECK(complete(g.cq, ep, sync, kLabel) == 0);

  // RDMA PUT and GET (a registered source), GNI_RDMAMODE_PHYS_ADDR set as XC programs do:
  // a user-space post's addresses are virtual whatever that kernel-client bit says.
  static char rsrc[8192];
  std::memset(rsrc, 'R', sizeof rsrc);
  gni_mem_handle_t rsrc_h;
  rsrc_h = mem_register(g.nic, uint64_t(rsrc), sizeof rsrc);
  auto rput = make_desc(GNI_POST_RDMA_PUT, uint64_t(rsrc), rsrc_h, t.buf + 4096, t.h, sizeof rsrc);
  rput.rdma_mode = GNI_RDMAMODE_PHYS_ADDR;
  CHILD_CHECK(complete(g.cq, ep, rput, kLabel) == 0);
  std::memset(back, 0, sizeof rsrc);
  auto rget = make_desc(GNI_POST_RDMA_GET, uint64_t(back), back_h, t.buf + 4096, t.h, sizeof rsrc);
  CHILD_CHECK(complete(g.cq, ep, rget, kLabel) == 0);
  CHILD_CHECK(std::memcmp(back, rsrc, sizeof rsrc) == 0);

  // EpSetEventData changes what both sides see from then on.
  CHILD_CHECK(GNI_EpSetEventData(ep, 0x55, 0x66) == GNI_RC_SUCCESS);
  auto put2 = make_desc(GNI_POST_FMA_PUT, uint64_t(src), {}, t.buf + 1024, t.h, 8);
  put2.cq_mode = GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT;
  CHILD_CHECK(complete(g.cq, ep, put2, 0x55) == 0);

  // A CQ write into the target's registration's CQ.
  gni_post_descriptor_t cqw{};
  cqw.type = GNI_POST_CQWRITE;
  cqw.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  cqw.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  cqw.remote_mem_hndl = t.h;
  cqw.cqwrite_value = 0xC0FFEE;
  CHILD_CHECK(complete(g.cq, ep, cqw, 0x55) == 0);

  // Another label for the same peer works too; an address without that memory domain's
  // CDM is an error completion, never a write.
  gni_ep_handle_t ep2 = bound_ep(g.nic, g.cq, t.addr, 0xDEADBEEF);
  auto get2 = make_desc(GNI_POST_FMA_GET, uint64_t(back), back_h, t.buf, t.h, 64);
  std::memset(back, 0, 64);
  CHILD_CHECK(complete(g.cq, ep2, get2, 0xDEADBEEF) == 0);
  CHILD_CHECK(back[0] == 'F' && back[63] == 'F');
  gni_mem_handle_t nobody = t.h;
  nobody.qword1 ^= uint64_t{0x800} << 52;  // another memory domain (and a CRC that no longer matches)
  auto bad = make_desc(GNI_POST_FMA_PUT, uint64_t(src), {}, t.buf, nobody, 8);
  CHILD_CHECK(complete(g.cq, ep2, bad, 0xDEADBEEF) != 0);
  GNI_EpDestroy(ep2);

  oob.send(0, 1);
  CHILD_CHECK(oob.recv<int>(0) == 2);
  GNI_EpDestroy(ep);
  return 0;
}

void memory_ops(int nodes) {
  Cluster cl(nodes);
  Cred c = cl.credential();
  Oob oob;
  pid_t t = cl.spawn(nodes - 1, [&] { return target(oob, c); });
  pid_t i = cl.spawn(0, [&] { return initiator(oob, c); });
  CHECK(cl.wait(i, 60) == 0);
  CHECK(cl.wait(t, 60) == 0);
}

// SMSG between two processes whose EPs are bound with labels; the sender uses few
// credits, and after NOT_DONE waits on its receive CQ before it retries, as programs
// written for Cray hardware do (credits come back as an SMSG event there).
struct SmsgInfo {
  uint32_t addr;
  gni_smsg_attr_t attr;
};

int smsg_side(Oob& oob, Cred c, int side, uint32_t inst, uint32_t label, int messages) {
  Gni g = open_gni(inst, c);
  std::vector<char> mbox;
  gni_smsg_attr_t a = smsg_mailbox(g, mbox, 2, 64);
  oob.send(side, SmsgInfo{g.addr, a});
  SmsgInfo peer = oob.recv<SmsgInfo>(side);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, peer.addr, label);
  CHILD_CHECK(GNI_SmsgInit(ep, &a, &peer.attr) == GNI_RC_SUCCESS);
  oob.send(side, 1);
  CHILD_CHECK(oob.recv<int>(side) == 1);
  if (side == 0) {
    // Sender: NOT_DONE means out of credits; block on the receive CQ (never spin on the
    // send) and retry after any event there.
    int stalls = 0;
    for (int m = 0; m < messages;) {
      uint64_t v = uint64_t(m);
      gni_return_t rc = GNI_SmsgSendWTag(ep, &v, sizeof v, nullptr, 0, uint32_t(m), 9);
      if (rc == GNI_RC_SUCCESS) {
        ++m;
        continue;
      }
      CHILD_CHECK(rc == GNI_RC_NOT_DONE);
      ++stalls;
      gni_cq_entry_t e;
      CHILD_CHECK(GNI_CqWaitEvent(g.rcq, 10000, &e) == GNI_RC_SUCCESS);  // a hang here is the bug
      CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_SMSG);
      // It carries what the receiver's messages carry (its EP's remote event data, by
      // default its CDM's inst_id), and no message.
      CHILD_CHECK(GNI_CQ_GET_INST_ID(e) == 12);
      void* hdr;
      uint8_t tag = GNI_SMSG_ANY_TAG;
      CHILD_CHECK(GNI_SmsgGetNextWTag(ep, &hdr, &tag) == GNI_RC_NOT_DONE);
    }
    CHILD_CHECK(stalls > 0);  // the receiver is slow: the sender did run out
    // Drain the local completions.
    gni_cq_entry_t e;
    int done = 0;
    while (done < messages && GNI_CqWaitEvent(g.cq, 10000, &e) == GNI_RC_SUCCESS) ++done;
    CHILD_CHECK(done == messages);
  } else {
    // Receiver: slow on purpose, so the sender runs out of its 2 credits.
    for (int m = 0; m < messages;) {
      gni_cq_entry_t e;
      CHILD_CHECK(GNI_CqWaitEvent(g.rcq, 10000, &e) == GNI_RC_SUCCESS);
      void* hdr;
      uint8_t tag = GNI_SMSG_ANY_TAG;
      while (GNI_SmsgGetNextWTag(ep, &hdr, &tag) == GNI_RC_SUCCESS) {
        uint64_t v;
        std::memcpy(&v, hdr, sizeof v);
        CHILD_CHECK(v == uint64_t(m) && tag == 9);
        usleep(2000);
        CHILD_CHECK(GNI_SmsgRelease(ep) == GNI_RC_SUCCESS);
        ++m;
        tag = GNI_SMSG_ANY_TAG;
      }
    }
  }
  oob.send(side, 2);
  CHILD_CHECK(oob.recv<int>(side) == 2);
  return 0;
}

void smsg_credits(int nodes) {
  Cluster cl(nodes);
  Cred c = cl.credential();
  Oob oob;
  constexpr int kMessages = 40;
  pid_t s = cl.spawn(0, [&] { return smsg_side(oob, c, 0, 11, 11 * 100 + 1, kMessages); });
  pid_t r = cl.spawn(nodes - 1, [&] { return smsg_side(oob, c, 1, 12, 12 * 100 + 0, kMessages); });
  CHECK(cl.wait(s, 60) == 0);
  CHECK(cl.wait(r, 60) == 0);
}

}  // namespace

TEST_CASE("any remote id: FMA, AMO, sync-flag PUT, RDMA and CQ writes between processes of one node") {
  memory_ops(1);
}
TEST_CASE("any remote id: FMA, AMO, sync-flag PUT, RDMA and CQ writes between two emulated nodes") {
  memory_ops(2);
}
TEST_CASE("any remote id: SMSG, and a sender that waits on its CQ for credits, on one node") { smsg_credits(1); }
TEST_CASE("any remote id: SMSG, and a sender that waits on its CQ for credits, between two emulated nodes") {
  smsg_credits(2);
}

TEST_CASE_FIXTURE(OneNode, "GNI_CdmAttach with device -1 attaches to the nearest device") {
  pid_t p = cl.spawn(0, [&] {
    gni_cdm_handle_t cdm;
    CHILD_CHECK(GNI_CdmCreate(4, c.ptag, c.cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm) == GNI_RC_SUCCESS);
    uint32_t addr = 0, cpu = 0, near = 0;
    gni_nic_handle_t nic;
    CHILD_CHECK(GNI_CdmAttach(cdm, uint32_t(-1), &addr, &nic) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmGetNicAddress(uint32_t(-1), &near, &cpu) == GNI_RC_SUCCESS && near == addr);
    CHILD_CHECK(GNI_CdmGetNicAddress(0, &near, &cpu) == GNI_RC_SUCCESS && near == addr);
    CHILD_CHECK(GNI_CdmGetNicAddress(1, &near, &cpu) == GNI_RC_NO_MATCH);
    CHILD_CHECK(GNI_CdmDestroy(cdm) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmCreate(5, c.ptag, c.cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmAttach(cdm, 2, &addr, &nic) == GNI_RC_NO_MATCH);  // no such device
    CHILD_CHECK(GNI_CdmDestroy(cdm) == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(cl.wait(p) == 0);
}
