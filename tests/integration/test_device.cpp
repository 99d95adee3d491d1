// Integration tests of device-level behaviour against real daemons: the device type a
// daemon is started with (--device gemini / aries) as clients see it, with the Gemini-only
// and Aries-only rules of the fact sheet (gen-2 AMO opcodes, GET local alignment, the
// collective engine); every collective-engine call returning GNI_RC_ILLEGAL_OP on Gemini; flagged
// posts refused; the bandwidth-injection settings of a NIC shared by its processes.
#include <doctest/doctest.h>

#include <cstring>

#include "harness.h"

using namespace harness;

namespace {

// A CDM with an EP to itself and a registered 64-byte buffer.
struct Self {
  Gni g;
  gni_ep_handle_t ep = nullptr;
  alignas(64) static inline uint64_t buf[8];
  gni_mem_handle_t h{};

  // Checks that the library reports device type `want`, then opens instance `inst`.
  void open(gni_nic_device_t want, uint32_t inst, Cred c) {
    gni_nic_device_t dev = want == GNI_DEVICE_ARIES ? GNI_DEVICE_GEMINI : GNI_DEVICE_ARIES;
    CHILD_CHECK(GNI_GetDeviceType(&dev) == GNI_RC_SUCCESS && dev == want);
    open(inst, c);
  }

  void open(uint32_t inst, Cred c) {
    g = open_gni(inst, c);
    ep = bound_ep(g.nic, g.cq, g.addr, inst);
    h = mem_register(g.nic, uint64_t(buf), sizeof buf);
  }

  // An AMO on buf + off, its fetched value to buf[7].
  gni_post_descriptor_t amo(uint32_t cmd, uint64_t off, uint64_t len, uint64_t a) {
    gni_post_descriptor_t d = amo_desc(cmd, uint64_t(buf) + off, h, len, a);
    d.local_addr = uint64_t(&buf[7]);
    d.local_mem_hndl = h;
    return d;
  }

  // An 8-byte GET of buf[0] to buf[4] + 2 (an unaligned destination).
  gni_post_descriptor_t unaligned_get() {
    return make_desc(GNI_POST_FMA_GET, uint64_t(&buf[4]) + 2, h, uint64_t(&buf[0]), h, 8);
  }

  // Posts and completes `d`; its CQE status.
  uint64_t run(gni_post_descriptor_t& d) { return post_and_wait(g.cq, ep, d, 5000); }
};

// Every collective-engine entry point, valid-looking or not, says "not on this device".
// Aries has a collective engine (its conformance: ce_conformance.cpp, test_ce.sh); the
// flagged posts stay unsupported.
void check_ce_present(Self& s) {
  gni_ce_handle_t ce = nullptr;
  CHILD_CHECK(GNI_CeCreate(s.g.nic, &ce) == GNI_RC_SUCCESS && ce != nullptr);
  uint32_t id = 42;
  CHILD_CHECK(GNI_CeGetId(ce, &id) == GNI_RC_SUCCESS && id < 256);
  CHILD_CHECK(GNI_CeCreate(nullptr, &ce) == GNI_RC_INVALID_PARAM);
  gni_ce_result_t r{};
  CHILD_CHECK(GNI_CeCheckResult(&r, sizeof r) == GNI_RC_NOT_DONE);
  CHILD_CHECK(GNI_CeDestroy(ce) == GNI_RC_SUCCESS);
  auto f = s.amo(GNI_FMA_ATOMIC_FADD, 0, 8, 1);
  f.type = GNI_POST_AMO_W_FLAG;
  CHILD_CHECK(GNI_PostFma(s.ep, &f) == GNI_RC_ILLEGAL_OP);
  f.type = GNI_POST_FMA_GET_W_FLAG;
  CHILD_CHECK(GNI_PostFma(s.ep, &f) == GNI_RC_ILLEGAL_OP);
}

void check_ce_illegal(Self& s) {
  gni_ce_handle_t ce = nullptr;
  CHILD_CHECK(GNI_CeCreate(s.g.nic, &ce) == GNI_RC_ILLEGAL_OP);
  CHILD_CHECK(ce == nullptr);
  CHILD_CHECK(GNI_CeCreate(nullptr, &ce) == GNI_RC_ILLEGAL_OP);
  uint32_t id = 42;
  CHILD_CHECK(GNI_CeGetId(ce, &id) == GNI_RC_ILLEGAL_OP);
  CHILD_CHECK(id == 42);
  CHILD_CHECK(GNI_EpSetCeAttr(s.ep, 1, 0, GNI_CE_CHILD_PE) == GNI_RC_ILLEGAL_OP);
  gni_ep_handle_t kids[1] = {s.ep};
  CHILD_CHECK(GNI_CeConfigure(ce, kids, 1, s.ep, s.g.cq, GNI_CE_MODE_ROUND_NEAR | GNI_CE_MODE_CQE_ONCOMP) ==
              GNI_RC_ILLEGAL_OP);
  gni_ce_result_t r{};
  CHILD_CHECK(GNI_CeCheckResult(&r, sizeof r) == GNI_RC_ILLEGAL_OP);
  CHILD_CHECK(GNI_CeDestroy(ce) == GNI_RC_ILLEGAL_OP);
  // A CE operation posted anyway, and the flagged posts (semantics unpublished).
  gni_post_descriptor_t d{};
  d.type = GNI_POST_CE;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.ce_cmd = GNI_FMA_CE_IADD;
  CHILD_CHECK(GNI_PostFma(s.ep, &d) == GNI_RC_ILLEGAL_OP);
  auto f = s.amo(GNI_FMA_ATOMIC_FADD, 0, 8, 1);
  f.type = GNI_POST_AMO_W_FLAG;
  CHILD_CHECK(GNI_PostFma(s.ep, &f) == GNI_RC_ILLEGAL_OP);
  f.type = GNI_POST_FMA_GET_W_FLAG;
  CHILD_CHECK(GNI_PostFma(s.ep, &f) == GNI_RC_ILLEGAL_OP);
  gni_cq_entry_t e = 0;
  CHILD_CHECK(GNI_CqGetEvent(s.g.cq, &e) == GNI_RC_NOT_DONE);
}

}  // namespace

TEST_CASE("a Gemini daemon: device type, gen-1 AMOs only, aligned GET destinations, no collective engine") {
  Cluster cl(1, {"--device", "gemini"});
  CHECK(cl.status(0)["device_type"] == "gemini");
  Cred c = cl.credential();
  pid_t p = cl.spawn(0, [&] {
    Self s;
    s.open(GNI_DEVICE_GEMINI, 3, c);
    // Gen-1 opcodes work; gen-2 (Aries) opcodes, 32-bit forms included, are not Gemini's.
    auto fadd = s.amo(GNI_FMA_ATOMIC_FADD, 0, 8, 5);
    CHILD_CHECK(s.run(fadd) == 0);
    auto cswap = s.amo(GNI_FMA_ATOMIC_CSWAP, 0, 8, 5);
    cswap.second_operand = 11;
    CHILD_CHECK(s.run(cswap) == 0);
    CHILD_CHECK(Self::buf[0] == 11 && Self::buf[7] == 5);
    for (uint32_t cmd : {GNI_FMA_ATOMIC2_FIADD, GNI_FMA_ATOMIC2_IADD, GNI_FMA_ATOMIC2_SWAP}) {
      auto d = s.amo(cmd, 0, 8, 1);
      CHILD_CHECK(GNI_PostFma(s.ep, &d) == GNI_RC_INVALID_PARAM);
    }
    auto s32 = s.amo(GNI_FMA_ATOMIC2_FIADD_S, 8, 4, 1);
    CHILD_CHECK(GNI_PostFma(s.ep, &s32) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(Self::buf[0] == 11 && Self::buf[1] == 0);
    // GET: on Gemini the local address must be 4-byte aligned too (FMA and RDMA).
    gni_post_descriptor_t g = s.unaligned_get();
    CHILD_CHECK(GNI_PostFma(s.ep, &g) == GNI_RC_ALIGNMENT_ERROR);
    g.type = GNI_POST_RDMA_GET;
    CHILD_CHECK(GNI_PostRdma(s.ep, &g) == GNI_RC_ALIGNMENT_ERROR);
    g.type = GNI_POST_FMA_GET;
    g.local_addr = uint64_t(&Self::buf[4]);
    CHILD_CHECK(s.run(g) == 0);
    CHILD_CHECK(Self::buf[4] == 11);
    check_ce_illegal(s);
    return 0;
  });
  CHECK(cl.wait(p, 60) == 0);
}

TEST_CASE("an Aries daemon (the default): device type, gen-2 AMOs, unaligned GET destinations, a collective engine") {
  Cluster cl(1);
  CHECK(cl.status(0)["device_type"] == "aries");
  Cred c = cl.credential();
  pid_t p = cl.spawn(0, [&] {
    Self s;
    s.open(GNI_DEVICE_ARIES, 3, c);
    auto a = s.amo(GNI_FMA_ATOMIC2_FIADD, 0, 8, 4);
    CHILD_CHECK(s.run(a) == 0);
    auto b = s.amo(GNI_FMA_ATOMIC_ADD, 0, 8, 3);  // gen-1 codes stay valid on Aries
    CHILD_CHECK(s.run(b) == 0);
    auto s32 = s.amo(GNI_FMA_ATOMIC2_IADD_S, 8, 4, 9);
    CHILD_CHECK(s.run(s32) == 0);
    CHILD_CHECK(Self::buf[0] == 7 && Self::buf[1] == 9);
    gni_post_descriptor_t g = s.unaligned_get();
    CHILD_CHECK(s.run(g) == 0);
    uint64_t got;
    std::memcpy(&got, reinterpret_cast<char*>(&Self::buf[4]) + 2, 8);
    CHILD_CHECK(got == 7);
    check_ce_present(s);
    return 0;
  });
  CHECK(cl.wait(p, 60) == 0);
}

TEST_CASE_FIXTURE(TwoNodes, "bandwidth injection: settings per NIC, shared by its processes, validated, never throttling") {
  Oob o;
  pid_t setter = cl.spawn(0, [&] {
    gni_bi_desc_t d{};
    CHILD_CHECK(GNI_GetBIConfig(0, &d) == GNI_RC_SUCCESS);  // the defaults: full bandwidth
    CHILD_CHECK(d.current_bw == 100 && d.current_aot_bw == 100 && d.current_norbs == 992);
    CHILD_CHECK(d.sys_def_bw == 100 && d.sys_def_aot_bw == 100 && d.flags == 0);
    const uint16_t seq0 = d.cle_seqnum;
    // As Charm++ does it: a percentage, applied now, before any CDM exists.
    CHILD_CHECK(GNI_SetBIConfig(0, 50, 0, GNI_BI_FLAG_APPLY_NOW) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_BISyncWait(0, 1000) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_GetBIConfig(0, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(d.current_bw == 50 && d.current_aot_bw == 0 && d.current_norbs == 496);
    CHILD_CHECK(d.flags == GNI_BI_FLAG_APPLY_NOW && uint16_t(d.cle_seqnum - seq0) == 1);
    // Refused settings change nothing.
    CHILD_CHECK(GNI_SetBIConfig(0, 101, 0, GNI_BI_FLAG_APPLY_NOW) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SetBIConfig(0, 50, 101, 0) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SetBIConfig(0, 993, 0, GNI_BI_FLAG_VALUE_IS_NUM_ORB_ENTRIES) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SetBIConfig(0, 10, 0, 0x10) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SetBIConfig(1, 10, 0, GNI_BI_FLAG_APPLY_NOW) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_GetBIConfig(1, &d) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_GetBIConfig(0, nullptr) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_BISyncWait(1, 0) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_GetBIConfig(0, &d) == GNI_RC_SUCCESS && d.current_bw == 50 && uint16_t(d.cle_seqnum - seq0) == 1);
    // A process attached to the node sees the same settings; work still runs.
    Self s;
    s.open(1, c);
    auto a = s.amo(GNI_FMA_ATOMIC_FADD, 0, 8, 1);
    CHILD_CHECK(s.run(a) == 0);
    o.send(0, 1);
    CHILD_CHECK(o.recv<int>(0) == 2);
    return 0;
  });
  pid_t reader = cl.spawn(0, [&] {
    CHILD_CHECK(o.recv<int>(1) == 1);
    gni_bi_desc_t d{};
    CHILD_CHECK(GNI_GetBIConfig(0, &d) == GNI_RC_SUCCESS && d.current_bw == 50 && d.current_norbs == 496);
    // ORB entries instead of a percentage, then back to the system defaults.
    CHILD_CHECK(GNI_SetBIConfig(0, 248, 992, GNI_BI_FLAG_VALUE_IS_NUM_ORB_ENTRIES | GNI_BI_FLAG_APPLY_AFTER_THROTTLE) ==
                GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_GetBIConfig(0, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(d.current_norbs == 248 && d.current_bw == 25 && d.current_aot_bw == 100);
    CHILD_CHECK(d.flags == (GNI_BI_FLAG_VALUE_IS_NUM_ORB_ENTRIES | GNI_BI_FLAG_APPLY_AFTER_THROTTLE));
    CHILD_CHECK(GNI_SetBIConfig(0, 7, 7, GNI_BI_FLAG_USE_DEFAULT_SETTINGS) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_GetBIConfig(0, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(d.current_bw == 100 && d.current_aot_bw == 100 && d.current_norbs == 992);
    o.send(1, 2);
    return 0;
  });
  // Another emulated node is another NIC: its settings are its own.
  pid_t other = cl.spawn(1, [&] {
    gni_bi_desc_t d{};
    CHILD_CHECK(GNI_SetBIConfig(0, 30, 30, GNI_BI_FLAG_APPLY_NOW) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_GetBIConfig(0, &d) == GNI_RC_SUCCESS && d.current_bw == 30);
    return 0;
  });
  CHECK(cl.wait(other, 60) == 0);
  CHECK(cl.wait(setter, 60) == 0);
  CHECK(cl.wait(reader, 60) == 0);
}
