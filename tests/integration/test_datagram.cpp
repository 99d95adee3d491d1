// Session-management datagrams against real daemons: directed to wildcard and directed to
// directed matching on one node and across two emulated nodes, ids, probes, blocking waits,
// cancellation (also by GNI_EpDestroy, which must wake a blocked probe), and errors.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>

#include "harness.h"

using namespace harness;

namespace {

struct Addr {
  uint32_t addr, inst;
};

constexpr uint64_t kDirected = uint64_t{1} << 63;

// The server side of a connection set-up the way Open MPI and UCX do it: a wildcard post
// with id 0, a probe for the finished id, then a wait that consumes it.
int wildcard_server(Oob& oob, int side, Cred c, uint32_t inst, int expected_clients) {
  Gni g = open_gni(inst, c);
  oob.send(side, Addr{g.addr, inst});
  for (int k = 0; k < expected_clients; ++k) {
    gni_ep_handle_t any;
    CHILD_CHECK(GNI_EpCreate(g.nic, nullptr, &any) == GNI_RC_SUCCESS);
    char in[64], out[64] = {};
    std::snprintf(in, sizeof in, "server %u", inst);
    CHILD_CHECK(GNI_EpPostDataWId(any, in, sizeof in, out, sizeof out, 0) == GNI_RC_SUCCESS);
    uint64_t id = 99;
    CHILD_CHECK(GNI_PostdataProbeWaitById(g.nic, 5000, &id) == GNI_RC_SUCCESS);
    CHILD_CHECK(id == 0);
    gni_post_state_t st;
    uint32_t ra = 0, ri = 0;
    CHILD_CHECK(GNI_EpPostDataWaitById(any, 0, uint32_t(-1), &st, &ra, &ri) == GNI_RC_SUCCESS);
    CHILD_CHECK(st == GNI_POST_COMPLETED);
    char want[64];
    std::snprintf(want, sizeof want, "client %u", ri);
    CHILD_CHECK(std::strcmp(out, want) == 0);
    // Consumed: nothing left to test on that EP.
    CHILD_CHECK(GNI_EpPostDataTestById(any, 0, &st, &ra, &ri) == GNI_RC_NO_MATCH);
    CHILD_CHECK(GNI_EpDestroy(any) == GNI_RC_SUCCESS);
  }
  return oob.recv<int>(side) == 1 ? 0 : 1;
}

int directed_client(Addr srv, Cred c, uint32_t inst) {
  Gni g = open_gni(inst, c);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, srv.addr, srv.inst);
  char in[64], out[64] = {};
  std::snprintf(in, sizeof in, "client %u", inst);
  CHILD_CHECK(GNI_EpPostDataWId(ep, in, sizeof in, out, sizeof out, kDirected | inst) == GNI_RC_SUCCESS);
  gni_post_state_t st;
  uint32_t ra = 0, ri = 0;
  CHILD_CHECK(GNI_EpPostDataWaitById(ep, kDirected | inst, 5000, &st, &ra, &ri) == GNI_RC_SUCCESS);
  CHILD_CHECK(st == GNI_POST_COMPLETED && ra == srv.addr && ri == srv.inst);
  char want[64];
  std::snprintf(want, sizeof want, "server %u", srv.inst);
  CHILD_CHECK(std::strcmp(out, want) == 0);
  return 0;
}

void wildcard_setup(int nodes, int clients) {
  Cluster cl(nodes);
  Cred c = cl.credential();
  Oob oob;
  pid_t s = cl.spawn(0, [&] { return wildcard_server(oob, 1, c, 1000, clients); });
  Addr srv = oob.recv<Addr>(0);
  std::vector<pid_t> cs;
  for (int k = 0; k < clients; ++k)
    cs.push_back(cl.spawn(k % nodes == 0 && nodes > 1 ? 1 : 0, [&, k] { return directed_client(srv, c, 2000 + k); }));
  for (pid_t p : cs) CHECK(cl.wait(p) == 0);
  oob.send(0, 1);
  CHECK(cl.wait(s) == 0);
}

}  // namespace

TEST_CASE("directed posts meet a wildcard server on one node") { wildcard_setup(1, 3); }

TEST_CASE("directed posts meet a wildcard server across emulated nodes") { wildcard_setup(2, 3); }

TEST_CASE("two directed posts aimed at each other match, in either order and across nodes") {
  for (int nodes : {1, 2}) {
    for (int order = 0; order < 2; ++order) {
      Cluster cl(nodes);
      Cred c = cl.credential();
      Oob oob;
      auto side = [&](int me, uint32_t inst, uint32_t peer_inst) {
        Gni g = open_gni(inst, c);
        oob.send(me, Addr{g.addr, inst});
        Addr peer = oob.recv<Addr>(me);
        CHILD_CHECK(peer.inst == peer_inst);
        gni_ep_handle_t ep = bound_ep(g.nic, nullptr, peer.addr, peer.inst);
        if (me != order) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        uint32_t in = inst * 10, out = 0;
        CHILD_CHECK(GNI_EpPostData(ep, &in, sizeof in, &out, sizeof out) == GNI_RC_SUCCESS);
        gni_post_state_t st;
        uint32_t ra, ri;
        CHILD_CHECK(GNI_EpPostDataWait(ep, 5000, &st, &ra, &ri) == GNI_RC_SUCCESS);
        CHILD_CHECK(st == GNI_POST_COMPLETED && ri == peer_inst && ra == peer.addr);
        CHILD_CHECK(out == peer_inst * 10);
        // Exactly one match each: nothing else finished on this CDM.
        uint32_t pa, pi;
        CHILD_CHECK(GNI_PostDataProbe(g.nic, &pa, &pi) == GNI_RC_NO_MATCH);
        return 0;
      };
      pid_t a = cl.spawn(0, [&] { return side(0, 5, 6); });
      pid_t b = cl.spawn(nodes - 1, [&] { return side(1, 6, 5); });
      CHECK(cl.wait(a) == 0);
      CHECK(cl.wait(b) == 0);
      auto st = cl.status(0);
      CHECK(st["counters"]["datagrams_pending"].get<int>() == 0);
      CHECK(st["counters"]["datagrams_incoming"].get<int>() == 0);
    }
  }
}

TEST_CASE("cancellation, EpDestroy waking a blocked probe, timeouts and errors") {
  CHECK(in_one_child(1, 30, [&](Cluster&, Cred, Gni& g) {
    gni_ep_handle_t w1, w2, bound;
    CHILD_CHECK(GNI_EpCreate(g.nic, nullptr, &w1) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpCreate(g.nic, nullptr, &w2) == GNI_RC_SUCCESS);
    gni_post_state_t st;
    uint32_t ra, ri;
    uint64_t id;
    // Nothing posted.
    CHILD_CHECK(GNI_EpPostDataTest(w1, &st, &ra, &ri) == GNI_RC_NO_MATCH);
    CHILD_CHECK(GNI_PostDataProbeById(g.nic, &id) == GNI_RC_NO_MATCH);
    // Zero-length posts with NULL buffers are legal; one outstanding per EP.
    CHILD_CHECK(GNI_EpPostDataWId(w1, nullptr, 0, nullptr, 0, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWId(w1, nullptr, 0, nullptr, 0, 7) == GNI_RC_ERROR_RESOURCE);
    // Two wildcards never match.
    CHILD_CHECK(GNI_EpPostDataWId(w2, nullptr, 0, nullptr, 0, 3) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWaitById(w2, 3, 50, &st, &ra, &ri) == GNI_RC_TIMEOUT);
    CHILD_CHECK(st == GNI_POST_PENDING);
    CHILD_CHECK(GNI_EpPostDataWaitById(w2, 3, 0, &st, &ra, &ri) == GNI_RC_INVALID_PARAM);
    // Cancel: TERMINATED, visible to probes until consumed; a second cancel finds nothing.
    CHILD_CHECK(GNI_EpPostDataCancelById(w2, 3) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataCancelById(w2, 3) == GNI_RC_NO_MATCH);
    CHILD_CHECK(GNI_PostDataProbeById(g.nic, &id) == GNI_RC_SUCCESS && id == 3);
    CHILD_CHECK(GNI_EpPostDataWaitById(w2, 3, 100, &st, &ra, &ri) == GNI_RC_SUCCESS);
    CHILD_CHECK(st == GNI_POST_TERMINATED);
    CHILD_CHECK(GNI_PostDataProbeById(g.nic, &id) == GNI_RC_NO_MATCH);
    // Bad arguments.
    char big[GNI_DATAGRAM_MAXSIZE + 1] = {};
    CHILD_CHECK(GNI_EpPostData(w2, big, sizeof big, nullptr, 0) == GNI_RC_SIZE_ERROR);
    CHILD_CHECK(GNI_EpPostDataWId(w2, nullptr, 0, nullptr, 0, uint64_t(-1)) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_EpPostData(w2, nullptr, 8, nullptr, 0) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_PostdataProbeWaitById(nullptr, 1, &id) == GNI_RC_INVALID_PARAM);
    // A blocked probe (UCX runs it in its own thread) is woken by GNI_EpDestroy of the EP
    // whose datagram it was, and reports that id.
    CHILD_CHECK(GNI_EpPostDataCancelById(w1, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWaitById(w1, 0, 100, &st, &ra, &ri) == GNI_RC_SUCCESS && st == GNI_POST_TERMINATED);
    CHILD_CHECK(GNI_EpPostDataWId(w1, nullptr, 0, nullptr, 0, 1) == GNI_RC_SUCCESS);
    std::atomic<int> probe_rc{-1};
    uint64_t woke_id = 0;
    std::thread prober([&] { probe_rc = GNI_PostdataProbeWaitById(g.nic, uint32_t(-1), &woke_id); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHILD_CHECK(probe_rc.load() == -1);  // still blocked
    CHILD_CHECK(GNI_EpDestroy(w1) == GNI_RC_SUCCESS);
    prober.join();
    CHILD_CHECK(probe_rc.load() == GNI_RC_SUCCESS && woke_id == 1);
    // A directed post to nobody times out in the wait, and SIZE_ERROR reports a reply
    // larger than the buffer.
    bound = bound_ep(g.nic, nullptr, g.addr, 424242);
    CHILD_CHECK(GNI_EpPostData(bound, nullptr, 0, nullptr, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWait(bound, 30, &st, &ra, &ri) == GNI_RC_TIMEOUT);
    CHILD_CHECK(GNI_EpPostDataCancel(bound) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataTest(bound, &st, &ra, &ri) == GNI_RC_SUCCESS && st == GNI_POST_TERMINATED);
    gni_ep_handle_t self_ep = bound_ep(g.nic, nullptr, g.addr, 1);  // our own CDM
    char lots[100], small[10];
    std::memset(lots, 'x', sizeof lots);
    CHILD_CHECK(GNI_EpPostDataWId(w2, lots, sizeof lots, small, sizeof small, 5) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWId(self_ep, lots, sizeof lots, small, sizeof small, 6) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWaitById(self_ep, 6, 2000, &st, &ra, &ri) == GNI_RC_SIZE_ERROR);
    CHILD_CHECK(st == GNI_POST_COMPLETED && ri == 1 && small[9] == 'x');
    GNI_EpDestroy(bound);
    GNI_EpDestroy(self_ep);
    GNI_EpDestroy(w2);
    return 0;
  }) == 0);
}

// UCX's udt destroys an EP after GNI_EpPostDataCancelById returned NO_MATCH, taking that
// to mean the other thread consumed the post; Lustre's gnilnd requires SUCCESS when it
// cancels a post it has not reaped. A matched post not yet consumed must therefore cancel
// with SUCCESS and stay COMPLETED; and once its EP is destroyed, no probe may report it.
TEST_CASE("cancelling a matched post that was not consumed, and destroying its EP") {
  CHECK(in_one_child(1, 30, [&](Cluster&, Cred, Gni& g) {
    gni_ep_handle_t any, a, b;
    CHILD_CHECK(GNI_EpCreate(g.nic, nullptr, &any) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpCreate(g.nic, nullptr, &a) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpCreate(g.nic, nullptr, &b) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpBind(a, g.addr, 1) == GNI_RC_SUCCESS);  // our own CDM's wildcard
    CHILD_CHECK(GNI_EpBind(b, g.addr, 1) == GNI_RC_SUCCESS);
    gni_post_state_t st;
    uint32_t ra, ri;
    uint64_t id = 0;
    uint32_t in = 7, out = 0, got = 0;
    // Post a matches the wildcard; both finish. Cancelling a before it is consumed succeeds
    // and changes nothing: the wait reports COMPLETED with the reply.
    CHILD_CHECK(GNI_EpPostDataWId(any, &in, sizeof in, &got, sizeof got, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWId(a, &in, sizeof in, &out, sizeof out, 11) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWaitById(any, 0, 2000, &st, &ra, &ri) == GNI_RC_SUCCESS && st == GNI_POST_COMPLETED);
    CHILD_CHECK(GNI_PostdataProbeWaitById(g.nic, 2000, &id) == GNI_RC_SUCCESS && id == 11);
    CHILD_CHECK(GNI_EpPostDataCancelById(a, 11) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWaitById(a, 11, 100, &st, &ra, &ri) == GNI_RC_SUCCESS);
    CHILD_CHECK(st == GNI_POST_COMPLETED && out == 7);
    CHILD_CHECK(GNI_EpPostDataCancelById(a, 11) == GNI_RC_NO_MATCH);  // consumed: nothing left
    // Post b matches a new wildcard and its EP is destroyed unconsumed: the post goes with
    // it, and no probe reports id 12 afterwards.
    CHILD_CHECK(GNI_EpPostDataWId(any, &in, sizeof in, &got, sizeof got, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWId(b, &in, sizeof in, &out, sizeof out, 12) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpPostDataWaitById(any, 0, 2000, &st, &ra, &ri) == GNI_RC_SUCCESS && st == GNI_POST_COMPLETED);
    CHILD_CHECK(GNI_PostdataProbeWaitById(g.nic, 2000, &id) == GNI_RC_SUCCESS && id == 12);
    CHILD_CHECK(GNI_EpDestroy(b) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_PostDataProbeById(g.nic, &id) == GNI_RC_NO_MATCH);
    GNI_EpDestroy(a);
    GNI_EpDestroy(any);
    return 0;
  }) == 0);
}

TEST_CASE_FIXTURE(TwoNodes, "a CDM that dies takes its posts with it") {
  pid_t dead = cl.spawn(1, [&] {
    Gni g = open_gni(7, c);
    gni_ep_handle_t ep = bound_ep(g.nic, nullptr, cl.addr(0), 8);  // nobody there yet
    CHILD_CHECK(GNI_EpPostData(ep, nullptr, 0, nullptr, 0) == GNI_RC_SUCCESS);
    oob.send(1, 1);
    pause();
    return 0;
  });
  CHECK(oob.recv<int>(0) == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(cl.status(0)["counters"]["datagrams_incoming"].get<int>() == 1);
  kill(dead, SIGKILL);
  cl.wait(dead);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = cl.status(0)["counters"]["datagrams_incoming"].get<int>() == 0 &&
           cl.status(1)["counters"]["datagrams_pending"].get<int>() == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(gone);
}

// A cancel names the post it means. Another thread of the process may consume the post and
// post anew on the same EP while the cancel is on its way to the daemon; the daemon must then
// leave the new post alone (GNI_RC_NO_MATCH), not cancel it in the old one's place.
TEST_CASE("a cancel that arrives after its post was replaced leaves the new post pending") {
  namespace ctl = nicemu::abi::ctl;
  Cluster cl(1);
  Cred c = cl.credential();
  nicemu::ctl::Connection conn;
  ctl::AttachReply ar{};
  int fds[3];
  REQUIRE((attach_by_hand(conn, cl.socket(0), 5, c, ar, fds) && ar.r.rc == GNI_RC_SUCCESS));
  for (int fd : fds)
    if (fd >= 0) close(fd);
  ctl::DgramOpen op{};
  op.h.op = uint16_t(ctl::Op::kDgramOpen);
  ctl::DgramOpenReply opr{};
  REQUIRE((conn.call(op, opr) && opr.r.rc == GNI_RC_SUCCESS));

  ctl::DgramSubmit post{};  // the replacement: a wildcard post, the EP's second
  post.h.op = uint16_t(ctl::Op::kDgramSubmit);
  post.lib_seq = 2;
  post.ep = 77;
  post.wildcard = 1;
  REQUIRE(conn.send(&post, sizeof post));
  auto cancel = [&](uint64_t seq) {
    ctl::DgramCancel req{};
    req.h.op = uint16_t(ctl::Op::kDgramCancel);
    req.ep = 77;
    req.lib_seq = seq;
    ctl::Reply rep{};
    REQUIRE(conn.call(req, rep));
    return rep.rc;
  };
  CHECK(cancel(1) == GNI_RC_NO_MATCH);  // meant the first post, already consumed
  CHECK(cl.status(0)["counters"]["datagrams_pending"].get<int>() == 1);
  CHECK(cancel(2) == GNI_RC_SUCCESS);
  CHECK(cl.status(0)["counters"]["datagrams_pending"].get<int>() == 0);
  CHECK(cl.status(0)["counters"]["datagrams_cancelled"].get<int>() == 1);
}
