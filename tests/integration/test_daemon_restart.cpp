// The daemon dies (SIGKILL) under its clients: a blocked waiter gets an error within a
// bound, control calls fail, the client re-attaches once a new daemon runs; and a peer that
// still holds a mapping of another client's region from the dead daemon writes nothing
// into that client's memory.
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

// Stops child `p` and returns once every thread of it has stopped (kill() alone returns
// before: its progress thread could still serve a request).
bool stop_child(pid_t p) {
  int st = 0;
  return kill(p, SIGSTOP) == 0 && waitpid(p, &st, WUNTRACED) == p && WIFSTOPPED(st);
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

// Posts node `node`'s CDMs made over the ofi fabric (its daemon's status; the counters of
// live CDMs are copied in periodically: waits up to 3 s for a non-zero value).
uint64_t ofi_ops(Cluster& cl, int node) {
  uint64_t ops = 0;
  for (int i = 0; i < 60 && !ops; ++i) {
    ops = cl.status(node)["ofi"]["ops"].get<uint64_t>();
    if (!ops) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ops;
}

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
// (NICEMU_TEST_FABRIC=1: meson test daemon-restart-fabric). With the daemons on
// --fabric-data ofi (daemon-restart-fabric-ofi) the AMOs go rank to rank, so the target
// rank is stopped too: they stay with node 0's libugni port, which fails each NIC_DOWN.
TEST_CASE("daemon killed with remote operations in flight: each fails, none waits for ever (F3)") {
  if (!across_hosts()) {
    MESSAGE("skipped: needs NICEMU_TEST_FABRIC=1");
    return;
  }
  Cluster cl(2);
  Cred c = cl.credential();
  Oob oob;  // target (side 0) <-> initiator (side 1)
  int to_parent[2], to_child[2], to_target[2];
  REQUIRE(pipe(to_parent) == 0);
  REQUIRE(pipe(to_child) == 0);
  REQUIRE(pipe(to_target) == 0);
  pid_t t = cl.spawn(1, [&] {
    Gni g = open_gni(1, c);
    static uint64_t words[8];
    Info info{g.addr, 1, uint64_t(words), {}};
    info.h = mem_register(g.nic, info.buf, sizeof words, nullptr, GNI_MEM_READWRITE);
    oob.send(0, info);
    char go = 0;  // first a pipe: a receive with a timeout fails (EINTR) once stopped and resumed
    CHILD_CHECK(read(to_target[0], &go, 1) == 1);
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
    const gni_return_t early = GNI_CqGetEvent(g.cq, &e);
    if (early != GNI_RC_NOT_DONE)
      std::fprintf(stderr, "an event before the daemon's death: rc %d status %llu\n", int(early),
                   (unsigned long long)GNI_CQ_GET_STATUS(e));
    CHILD_CHECK(early == GNI_RC_NOT_DONE);  // in flight, unanswered
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
  const bool ofi = across_hosts_ofi();
  if (ofi) REQUIRE_MESSAGE(ofi_ops(cl, 0) >= 1, "the first AMO did not go over ofi");
  const pid_t d1 = cl.daemon_pid(1);
  REQUIRE(kill(d1, SIGSTOP) == 0);  // the Cluster's SIGKILL ends it stopped or not
  if (ofi) REQUIRE(stop_child(t));  // over ofi the target rank answers, not its daemon
  REQUIRE(write(to_child[1], "s", 1) == 1);
  REQUIRE(read(to_parent[0], &m, 1) == 1);
  kill_daemon(cl);
  REQUIRE(write(to_child[1], "k", 1) == 1);
  CHECK(cl.wait(q, 30) == 0);
  if (ofi) kill(t, SIGCONT);
  kill(d1, SIGCONT);
  REQUIRE(write(to_target[1], "g", 1) == 1);
  CHECK(cl.wait(t, 30) == 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1], to_target[0], to_target[1]}) close(fd);
}

// Over the ofi fabric (daemon-restart-fabric-ofi): the target's daemon restarts (SIGKILL)
// while the target rank, stopped, has AMOs and PUTs of node 0's rank in flight. Resumed with
// its NIC down, the target rank executes nothing more: each post completes (none hangs), an
// AMO with an error, and the target's memory holds exactly the posts that succeeded; posts
// after the restart to the old CDM fail and write nothing. Then a CDM attached to the new
// daemon is looked up afresh by the same initiator (its route may be the old CDM's) and RMA
// works rank to rank again.
TEST_CASE("ofi: target's daemon restarted with posts in flight: each completes, no stray write, new CDM reached") {
  if (!across_hosts_ofi()) {
    MESSAGE("skipped: needs NICEMU_TEST_FABRIC=1 NICEMU_TEST_FABRIC_DATA=ofi");
    return;
  }
  Cluster cl(2);
  Cred c = cl.credential();
  Oob oob, oob2;  // target (side 0) <-> initiator (side 1); the new target <-> initiator
  int to_parent[2], to_child[2], to_target[2];
  REQUIRE(pipe(to_parent) == 0);
  REQUIRE(pipe(to_child) == 0);
  REQUIRE(pipe(to_target) == 0);
  constexpr int kAmos = 24, kPuts = 8, kWords = 64;
  struct Outcome {
    uint32_t amo_ok[8];  // per word: AMOs that succeeded
    uint32_t put_ok;     // bit k: PUT k succeeded
  };
  pid_t t = cl.spawn(1, [&] {
    Gni g = open_gni(1, c);
    static uint64_t words[kWords];
    Info info{g.addr, 1, uint64_t(words), {}};
    info.h = mem_register(g.nic, info.buf, sizeof words, nullptr, GNI_MEM_READWRITE);
    oob.send(0, info);
    char go = 0;  // first a pipe: a receive with a timeout fails (EINTR) once stopped and resumed
    CHILD_CHECK(read(to_target[0], &go, 1) == 1);
    Outcome o = oob.recv<Outcome>(0);  // the initiator is done
    int stray = 0;
    for (int w = 0; w < 8; ++w) stray += words[w] != o.amo_ok[w];
    for (int k = 0; k < kPuts; ++k) stray += words[16 + k] != ((o.put_ok >> k) & 1 ? 0x5000u + k : 0);
    for (int w = 30; w < kWords; ++w) stray += words[w] != 0;
    std::fprintf(stderr, "old target: %d words differ from what the initiator was told\n", stray);
    CHILD_CHECK(stray == 0);
    return 0;
  });
  pid_t q = cl.spawn(0, [&] {
    Gni g = open_gni(2, c);
    Info info = oob.recv<Info>(1);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, info.addr, info.inst);
    gni_post_descriptor_t first = amo_desc(GNI_FMA_ATOMIC_ADD, info.buf + 8 * 60, info.h, 8, 0);
    CHILD_CHECK(post_and_wait(g.cq, ep, first) == 0);  // the path works (adds 0: word 60 stays 0)
    char m = 0;
    CHILD_CHECK(write(to_parent[1], "a", 1) == 1);
    CHILD_CHECK(read(to_child[0], &m, 1) == 1);  // the target rank is stopped now
    static gni_post_descriptor_t d[kAmos + kPuts];
    static uint64_t val[kPuts];
    for (int i = 0; i < kAmos; ++i) {
      d[i] = amo_desc(GNI_FMA_ATOMIC_ADD, info.buf + 8 * uint64_t(i % 8), info.h, 8, 1);
      CHILD_CHECK(GNI_PostFma(ep, &d[i]) == GNI_RC_SUCCESS);
    }
    for (int k = 0; k < kPuts; ++k) {
      val[k] = 0x5000u + uint64_t(k);
      d[kAmos + k] = put_desc(uint64_t(&val[k]), info.buf + 8 * uint64_t(16 + k), info.h, 8);
      CHILD_CHECK(GNI_PostFma(ep, &d[kAmos + k]) == GNI_RC_SUCCESS);
    }
    CHILD_CHECK(write(to_parent[1], "p", 1) == 1);
    CHILD_CHECK(read(to_child[0], &m, 1) == 1);  // its daemon restarted, the rank resumed
    Outcome o{};
    int done = 0, failed = 0;
    int seen[kAmos + kPuts] = {}, amo_st[16] = {}, put_st[16] = {};
    const uint64_t t0 = now_ms();
    while (done < kAmos + kPuts && now_ms() - t0 < 15000) {
      gni_cq_entry_t e = 0;
      gni_return_t rc = GNI_CqWaitEvent(g.cq, 1000, &e);
      if (rc == GNI_RC_TIMEOUT) continue;
      gni_post_descriptor_t* out = nullptr;
      GNI_GetCompleted(g.cq, e, &out);
      CHILD_CHECK(out >= d && out < d + kAmos + kPuts);
      if (!(out >= d && out < d + kAmos + kPuts)) break;
      const long i = out - d;
      CHILD_CHECK(++seen[i] == 1);
      ++done;
      if (GNI_CQ_STATUS_OK(e)) {
        if (i < kAmos) ++o.amo_ok[i % 8];
        else o.put_ok |= 1u << (i - kAmos);
      } else {
        ++failed;
        const uint64_t st = GNI_CQ_GET_STATUS(e);
        int* hist = i < kAmos ? amo_st : put_st;
        ++hist[st < 15 ? st : 15];
        uint32_t recoverable = 1;
        GNI_CqErrorRecoverable(e, &recoverable);
        CHILD_CHECK(recoverable == 0);
      }
    }
    int amo_ok = 0;
    for (uint32_t n : o.amo_ok) amo_ok += int(n);
    std::fprintf(stderr, "%d of %d in-flight posts completed (%d failed: AMOs ok %d, PUTs ok %d) in %llu ms\n", done,
                 kAmos + kPuts, failed, amo_ok, __builtin_popcount(o.put_ok), (unsigned long long)(now_ms() - t0));
    for (int k = 0; k < 16; ++k)
      if (amo_st[k] || put_st[k]) std::fprintf(stderr, "  status %d: %d AMOs, %d PUTs\n", k, amo_st[k], put_st[k]);
    CHILD_CHECK(done == kAmos + kPuts);
    CHILD_CHECK(amo_ok == 0);  // served by a rank whose NIC is down: none executed
    // Posts to the old CDM after the restart: errors, nothing written (words 30, 31).
    static uint64_t late_val = 0xBAD;
    gni_post_descriptor_t late_put = put_desc(uint64_t(&late_val), info.buf + 8 * 30, info.h, 8);
    gni_post_descriptor_t late_amo = amo_desc(GNI_FMA_ATOMIC_ADD, info.buf + 8 * 31, info.h, 8, 1);
    const uint64_t st_put = post_and_wait(g.cq, ep, late_put, 15000);
    const uint64_t st_amo = post_and_wait(g.cq, ep, late_amo, 15000);
    std::fprintf(stderr, "after the restart, to the old CDM: PUT status %llu, AMO status %llu\n",
                 (unsigned long long)st_put, (unsigned long long)st_amo);
    CHILD_CHECK(st_put != 0 && st_put < 99);
    CHILD_CHECK(st_amo != 0 && st_amo < 99);
    oob.send(1, o);
    // A CDM attached to the new daemon: PUT, GET back and an AMO, rank to rank. After a
    // second: the port asks again for a route that had no address only then (meanwhile the
    // daemons' path carries the posts).
    Info fresh = oob2.recv<Info>(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    gni_ep_handle_t ep2 = bound_ep(g.nic, g.cq, fresh.addr, fresh.inst);
    static uint64_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8];
    gni_mem_handle_t bh = mem_register(g.nic, uint64_t(back), sizeof back);
    gni_post_descriptor_t put = put_desc(uint64_t(src), fresh.buf, fresh.h, sizeof src);
    uint64_t st = post_and_wait(g.cq, ep2, put, 15000);
    std::fprintf(stderr, "to the new CDM: first PUT status %llu\n", (unsigned long long)st);
    CHILD_CHECK(st == 0);
    gni_post_descriptor_t get = make_desc(GNI_POST_FMA_GET, uint64_t(back), bh, fresh.buf, fresh.h, sizeof back);
    CHILD_CHECK(post_and_wait(g.cq, ep2, get) == 0);
    CHILD_CHECK(std::memcmp(back, src, sizeof back) == 0);
    gni_post_descriptor_t add = amo_desc(GNI_FMA_ATOMIC_ADD, fresh.buf + 8 * 8, fresh.h, 8, 7);
    CHILD_CHECK(post_and_wait(g.cq, ep2, add) == 0);
    oob2.send(1, 1);
    return 0;
  });
  char m;
  REQUIRE(read(to_parent[0], &m, 1) == 1);
  const uint64_t ops0 = ofi_ops(cl, 0);
  REQUIRE_MESSAGE(ops0 >= 1, "the first AMO did not go over ofi");
  REQUIRE(stop_child(t));
  REQUIRE(write(to_child[1], "s", 1) == 1);
  REQUIRE(read(to_parent[0], &m, 1) == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // with the provider
  cl.restart_daemon(1, true);
  REQUIRE(kill(t, SIGCONT) == 0);
  REQUIRE(write(to_target[1], "g", 1) == 1);
  REQUIRE(write(to_child[1], "r", 1) == 1);
  CHECK(cl.wait(t, 40) == 0);
  pid_t t2 = cl.spawn(1, [&] {
    Gni g = open_gni(3, c);
    static uint64_t words[16];
    Info info{g.addr, 3, uint64_t(words), {}};
    info.h = mem_register(g.nic, info.buf, sizeof words, nullptr, GNI_MEM_READWRITE);
    oob2.send(0, info);
    CHILD_CHECK(oob2.recv<int>(0) == 1);
    for (uint64_t k = 0; k < 8; ++k) CHILD_CHECK(words[k] == k + 1);
    CHILD_CHECK(words[8] == 7);
    return 0;
  });
  CHECK(cl.wait(q, 60) == 0);
  CHECK(cl.wait(t2, 20) == 0);
  // The new CDM was reached rank to rank: its rank executed the AMO itself.
  CHECK(cl.status(1)["ofi"]["served"].get<uint64_t>() >= 1);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1], to_target[0], to_target[1]}) close(fd);
}
