// What a daemon restart must not break (issue 36, findings F1 and F2 of docs/security.md):
//   - a job started right after a peer host's daemon restarted: its peers learn the new
//     epoch from the daemon's announce at start, not from the job's first packets, so the
//     job's first operations succeed (F1; across hosts only);
//   - credentials survive the restart (RUNDIR/nic-ADDR.cred): a credential issued before
//     admits an attach after it, a revoked one stays revoked, a DRC credential keeps its
//     grants; a corrupt file is reported and ignored (F2).
// Run with NICEMU_TEST_FABRIC=1 (meson test restart-state): daemons on "hosts" of their
// own, the UDP fabric on loopback; restart-state-ofi runs the job cases with the daemons on
// --fabric-data ofi (the jobs' data rank to rank, new CDMs looking their peers up afresh).
// Every daemon and child is killed by the Cluster's destructor, also when a check fails.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "harness.h"

using namespace harness;
namespace ctl = nicemu::abi::ctl;

namespace {

struct Target {
  uint32_t addr, inst;
  uint64_t buf;
  gni_mem_handle_t h;
};

// The epoch node `from`'s daemon holds for NIC address `nic` (0: none, no channel).
uint64_t known_epoch(Cluster& cl, int from, uint32_t nic) {
  auto st = cl.status(from);
  for (const auto& p : st["fabric"]["peers"])
    if (p["nic_addr"].get<uint32_t>() == nic) return p["epoch"].get<uint64_t>();
  return 0;
}
uint64_t own_epoch(Cluster& cl, int node) { return cl.status(node)["fabric"]["epoch"].get<uint64_t>(); }

// Child side: CDM `inst` with `c` attached, or the child fails saying why.
Gni open_or_say(uint32_t inst, Cred c) {
  Gni g;
  g.inst = inst;
  gni_return_t rc = GNI_CdmCreate(inst, c.ptag, c.cookie, GNI_CDM_MODE_ERR_NO_KILL, &g.cdm);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CdmAttach(g.cdm, 0, &g.addr, &g.nic);
  if (rc != GNI_RC_SUCCESS) std::fprintf(stderr, "CDM %u: attach: %s\n", inst, gni_err_str[rc]);
  CHILD_CHECK(rc == GNI_RC_SUCCESS);
  rc = GNI_CqCreate(g.nic, 256, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &g.cq);
  if (rc != GNI_RC_SUCCESS) std::fprintf(stderr, "CDM %u: CQ: %s\n", inst, gni_err_str[rc]);
  CHILD_CHECK(rc == GNI_RC_SUCCESS);
  return g;
}

// One job between node 0 (initiator) and node 1 (target), CDM instances `inst` and
// `inst + 1`: the initiator's very first operation is an FMA PUT, then a GET back and an
// AMO add; each must complete without error on its first try, data checked at both ends.
// With the daemons on --fabric-data ofi (restart-state-ofi) the job's posts go rank to rank:
// its target rank executes the AMO itself (node 1's ofi served count grows).
void job(Cluster& cl, Cred c, uint32_t inst, char fill) {
  const uint64_t served0 = across_hosts_ofi() ? cl.status(1)["ofi"]["served"].get<uint64_t>() : 0;
  Oob oob;
  pid_t t = cl.spawn(1, [&] {
    Gni g = open_or_say(inst + 1, c);
    static uint64_t buf[512];
    Target info{g.addr, inst + 1, uint64_t(buf), {}};
    info.h = mem_register(g.nic, info.buf, sizeof buf, nullptr, GNI_MEM_READWRITE);
    oob.send(0, info);
    CHILD_CHECK(oob.recv<int>(0) == 1);
    const char* b = reinterpret_cast<const char*>(buf);
    for (int k = 0; k < 64; ++k) CHILD_CHECK(b[k] == fill);
    CHILD_CHECK(buf[100] == 7);
    return 0;
  });
  pid_t i = cl.spawn(0, [&] {
    Gni g = open_or_say(inst, c);
    Target tg = oob.recv<Target>(1);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, tg.addr, tg.inst);
    static char src[64], back[64];
    std::memset(src, fill, sizeof src);
    gni_post_descriptor_t put = put_desc(uint64_t(src), tg.buf, tg.h, sizeof src);
    uint64_t st = post_and_wait(g.cq, ep, put, 10000);
    if (st != 0) std::fprintf(stderr, "the job's first operation (FMA PUT) ended with status %llu\n", (unsigned long long)st);
    CHILD_CHECK(st == 0);
    gni_mem_handle_t bh = mem_register(g.nic, uint64_t(back), sizeof back);
    gni_post_descriptor_t get = make_desc(GNI_POST_FMA_GET, uint64_t(back), bh, tg.buf, tg.h, sizeof back);
    CHILD_CHECK(post_and_wait(g.cq, ep, get, 10000) == 0);
    CHILD_CHECK(std::memcmp(back, src, sizeof back) == 0);
    gni_post_descriptor_t add = amo_desc(GNI_FMA_ATOMIC_ADD, tg.buf + 800, tg.h, 8, 7);
    CHILD_CHECK(post_and_wait(g.cq, ep, add, 10000) == 0);
    oob.send(1, 1);
    return 0;
  });
  CHECK(cl.wait(i, 40) == 0);
  CHECK(cl.wait(t, 40) == 0);
  if (across_hosts_ofi())
    CHECK_MESSAGE(cl.status(1)["ofi"]["served"].get<uint64_t>() > served0, "the job's AMO did not go rank to rank");
}

// A job credential request (issue, grant, revoke) to node `node`'s daemon; the reply's code.
int cred_call(Cluster& cl, int node, ctl::Op op, Cred& c) {
  ctl::Cred req{};
  req.h.op = uint16_t(op);
  req.uid = getuid();
  req.ptag = c.ptag;
  req.cookie = c.cookie;
  ctl::CredReply rep{};
  nicemu::ctl::Connection conn;
  if (!conn.connect(cl.socket(node)) || !conn.call(req, rep)) return -1;
  if (rep.r.rc == 0 && op == ctl::Op::kCredIssue) c = Cred{uint8_t(rep.ptag), rep.cookie};
  return int(rep.r.rc);
}

// The attach (GNI_CdmCreate + GNI_CdmAttach) of CDM `inst` with `c` on node `node`.
gni_return_t attach_rc(Cluster& cl, int node, uint32_t inst, Cred c) {
  pid_t p = cl.spawn(node, [&] {
    gni_cdm_handle_t cdm;
    gni_nic_handle_t nic;
    uint32_t addr = 0;
    CHILD_CHECK(GNI_CdmCreate(inst, c.ptag, c.cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm) == GNI_RC_SUCCESS);
    return int(GNI_CdmAttach(cdm, 0, &addr, &nic));
  });
  return gni_return_t(cl.wait(p, 20));
}

std::string cred_file(Cluster& cl, int node) {
  std::string s = cl.socket(node);
  return s.substr(0, s.size() - 5) + ".cred";
}

}  // namespace

TEST_CASE("a job started right after a peer's daemon restarted: its first operations succeed") {
  if (!across_hosts()) {
    MESSAGE("across hosts only (NICEMU_TEST_FABRIC=1)");
    return;
  }
  Cluster cl(2);
  Cred c = cl.credential();
  // A first job leaves node 0's channel to node 1 in use (sequence numbers, epoch known).
  job(cl, c, 10, 'a');
  const uint64_t before = known_epoch(cl, 0, cl.addr(1));
  REQUIRE(before == own_epoch(cl, 1));
  for (int round = 0; round < 3; ++round) {
    // Clean restarts and SIGKILLs (the supervisor's restart) alike.
    cl.restart_daemon(1, round == 1);
    const uint64_t fresh = own_epoch(cl, 1);
    REQUIRE(fresh != before);
    // The announce reaches node 0 by itself: no job traffic has crossed yet.
    bool learned = false;
    for (int k = 0; k < 100 && !learned; ++k) {
      learned = known_epoch(cl, 0, cl.addr(1)) == fresh;
      if (!learned) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK_MESSAGE(learned, "node 0 did not learn node 1's new epoch before any traffic");
    // Granted again as a launcher would; F2's own test covers the credential's survival.
    REQUIRE(cred_call(cl, 1, ctl::Op::kCredGrant, c) == 0);
    job(cl, c, uint32_t(20 + 2 * round), char('b' + round));
  }
}

TEST_CASE("credentials survive a daemon restart; a revoked one stays revoked") {
  Cluster cl(2);
  Cred kept = cl.credential(), gone = cl.credential();
  Cred mine{};
  REQUIRE(cred_call(cl, 1, ctl::Op::kCredIssue, mine) == 0);
  REQUIRE(cred_call(cl, 1, ctl::Op::kCredRevoke, gone) == 0);
  // The file: the daemon's user only.
  struct stat st {};
  REQUIRE(stat(cred_file(cl, 1).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_uid == geteuid());
  for (bool hard : {false, true}) {
    CAPTURE(hard);
    cl.restart_daemon(1, hard);
    // The credentials are back; attached CDMs are not (they died with their connections).
    CHECK(cl.status(1)["credentials"].size() == 2);
    CHECK(cl.status(1)["cdms"].size() == 0);
    CHECK(attach_rc(cl, 1, 1, kept) == GNI_RC_SUCCESS);
    CHECK(attach_rc(cl, 1, 2, mine) == GNI_RC_SUCCESS);
    CHECK(attach_rc(cl, 1, 3, gone) == GNI_RC_PERMISSION_ERROR);
  }
  // A job across both nodes with the credential granted before the restarts.
  if (cl.fabric()) job(cl, kept, 40, 'k');
  // Revoking everything removes the file; a restart then knows nothing.
  REQUIRE(cred_call(cl, 1, ctl::Op::kCredRevoke, kept) == 0);
  REQUIRE(cred_call(cl, 1, ctl::Op::kCredRevoke, mine) == 0);
  CHECK(access(cred_file(cl, 1).c_str(), F_OK) != 0);
  cl.restart_daemon(1);
  CHECK(attach_rc(cl, 1, 4, kept) == GNI_RC_PERMISSION_ERROR);
}

TEST_CASE("DRC credentials and their grants survive a daemon restart") {
  Cluster cl(1);
  ctl::Drc acq{};
  acq.h.op = uint16_t(ctl::Op::kDrc);
  acq.action = uint32_t(ctl::DrcAction::kAcquire);
  ctl::DrcReply ar{};
  {
    nicemu::ctl::Connection conn;
    REQUIRE(conn.connect(cl.socket(0)));
    REQUIRE(conn.call(acq, ar));
    REQUIRE(ar.r.rc == 0);
    ctl::Drc g{};
    g.h.op = uint16_t(ctl::Op::kDrc);
    g.action = uint32_t(ctl::DrcAction::kGrant);
    g.id = ar.id;
    g.kind = uint32_t(ctl::DrcGrant::kUid);
    g.value = 4242;
    ctl::DrcReply gr{};
    REQUIRE(conn.call(g, gr));
    REQUIRE(gr.r.rc == 0);
  }
  cl.restart_daemon(0, true);
  auto list = cl.status(0)["credentials"];
  bool found = false;
  for (const auto& e : list)
    if (e.contains("drc") && e["drc"]["id"].get<uint32_t>() == ar.id) {
      found = true;
      CHECK(e["drc"]["grants"].dump().find("4242") != std::string::npos);
    }
  CHECK_MESSAGE(found, list.dump());
  CHECK(attach_rc(cl, 0, 1, Cred{uint8_t(ar.ptag), ar.cookie}) == GNI_RC_SUCCESS);
}

TEST_CASE("a corrupt or foreign credential file is reported and ignored") {
  Cluster cl(1);
  Cred c = cl.credential();
  const std::string path = cred_file(cl, 0);
  const char* bad[] = {
      "{ not json",
      R"({"format": "nicemu credentials", "version": 99, "nic_addr": 10, "credentials": [], "drc": []})",
      R"({"format": "nicemu credentials", "version": 1, "nic_addr": 11, "credentials": [], "drc": []})",
      R"({"format": "nicemu credentials", "version": 1, "nic_addr": 10, "credentials": [{"ptag": 0}], "drc": []})",
  };
  for (const char* text : bad) {
    CAPTURE(text);
    cl.stop_daemon(0);
    {
      std::ofstream f(path, std::ios::trunc);
      f << text;
    }
    chmod(path.c_str(), 0600);
    cl.restart_daemon(0);
    CHECK(attach_rc(cl, 0, 1, c) == GNI_RC_PERMISSION_ERROR);
    // The daemon works, and its next change replaces the file.
    Cred again = c;
    REQUIRE(cred_call(cl, 0, ctl::Op::kCredGrant, again) == 0);
    CHECK(attach_rc(cl, 0, 2, c) == GNI_RC_SUCCESS);
  }
  // A file other users could have written is not trusted.
  cl.stop_daemon(0);
  chmod(path.c_str(), 0666);
  cl.restart_daemon(0);
  CHECK(attach_rc(cl, 0, 3, c) == GNI_RC_PERMISSION_ERROR);
}

namespace {

// One DRC request to node `node`'s daemon; the reply.
ctl::DrcReply drc_call(Cluster& cl, int node, ctl::DrcAction action, uint32_t id, uint32_t uid = 0) {
  ctl::Drc req{};
  req.h.op = uint16_t(ctl::Op::kDrc);
  req.action = uint32_t(action);
  req.id = id;
  req.kind = uint32_t(ctl::DrcGrant::kUid);
  req.value = uid;
  ctl::DrcReply rep{};
  rep.r.rc = -1;
  nicemu::ctl::Connection conn;
  if (conn.connect(cl.socket(node))) conn.call(req, rep);
  return rep;
}

// The grants of DRC credential `id` on node `node` ("-" if it does not hold it), once its
// daemon has converged on the others' table.
std::string drc_grants(Cluster& cl, int node, uint32_t id) {
  nlohmann::json st;
  for (int i = 0; i < 100; ++i) {
    st = cl.status(node);
    if (st.value("drc_converged", false)) break;
    usleep(50000);
  }
  for (const auto& e : st["credentials"])
    if (e.contains("drc") && e["drc"]["id"].get<uint32_t>() == id) return e["drc"]["grants"].dump();
  return "-";
}

}  // namespace

TEST_CASE("a DRC change made while a daemon was down reaches it when it returns") {
  Cluster cl(2);
  ctl::DrcReply ar = drc_call(cl, 0, ctl::DrcAction::kAcquire, 0);
  REQUIRE(ar.r.rc == 0);
  CHECK(drc_grants(cl, 1, ar.id) == "[]");  // on both daemons when the call returned
  cl.stop_daemon(1);
  REQUIRE(drc_call(cl, 0, ctl::DrcAction::kGrant, ar.id, 4242).r.rc == 0);
  cl.restart_daemon(1);
  CHECK(drc_grants(cl, 1, ar.id) == R"(["uid:4242"])");
  // And the other way: a release made on node 1 while node 0 is down.
  cl.stop_daemon(0);
  REQUIRE(drc_call(cl, 1, ctl::DrcAction::kRelease, ar.id).r.rc == 0);
  cl.restart_daemon(0);
  CHECK(drc_grants(cl, 0, ar.id) == "-");
  CHECK(attach_rc(cl, 0, 1, Cred{uint8_t(ar.ptag), ar.cookie}) == GNI_RC_PERMISSION_ERROR);
}

TEST_CASE("a DRC grant that another daemon refuses is undone on every daemon") {
  Cluster cl(2);
  ctl::DrcReply ar = drc_call(cl, 0, ctl::DrcAction::kAcquire, 0);
  REQUIRE(ar.r.rc == 0);
  // On node 1 only, its ptag and cookie become a job credential of their own.
  Cred c{uint8_t(ar.ptag), ar.cookie};
  REQUIRE(cred_call(cl, 1, ctl::Op::kCredRevoke, c) == 0);
  REQUIRE(cred_call(cl, 1, ctl::Op::kCredGrant, c) == 0);
  ctl::DrcReply gr = drc_call(cl, 0, ctl::DrcAction::kGrant, ar.id, 4242);
  CHECK(gr.r.rc == GNI_RC_PERMISSION_ERROR);
  CHECK(gr.refused_by == cl.addr(1));
  CHECK(drc_grants(cl, 0, ar.id) == "[]");  // undone where it was taken
  CHECK(drc_grants(cl, 1, ar.id) == "-");   // never taken where it was refused
}
