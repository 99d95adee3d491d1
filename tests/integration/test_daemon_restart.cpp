// The daemon dies (SIGKILL) under its clients: a blocked waiter gets an error within a
// bound, control calls fail, the client re-attaches once a new daemon runs; and a peer that
// still holds a mapping of another client's region from the dead daemon writes nothing
// into that client's memory.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "harness.h"

using namespace harness;

namespace {

uint64_t now_ms() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void kill_daemon(Cluster& cl) {
  pid_t d = cl.daemon_pid(0);
  kill(d, SIGKILL);
  waitpid(d, nullptr, 0);
}

// 0 if the PUT completed without error.
uint64_t put(Gni& g, gni_ep_handle_t ep, gni_post_descriptor_t& d) {
  if (GNI_PostFma(ep, &d) != GNI_RC_SUCCESS) return ~0ull;
  gni_cq_entry_t e = 0;
  gni_return_t rc = GNI_CqWaitEvent(g.cq, 3000, &e);
  if (rc == GNI_RC_TIMEOUT) return ~0ull - 1;
  return rc == GNI_RC_SUCCESS ? GNI_CQ_GET_STATUS(e) : (GNI_CQ_GET_STATUS(e) ? GNI_CQ_GET_STATUS(e) : 99);
}

// A credential from the (restarted) daemon of node 0 alone: the cluster's helper would
// also grant it on the dead daemon's slot.
Cred issue(Cluster& cl) {
  nicemu::abi::ctl::Cred req{};
  req.h.op = uint16_t(nicemu::abi::ctl::Op::kCredIssue);
  req.uid = getuid();
  nicemu::abi::ctl::CredReply rep{};
  nicemu::ctl::Connection c;
  if (!c.connect(cl.socket(0)) || !c.call(req, rep) || rep.r.rc != 0) throw std::runtime_error("cred issue failed");
  return Cred{uint8_t(rep.ptag), rep.cookie};
}

struct Info {
  uint32_t addr, inst;
  uint64_t buf;
  gni_mem_handle_t h;
};

}  // namespace

TEST_CASE_FIXTURE(OneNode, "daemon killed: prompt errors, then re-attach to a new daemon") {
  pid_t p = cl.spawn(0, [&] {
    Gni g = open_gni(1, c);
    oob.send(0, 1);
    gni_cq_entry_t e;
    uint64_t t0 = now_ms();
    CHILD_CHECK(GNI_CqWaitEvent(g.cq, uint64_t(-1), &e) == GNI_RC_TRANSACTION_ERROR);
    uint64_t waited = now_ms() - t0;
    std::fprintf(stderr, "blocked waiter returned %llu ms after it started\n", (unsigned long long)waited);
    CHILD_CHECK(waited < 3000);
    static char buf[4096];
    gni_mem_handle_t h;
    CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(buf), sizeof buf, nullptr, 0, uint32_t(-1), &h) != GNI_RC_SUCCESS);
    oob.send(0, 2);
    Cred c2 = oob.recv<Cred>(0);
    GNI_CdmDestroy(g.cdm);
    Gni n = open_gni(1, c2);
    h = mem_register(n.nic, uint64_t(buf), sizeof buf);
    gni_ep_handle_t ep = bound_ep(n.nic, n.cq, n.addr, n.inst);
    static char src[64];
    std::memset(src, 'N', sizeof src);
    gni_post_descriptor_t d = put_desc(uint64_t(src), uint64_t(buf), h, sizeof src);
    CHILD_CHECK(put(n, ep, d) == 0);
    CHILD_CHECK(std::memcmp(buf, src, sizeof src) == 0);
    return 0;
  });
  REQUIRE(oob.recv<int>(1) == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let it block
  kill_daemon(cl);
  REQUIRE(oob.recv<int>(1) == 2);
  cl.start_daemon(cl.addr(0), {});
  oob.send(1, issue(cl));
  CHECK(cl.wait(p, 20) == 0);
}

TEST_CASE("a stale mapping from a dead daemon writes nothing") {
  Cluster cl(1);
  Cred c = cl.credential();
  Oob oob;  // target (side 0) <-> initiator (side 1)
  int to_parent[2], to_q[2];
  REQUIRE(pipe(to_parent) == 0);
  REQUIRE(pipe(to_q) == 0);
  pid_t t = cl.spawn(0, [&] {
    Gni g = open_gni(1, c);
    static char buf[4096];
    std::memset(buf, 'T', sizeof buf);
    Info info{g.addr, 1, uint64_t(buf), {}};
    info.h = mem_register(g.nic, info.buf, sizeof buf, nullptr, GNI_MEM_READWRITE);
    oob.send(0, info);
    CHILD_CHECK(oob.recv<int>(0) == 1);  // the initiator is done
    for (size_t i = 0; i < 64; ++i) CHILD_CHECK(buf[i] == 'Q');
    for (size_t i = 64; i < sizeof buf; ++i) CHILD_CHECK(buf[i] == 'T');  // no 'X'
    return 0;
  });
  pid_t q = cl.spawn(0, [&] {
    Gni g = open_gni(2, c);
    Info info = oob.recv<Info>(1);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, info.addr, info.inst);
    static char src[4096];
    std::memset(src, 'Q', sizeof src);
    gni_post_descriptor_t d = put_desc(uint64_t(src), info.buf, info.h, 64);
    CHILD_CHECK(put(g, ep, d) == 0);  // maps the target's region
    char m = 0;
    CHILD_CHECK(write(to_parent[1], "p", 1) == 1);
    CHILD_CHECK(read(to_q[0], &m, 1) == 1);  // the daemon is dead now
    std::memset(src, 'X', sizeof src);
    gni_post_descriptor_t x = put_desc(uint64_t(src), info.buf, info.h, sizeof src);
    uint64_t st = put(g, ep, x);
    std::fprintf(stderr, "PUT through the dead daemon's mapping: status %llu\n", (unsigned long long)st);
    CHILD_CHECK(st != 0);
    oob.send(1, 1);
    return 0;
  });
  char m;
  REQUIRE(read(to_parent[0], &m, 1) == 1);
  kill_daemon(cl);
  REQUIRE(write(to_q[1], "k", 1) == 1);
  CHECK(cl.wait(q, 20) == 0);
  CHECK(cl.wait(t, 20) == 0);
  for (int fd : {to_parent[0], to_parent[1], to_q[0], to_q[1]}) close(fd);
}

// Finding F3 (docs/security.md): a process whose own daemon dies while it holds remote
// operations of the process. Node 1's daemon is stopped, so the AMOs node 0's client posts
// to node 1 stay in flight at node 0's daemon; that daemon is then killed. Every posted
// descriptor must come back from GNI_GetCompleted once, with a non-recoverable error,
// within a bound; later posts fail, and the client exits. Across hosts only
// (NICEMU_TEST_FABRIC=1: meson test daemon-restart-fabric).
TEST_CASE("daemon killed with remote operations in flight: each fails, none waits for ever (F3)") {
  if (!across_hosts()) {
    MESSAGE("skipped: needs NICEMU_TEST_FABRIC=1");
    return;
  }
  Cluster cl(2);
  Cred c = cl.credential();
  Oob oob;  // target (side 0) <-> initiator (side 1)
  int to_parent[2], to_child[2];
  REQUIRE(pipe(to_parent) == 0);
  REQUIRE(pipe(to_child) == 0);
  pid_t t = cl.spawn(1, [&] {
    Gni g = open_gni(1, c);
    static uint64_t words[8];
    Info info{g.addr, 1, uint64_t(words), {}};
    info.h = mem_register(g.nic, info.buf, sizeof words, nullptr, GNI_MEM_READWRITE);
    oob.send(0, info);
    (void)oob.recv<int>(0);  // the initiator is done (or gone: the receive fails)
    return 0;
  });
  constexpr int kPosts = 48;
  pid_t q = cl.spawn(0, [&] {
    Gni g = open_gni(2, c);
    Info info = oob.recv<Info>(1);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, info.addr, info.inst);
    // One AMO first, answered: the path across hosts works.
    gni_post_descriptor_t first = amo_desc(GNI_FMA_ATOMIC_ADD, info.buf, info.h, 8, 1);
    CHILD_CHECK(post_and_wait(g.cq, ep, first) == 0);
    char m = 0;
    CHILD_CHECK(write(to_parent[1], "a", 1) == 1);
    CHILD_CHECK(read(to_child[0], &m, 1) == 1);  // node 1's daemon is stopped now
    static gni_post_descriptor_t d[kPosts];
    for (int i = 0; i < kPosts; ++i) {
      d[i] = amo_desc(GNI_FMA_ATOMIC_ADD, info.buf + 8 * uint64_t(i % 8), info.h, 8, 1);
      CHILD_CHECK(GNI_PostFma(ep, &d[i]) == GNI_RC_SUCCESS);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // our daemon has them
    gni_cq_entry_t e = 0;
    CHILD_CHECK(GNI_CqGetEvent(g.cq, &e) == GNI_RC_NOT_DONE);     // in flight, unanswered
    CHILD_CHECK(write(to_parent[1], "p", 1) == 1);
    CHILD_CHECK(read(to_child[0], &m, 1) == 1);  // our daemon is dead now
    const uint64_t t0 = now_ms();
    int done[kPosts] = {};
    int failed = 0, nic_down_entries = 0;
    while (failed < kPosts && now_ms() - t0 < 10000) {
      gni_return_t rc = GNI_CqWaitEvent(g.cq, 1000, &e);
      if (rc == GNI_RC_TIMEOUT) continue;
      CHILD_CHECK(rc == GNI_RC_TRANSACTION_ERROR);
      gni_post_descriptor_t* out = nullptr;
      gni_return_t rc2 = GNI_GetCompleted(g.cq, e, &out);
      if (!out) {  // the NIC-down entry: must not come before the posts' own errors
        ++nic_down_entries;
        CHILD_CHECK(rc2 == GNI_RC_DESCRIPTOR_ERROR);
        break;
      }
      CHILD_CHECK(rc2 == GNI_RC_TRANSACTION_ERROR);
      CHILD_CHECK(out >= d && out < d + kPosts);
      CHILD_CHECK(++done[out - d] == 1);
      CHILD_CHECK(out->status != 0);
      uint32_t recoverable = 1;
      CHILD_CHECK(GNI_CqErrorRecoverable(e, &recoverable) == GNI_RC_SUCCESS && recoverable == 0);
      ++failed;
    }
    const uint64_t waited = now_ms() - t0;
    std::fprintf(stderr, "%d of %d in-flight AMOs failed %llu ms after the daemon was killed\n", failed, kPosts,
                 (unsigned long long)waited);
    CHILD_CHECK(failed == kPosts && nic_down_entries == 0);
    CHILD_CHECK(waited < 5000);
    // Then the NIC-down entry, at once, and a later post fails with its own error event.
    CHILD_CHECK(GNI_CqGetEvent(g.cq, &e) == GNI_RC_TRANSACTION_ERROR);
    gni_post_descriptor_t* out = nullptr;
    CHILD_CHECK(GNI_GetCompleted(g.cq, e, &out) == GNI_RC_DESCRIPTOR_ERROR && !out);
    gni_post_descriptor_t late = amo_desc(GNI_FMA_ATOMIC_ADD, info.buf, info.h, 8, 1);
    CHILD_CHECK(GNI_PostFma(ep, &late) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqWaitEvent(g.cq, 1000, &e) == GNI_RC_TRANSACTION_ERROR);
    CHILD_CHECK(GNI_GetCompleted(g.cq, e, &out) == GNI_RC_TRANSACTION_ERROR && out == &late);
    oob.send(1, 1);
    return 0;
  });
  char m;
  REQUIRE(read(to_parent[0], &m, 1) == 1);
  const pid_t d1 = cl.daemon_pid(1);
  REQUIRE(kill(d1, SIGSTOP) == 0);  // the Cluster's SIGKILL ends it stopped or not
  REQUIRE(write(to_child[1], "s", 1) == 1);
  REQUIRE(read(to_parent[0], &m, 1) == 1);
  kill_daemon(cl);
  REQUIRE(write(to_child[1], "k", 1) == 1);
  CHECK(cl.wait(q, 30) == 0);
  kill(d1, SIGCONT);
  CHECK(cl.wait(t, 30) == 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}
