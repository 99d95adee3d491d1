// Per-process and per-credential resource limits (parameter table rows max_*_per_*): a
// daemon started with small limits refuses the next CDM, registration, CQ, mailbox and
// datagram post with GNI_RC_ERROR_RESOURCE, counts the refusals, gives the room back when
// objects are destroyed or their process exits, and keeps serving a flooding client's
// neighbours.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <poll.h>
#include <sys/resource.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "harness.h"
#include "nicemu/abi/remote_ops.h"
#include "nicemu/common/params.h"

using namespace harness;
namespace ctl = nicemu::abi::ctl;

namespace {

const std::vector<std::string> kLimits = {
    "--max-cdms-per-process",          "2", "--max-cqs-per-process",       "3",
    "--max-registrations-per-process", "8", "--max-registrations-per-credential", "12",
    "--max-datagrams-per-process",     "3", "--max-mailboxes-per-process", "2"};

struct Attached {
  gni_cdm_handle_t cdm = nullptr;
  gni_nic_handle_t nic = nullptr;
  uint32_t addr = 0;
};

gni_return_t attach(Attached& a, uint32_t inst, Cred c) {
  gni_return_t rc = GNI_CdmCreate(inst, c.ptag, c.cookie, GNI_CDM_MODE_ERR_NO_KILL, &a.cdm);
  return rc == GNI_RC_SUCCESS ? GNI_CdmAttach(a.cdm, 0, &a.addr, &a.nic) : rc;
}

// Registers pages of `buf` until refused; returns how many succeeded (handles in `h`).
int register_until_refused(gni_nic_handle_t nic, char* buf, int max, std::vector<gni_mem_handle_t>& h,
                           gni_return_t& last) {
  int n = 0;
  for (; n < max; ++n) {
    gni_mem_handle_t m;
    last = GNI_MemRegister(nic, uint64_t(buf + 4096 * n), 4096, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &m);
    if (last != GNI_RC_SUCCESS) break;
    h.push_back(m);
  }
  return n;
}

int first_process(Cred c, int ready_fd, int go_fd) {
  Attached a;
  CHILD_CHECK(attach(a, 1, c) == GNI_RC_SUCCESS);
  // CQs: 3, then refused; one destroyed gives its room back.
  std::vector<gni_cq_handle_t> cqs;
  gni_return_t rc = GNI_RC_SUCCESS;
  for (int i = 0; i < 5 && rc == GNI_RC_SUCCESS; ++i) {
    gni_cq_handle_t cq;
    rc = GNI_CqCreate(a.nic, 16, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &cq);
    if (rc == GNI_RC_SUCCESS) cqs.push_back(cq);
  }
  CHILD_CHECK(cqs.size() == 3 && rc == GNI_RC_ERROR_RESOURCE);
  CHILD_CHECK(GNI_CqDestroy(cqs.back()) == GNI_RC_SUCCESS);
  cqs.pop_back();
  gni_cq_handle_t again;
  CHILD_CHECK(GNI_CqCreate(a.nic, 16, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &again) == GNI_RC_SUCCESS);

  // Registrations: 8 per process.
  static char buf[4096 * 16] __attribute__((aligned(4096)));
  std::vector<gni_mem_handle_t> regs;
  CHILD_CHECK(register_until_refused(a.nic, buf, 16, regs, rc) == 8 && rc == GNI_RC_ERROR_RESOURCE);
  CHILD_CHECK(GNI_MemDeregister(a.nic, &regs.back()) == GNI_RC_SUCCESS);
  regs.pop_back();
  gni_mem_handle_t m;
  m = mem_register(a.nic, uint64_t(buf), 4096, nullptr, GNI_MEM_READWRITE);
  regs.push_back(m);

  // CDMs: a second one, not a third. The second shares the process's registrations, so
  // it does not get 8 more.
  Attached b, third;
  CHILD_CHECK(attach(b, 2, c) == GNI_RC_SUCCESS);
  CHILD_CHECK(attach(third, 3, c) == GNI_RC_ERROR_RESOURCE);
  CHILD_CHECK(GNI_MemRegister(b.nic, uint64_t(buf + 4096 * 12), 4096, nullptr, GNI_MEM_READWRITE, uint32_t(-1),
                              &m) == GNI_RC_ERROR_RESOURCE);

  // Datagram posts: 3, each on its own EP.
  gni_ep_handle_t eps[4];
  for (auto& ep : eps) CHILD_CHECK(GNI_EpCreate(a.nic, nullptr, &ep) == GNI_RC_SUCCESS);
  for (int i = 0; i < 3; ++i) CHILD_CHECK(GNI_EpPostDataWId(eps[i], nullptr, 0, nullptr, 0, 100 + i) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_EpPostDataWId(eps[3], nullptr, 0, nullptr, 0, 103) == GNI_RC_ERROR_RESOURCE);
  CHILD_CHECK(GNI_EpPostDataCancelById(eps[0], 100) == GNI_RC_SUCCESS);

  // Mailboxes in this process's region: 2 new ones; an existing one still opens.
  {
    nicemu::ctl::Connection conn;
    CHILD_CHECK(conn.connect(nicemu::ctl::socket_path(nicemu::ctl::default_rundir(), a.addr)));
    auto open = [&](uint32_t offset) {
      ctl::MboxOpen req{};
      req.h.op = uint16_t(ctl::Op::kMboxOpen);
      req.ptag = c.ptag;
      req.cookie = c.cookie;
      req.mbox_offset = offset;
      req.qword1 = regs.front().qword1;
      req.qword2 = regs.front().qword2;
      req.msg_buffer = uint64_t(buf);
      req.buff_size = 4096;
      req.credits = 2;
      req.max_size = 64;
      ctl::MboxOpenReply rep{};
      CHILD_CHECK(conn.call(req, rep));
      return rep.r.rc;
    };
    CHILD_CHECK(open(0) == GNI_RC_SUCCESS);
    CHILD_CHECK(open(1024) == GNI_RC_SUCCESS);
    CHILD_CHECK(open(2048) == GNI_RC_ERROR_RESOURCE);
    CHILD_CHECK(open(0) == GNI_RC_SUCCESS);
  }
  CHILD_CHECK(write(ready_fd, "r", 1) == 1);
  char go;
  CHILD_CHECK(read(go_fd, &go, 1) == 1);
  return 0;
}

// Another process of the same job: the credential's 12 registrations, 8 of them held by
// the first process.
int second_process(Cred c, int expect) {
  Attached a;
  CHILD_CHECK(attach(a, 10 + uint32_t(expect), c) == GNI_RC_SUCCESS);
  static char buf[4096 * 16] __attribute__((aligned(4096)));
  std::vector<gni_mem_handle_t> regs;
  gni_return_t rc;
  int n = register_until_refused(a.nic, buf, 16, regs, rc);
  std::fprintf(stderr, "second process: %d registrations (expected %d)\n", n, expect);
  CHILD_CHECK(n == expect && rc == GNI_RC_ERROR_RESOURCE);
  return 0;
}

}  // namespace

TEST_CASE("limits per process and per credential, and their release") {
  Cluster cl(1, kLimits);
  Cred c = cl.credential();
  int ready[2], go[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(go) == 0);
  pid_t first = cl.spawn(0, [&] { return first_process(c, ready[1], go[0]); });
  char r;
  REQUIRE(read(ready[0], &r, 1) == 1);
  CHECK(cl.wait(cl.spawn(0, [&] { return second_process(c, 4); })) == 0);
  REQUIRE(write(go[1], "g", 1) == 1);
  CHECK(cl.wait(first) == 0);
  // The first process is gone: its registrations no longer count against the job.
  for (int i = 0; i < 100 && cl.status(0)["cdms"].size() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(cl.wait(cl.spawn(0, [&] { return second_process(c, 8); })) == 0);
  nlohmann::json s = cl.status(0);
  // The datagram post over the per-process limit is refused by libugni itself (posts are
  // one-way messages), so the daemon counts the other seven refusals.
  CHECK(s["counters"]["resource_refused"].get<uint64_t>() >= 7);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}

// The fault injector's `reg` rules (docs/fault-injection.md): the first registration of each
// CDM fails with GNI_RC_ERROR_RESOURCE, the second with GNI_RC_ERROR_NOMEM, nothing is
// registered by either, and the next ones work.
TEST_CASE("registrations failed by the fault injector") {
  Cluster cl(1, {"--fault", "seed=9 nth=reg:1:error nth=reg:2:exhaust"});
  Cred c = cl.credential();
  CHECK(cl.wait(cl.spawn(0, [&] {
          Attached a;
          CHILD_CHECK(attach(a, 1, c) == GNI_RC_SUCCESS);
          static char buf[4096 * 4] __attribute__((aligned(4096)));
          gni_mem_handle_t h{};
          CHILD_CHECK(GNI_MemRegister(a.nic, uint64_t(buf), 4096, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &h) ==
                      GNI_RC_ERROR_RESOURCE);
          CHILD_CHECK(GNI_MemRegister(a.nic, uint64_t(buf), 4096, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &h) ==
                      GNI_RC_ERROR_NOMEM);
          CHILD_CHECK(cl.status(0)["cdms"][0]["registrations"].get<uint64_t>() == 0);
          CHILD_CHECK(GNI_MemRegister(a.nic, uint64_t(buf), 4096, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &h) ==
                      GNI_RC_SUCCESS);
          CHILD_CHECK(GNI_MemDeregister(a.nic, &h) == GNI_RC_SUCCESS);
          return 0;
        })) == 0);
  CHECK(cl.status(0)["cdms"].size() == 0);
}

TEST_CASE("a client flooding the control socket does not starve another") {
  Cluster cl(1);
  // The flooder pipelines requests without reading replies: the daemon serves one request
  // per connection per turn, and closes a connection whose replies it cannot deliver.
  pid_t flooder = cl.spawn(0, [&] {
    nicemu::ctl::Connection conn;
    CHILD_CHECK(conn.connect(cl.socket(0)));
    ctl::Hello h{};
    h.h = ctl::make_header<ctl::Hello>(ctl::Op::kHello, 1);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < end)
      if (send(conn.fd(), &h, sizeof h, MSG_NOSIGNAL) < 0 && errno != EAGAIN && errno != EINTR) break;
    return 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double worst_ms = 0;
  for (int i = 0; i < 50; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    nicemu::ctl::Connection conn;
    REQUIRE(conn.connect(cl.socket(0)));
    ctl::Hello h{};
    h.h.op = uint16_t(ctl::Op::kHello);
    ctl::HelloReply rep{};
    REQUIRE(conn.call(h, rep));
    CHECK(rep.r.rc == GNI_RC_SUCCESS);
    worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  MESSAGE("worst Hello round trip next to a flooder: " << worst_ms << " ms");
  CHECK(worst_ms < 500);  // generous for a loaded 2-core machine; starvation would be seconds
  CHECK(cl.wait(flooder) == 0);
}

// A client that fills its attach socket with one-way messages while its daemon is stopped
// blocks in send() until its send buffer drains to a quarter; the daemon reads at most a
// batch per wake-up. Once continued, it must read every message and unblock the client:
// a wait that needed a new message to wake it would stall both for good. (A hypothesis for
// finding F5, docs/security.md, which this test refuted: Asio re-arms its edge-triggered
// wait with EPOLL_CTL_MOD, which reports a socket that is still readable.)
TEST_CASE("a client that filled its attach socket is read whole once its daemon runs again") {
  Cluster cl(1);
  const uint64_t before = cl.status(0)["counters"]["malformed_messages"].get<uint64_t>();
  nicemu::ctl::Connection conn;
  REQUIRE(conn.connect(cl.socket(0)));
  // A RemotePost on a connection that attached nothing: the daemon counts it as malformed and
  // sends no reply, so the test sees how many it read.
  nicemu::abi::remote::RemotePost p{};
  p.h = ctl::make_header<nicemu::abi::remote::RemotePost>(ctl::Op::kRemotePost, 1);
  const int fd = conn.fd();
  REQUIRE(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0);
  const pid_t d = cl.daemon_pid(0);
  REQUIRE(kill(d, SIGSTOP) == 0);
  uint64_t sent = 0;
  while (send(fd, &p, sizeof p, MSG_NOSIGNAL) == ssize_t(sizeof p)) ++sent;
  const int err = errno;
  REQUIRE(kill(d, SIGCONT) == 0);
  REQUIRE(err == EAGAIN);
  MESSAGE(sent << " messages queued before the client's socket was full");
  REQUIRE(sent > 128);  // more than two batches
  // As a client blocked in send(): wait until writable, then send a few more.
  const uint64_t more = 1000;
  uint64_t extra = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (extra < more && std::chrono::steady_clock::now() < deadline) {
    pollfd pf{fd, POLLOUT, 0};
    if (poll(&pf, 1, 100) <= 0) continue;
    if (send(fd, &p, sizeof p, MSG_NOSIGNAL) == ssize_t(sizeof p)) ++extra;
  }
  CHECK(extra == more);  // the client was unblocked
  uint64_t read = 0;
  for (int i = 0; i < 500; ++i) {
    read = cl.status(0)["counters"]["malformed_messages"].get<uint64_t>() - before;
    if (read >= sent + extra) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(read == sent + extra);
}

// The default CDM limit is the hardware's (docs/decisions.md): with no flag, a process
// attaches max_cdms_per_process CDMs, GNI_GetJobResInfo(GNI_JOB_RES_FMA) reports them all
// used against that same limit, and the next attach is refused with GNI_RC_ERROR_RESOURCE.
TEST_CASE("a process attaches the default CDM limit and is refused beyond it") {
  constexpr uint64_t kDefault = nicemu::params::default_uint(nicemu::params::param("max_cdms_per_process"));
  static_assert(kDefault == 123, "the default is the Aries NIC's user FMA descriptors; see docs/decisions.md");
  Cluster cl(1);
  pid_t p = cl.spawn(0, [&] {
    Cred c = cl.credential();
    std::vector<Attached> as(kDefault);
    for (uint64_t i = 0; i < kDefault; ++i) CHILD_CHECK(attach(as[i], uint32_t(200 + i), c) == GNI_RC_SUCCESS);
    gni_job_res_desc_t jr{};
    CHILD_CHECK(GNI_GetJobResInfo(0, c.ptag, GNI_JOB_RES_FMA, &jr) == GNI_RC_SUCCESS);
    CHILD_CHECK(jr.used == kDefault && jr.limit == kDefault);
    Attached beyond;
    CHILD_CHECK(attach(beyond, 199, c) == GNI_RC_ERROR_RESOURCE);
    // One destroyed gives its descriptor back.
    CHILD_CHECK(GNI_CdmDestroy(as.back().cdm) == GNI_RC_SUCCESS);
    as.pop_back();
    GNI_CdmDestroy(beyond.cdm);
    Attached again;
    CHILD_CHECK(attach(again, 198, c) == GNI_RC_SUCCESS);
    GNI_CdmDestroy(again.cdm);
    for (auto& a : as) GNI_CdmDestroy(a.cdm);
    return 0;
  });
  CHECK(cl.wait(p, 120) == 0);
}

// A node with more CDMs than one seqpacket message can describe: the status document
// comes in pages (ctl::Status offset) and parses whole.
TEST_CASE("the status of a node with a thousand CDMs is read whole") {
  constexpr int kCdms = 1000;
  Cluster cl(1, {"--max-cdms-per-process", "1100"});
  rlimit nofile{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &nofile) == 0);
  if (nofile.rlim_max < kCdms + 64) {
    MESSAGE("skipped: RLIMIT_NOFILE hard limit " << nofile.rlim_max << " is below " << kCdms + 64);
    return;
  }
  pid_t p = cl.spawn(0, [&] {
    rlimit r{};
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);  // each attached CDM keeps its control connection
    Cred c = cl.credential();
    std::vector<Attached> as(kCdms);
    for (int i = 0; i < kCdms; ++i) CHILD_CHECK(attach(as[i], 100 + i, c) == GNI_RC_SUCCESS);
    nicemu::ctl::Connection conn;
    CHILD_CHECK(conn.connect(cl.socket(0)));
    auto s = conn.status_json();
    CHILD_CHECK(s.has_value());
    CHILD_CHECK(s->size() > 2 * ctl::kStatusPage);  // really several pages
    auto j = nlohmann::json::parse(*s, nullptr, false);
    CHILD_CHECK(!j.is_discarded());
    CHILD_CHECK(j["cdms"].size() == size_t(kCdms));
    std::vector<bool> seen(kCdms);
    for (auto& e : j["cdms"]) {
      int inst = e["inst_id"].get<int>() - 100;
      CHILD_CHECK(inst >= 0 && inst < kCdms && !seen[inst]);
      seen[inst] = true;
    }
    for (auto& a : as) GNI_CdmDestroy(a.cdm);
    return 0;
  });
  CHECK(cl.wait(p, 120) == 0);
}

// A page past the end of the snapshot is refused, not read out of bounds.
TEST_CASE("a status page past the end is an error") {
  Cluster cl(1);
  nicemu::ctl::Connection conn;
  REQUIRE(conn.connect(cl.socket(0)));
  ctl::Status req{};
  req.h.op = uint16_t(ctl::Op::kStatus);
  req.offset = 1u << 30;
  std::vector<char> buf(sizeof(ctl::StatusReply) + ctl::kStatusPage);
  long n = conn.call(&req, sizeof req, buf.data(), buf.size());
  REQUIRE(n >= long(sizeof(ctl::Reply)));
  ctl::Reply rep;
  std::memcpy(&rep, buf.data(), sizeof rep);
  CHECK(rep.rc == GNI_RC_INVALID_PARAM);
  CHECK(conn.status_json().has_value());  // and the connection still serves
}

// A daemon out of file descriptors leaves new connections in the backlog and retries
// later instead of spinning on accept; they are served once descriptors are free.
TEST_CASE("a daemon out of descriptors defers accepts without spinning") {
  pid_t t = fork();
  REQUIRE(t >= 0);
  if (t == 0) {
    // Alone in a child: the low limit is inherited by the daemon and must not outlive
    // this case.
    rlimit r{128, 128};
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) _exit(3);
    int rc = 0;
    {
      Cluster cl(1);
      nicemu::ctl::Connection probe;
      if (!probe.connect(cl.socket(0))) _exit(4);
      auto j = nlohmann::json::parse(probe.status_json().value_or("{}"), nullptr, false);
      if (j.is_discarded() || !j.contains("pid")) _exit(5);
      pid_t daemon = j["pid"].get<pid_t>();
      auto cpu_ticks = [daemon] {
        std::ifstream f("/proc/" + std::to_string(daemon) + "/stat");
        std::string s((std::istreambuf_iterator<char>(f)), {});
        auto rp = s.rfind(')');
        std::istringstream in(s.substr(rp + 2));
        std::string field;
        long ut = 0, st = 0;
        for (int i = 3; i <= 15 && in >> field; ++i) {
          if (i == 14) ut = std::stol(field);
          if (i == 15) st = std::stol(field);
        }
        return ut + st;
      };
      // Connect until one is not answered: the daemon has no descriptor to accept it.
      std::vector<std::unique_ptr<nicemu::ctl::Connection>> open;
      int pending = -1;
      for (int i = 0; i < 120 && pending < 0; ++i) {
        auto c = std::make_unique<nicemu::ctl::Connection>();
        if (!c->connect(cl.socket(0))) _exit(6);
        ctl::Hello h{};
        h.h = ctl::make_header<ctl::Hello>(ctl::Op::kHello, 1);
        if (send(c->fd(), &h, sizeof h, MSG_NOSIGNAL) != long(sizeof h)) _exit(7);
        pollfd pfd{c->fd(), POLLIN, 0};
        if (poll(&pfd, 1, 500) == 0) pending = int(open.size());
        else {
          ctl::HelloReply rep{};
          if (recv(c->fd(), &rep, sizeof rep, 0) != long(sizeof rep)) _exit(8);
        }
        open.push_back(std::move(c));
      }
      if (pending < 0) _exit(9);  // never ran out: the limit did not reach the daemon
      long t0 = cpu_ticks();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      long spent = cpu_ticks() - t0;
      std::fprintf(stderr, "daemon out of descriptors after %d connections; %ld ticks in 1 s\n", pending, spent);
      if (spent > sysconf(_SC_CLK_TCK) / 4) rc = 10;  // a spinning accept loop burns the whole second
      for (int i = 0; i < 8; ++i) open[i].reset();  // free descriptors in the daemon
      pollfd pfd{open[pending]->fd(), POLLIN, 0};
      if (poll(&pfd, 1, 3000) != 1) rc = rc ? rc : 11;
      auto s = probe.status_json();
      auto k = nlohmann::json::parse(s.value_or("{}"), nullptr, false);
      if (k.is_discarded() || k["counters"]["accept_deferred"].get<int>() < 1) rc = rc ? rc : 12;
    }
    _exit(rc);
  }
  int st = 0;
  REQUIRE(waitpid(t, &st, 0) == t);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}
