// fault-scenarios: the scenarios of docs/fault-injection.md, each one command with a seed.
// Starts its own daemon (fault configuration given at start), runs the ranks as child
// processes, prints one `outcome:` line that depends only on the seed and the arguments (so a
// repeated run prints the same line) and an `info:` line with timing-dependent figures, and
// exits 0 if the outcome is what the ordering model promises, 1 otherwise.
//
//   fault-scenarios smsg     --seed N [--count N]           (a) exactly once, in order
//   fault-scenarios rdma     --seed N [--count N]           (b) transient errors, replayed
//   fault-scenarios race     --seed N --ordering M [--count N] [--rdma]  (c) Get passes Put
//   fault-scenarios envelope --seed N --ordering M [--count N] [--rdma]  (d) payload vs envelope
//   fault-scenarios fence    --seed N [--count N] [--no-fence | --fence-first]  RDMA FENCE vs held RDMA PUTs
//   fault-scenarios silent   --seed N [--count N]           PUTs without events are never failed
//   fault-scenarios remote   --seed N [--count N]           a failed PUT that took effect: remote event
//   fault-scenarios kill     --seed N [--count N]           (e) a rank dies mid-run
//   fault-scenarios amo      --seed N [--count N]           AMO effect done or not on error
//   fault-scenarios datagram --seed N [--count N]           directed datagrams end ERROR or TIMEOUT
//   fault-scenarios update   --seed N [--count N]           GNI_MEM_UPDATE_REGION fails NOMEM, never RESOURCE
//   fault-scenarios announce --seed N                       epoch announces obey per-peer rules (two fabric hosts)
#include <fcntl.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "gni_pub.h"
#include "harness.h"
#include "nicemu/abi/counters_layout.h"

namespace {

using harness::Cluster;
using harness::Cred;
using harness::Gni;
namespace ctr = nicemu::abi::counters;

// Out-of-band exchange between the ranks (what PMI is to applications): shared memory set
// up before fork. Waits sleep, they do not spin: the machine is shared.
constexpr int kMaxRanks = 4;
struct RankInfo {
  std::atomic<int> ready;
  std::atomic<int> connected;  // SMSG set up towards every other rank
  uint32_t addr, inst;
  gni_smsg_attr_t smsg[kMaxRanks];  // our mailbox for messages from rank j
  gni_mem_handle_t mh;              // a registered buffer peers may access
  uint64_t va;
};
struct Board {
  RankInfo r[kMaxRanks];
  std::atomic<int> phase;
  std::atomic<int> done[kMaxRanks];
};

Board* board() {
  static Board* b = [] {
    void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap board");
    return new (p) Board{};
  }();
  return b;
}

void nap() { usleep(500); }

void wait_flag(const std::atomic<int>& f, int v = 1) {
  for (int i = 0; f.load() < v; ++i) {
    if (i > 60000) {
      std::fprintf(stderr, "fault-scenarios: timed out waiting for a peer\n");
      _exit(3);
    }
    nap();
  }
}

#define CHECK_OR_EXIT(cond)                                                                 \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "fault-scenarios:%d: check failed: %s\n", __LINE__, #cond);    \
      _exit(1);                                                                             \
    }                                                                                       \
  } while (0)

// One rank: attached CDM, CQs, mailboxes for every peer, EPs bound to every peer, and a
// registered buffer (`buf`) with the PI ordering flags the scenario asks for.
struct Rank {
  int me = 0, n = 0;
  Gni g;
  std::vector<char> mbox;
  std::vector<gni_ep_handle_t> ep;
  std::vector<uint64_t> buf;
  gni_mem_handle_t buf_mh{};
  gni_smsg_attr_t local[kMaxRanks]{};

  void open(int rank, int ranks, Cred c, uint32_t buf_flags, size_t buf_words = 4096, uint16_t credits = 64) {
    me = rank;
    n = ranks;
    CHECK_OR_EXIT(g.open(uint32_t(100 + rank), c) == GNI_RC_SUCCESS);
    // Bigger CQs than the harness's: SMSG floods produce one event per message.
    CHECK_OR_EXIT(GNI_CqCreate(g.nic, 16384, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &g.cq) == GNI_RC_SUCCESS);
    CHECK_OR_EXIT(GNI_CqCreate(g.nic, 16384, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &g.rcq) == GNI_RC_SUCCESS);
    gni_smsg_attr_t a{};
    a.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    a.mbox_maxcredit = credits;
    a.msg_maxsize = 64;
    unsigned size = 0;
    CHECK_OR_EXIT(GNI_SmsgBufferSizeNeeded(&a, &size) == GNI_RC_SUCCESS);
    mbox.assign(size_t(size) * kMaxRanks, 0);
    gni_mem_handle_t mh{};
    CHECK_OR_EXIT(GNI_MemRegister(g.nic, uint64_t(mbox.data()), mbox.size(), g.rcq, GNI_MEM_READWRITE, uint32_t(-1),
                                  &mh) == GNI_RC_SUCCESS);
    buf.assign(buf_words, 0);
    CHECK_OR_EXIT(GNI_MemRegister(g.nic, uint64_t(buf.data()), buf.size() * 8, g.rcq, GNI_MEM_READWRITE | buf_flags,
                                  uint32_t(-1), &buf_mh) == GNI_RC_SUCCESS);
    RankInfo& ri = board()->r[rank];
    for (int j = 0; j < ranks; ++j) {
      local[j] = a;
      local[j].msg_buffer = mbox.data();
      local[j].buff_size = unsigned(mbox.size());
      local[j].mbox_offset = size * unsigned(j);
      local[j].mem_hndl = mh;
      ri.smsg[j] = local[j];
    }
    ri.addr = g.addr;
    ri.inst = g.inst;
    ri.mh = buf_mh;
    ri.va = uint64_t(buf.data());
    ri.ready.store(1);
    ep.assign(size_t(ranks), nullptr);
    for (int j = 0; j < ranks; ++j) {
      if (j == rank) continue;
      wait_flag(board()->r[j].ready);
      RankInfo& pj = board()->r[j];
      CHECK_OR_EXIT(GNI_EpCreate(g.nic, g.cq, &ep[size_t(j)]) == GNI_RC_SUCCESS);
      CHECK_OR_EXIT(GNI_EpBind(ep[size_t(j)], pj.addr, pj.inst) == GNI_RC_SUCCESS);
      CHECK_OR_EXIT(GNI_EpSetEventData(ep[size_t(j)], uint32_t(rank), uint32_t(rank)) == GNI_RC_SUCCESS);
      gni_smsg_attr_t remote = pj.smsg[rank];
      CHECK_OR_EXIT(GNI_SmsgInit(ep[size_t(j)], &local[j], &remote) == GNI_RC_SUCCESS);
    }
    // Nobody starts (and maybe finishes and exits) before every rank has connected: a rank
    // that is gone by then makes a late peer's GNI_SmsgInit fail.
    ri.connected.store(1);
    for (int j = 0; j < ranks; ++j) wait_flag(board()->r[j].connected);
  }

  // Sends one message, taking local events as they come; retries while out of credits.
  void send(int to, const void* msg, uint32_t len, uint8_t tag = 1) {
    for (;;) {
      gni_return_t rc = GNI_SmsgSendWTag(ep[size_t(to)], const_cast<void*>(msg), len, nullptr, 0, 0, tag);
      drain_local();
      if (rc == GNI_RC_SUCCESS) return;
      CHECK_OR_EXIT(rc == GNI_RC_NOT_DONE);
      gni_cq_entry_t e;
      rc = GNI_CqWaitEvent(g.cq, 1, &e);
      if (rc == GNI_RC_SUCCESS || rc == GNI_RC_TRANSACTION_ERROR) count_local(e);
    }
  }
  uint64_t smsg_errors = 0, posts_done = 0;
  void count_local(gni_cq_entry_t e) {
    if (GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_SMSG && !GNI_CQ_STATUS_OK(e)) ++smsg_errors;
    if (GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST) {
      gni_post_descriptor_t* out = nullptr;
      GNI_GetCompleted(g.cq, e, &out);
      ++posts_done;
    }
  }
  // Waits until `n` posts have completed (their events may have been taken by drain_local).
  void wait_posts(uint64_t n) {
    while (posts_done < n) {
      gni_cq_entry_t e;
      CHECK_OR_EXIT(GNI_CqWaitEvent(g.cq, 10000, &e) == GNI_RC_SUCCESS);
      count_local(e);
    }
  }
  // Error entries come back as GNI_RC_TRANSACTION_ERROR: they are taken and counted too.
  void drain_local() {
    gni_cq_entry_t e;
    for (gni_return_t rc; (rc = GNI_CqGetEvent(g.cq, &e)) == GNI_RC_SUCCESS || rc == GNI_RC_TRANSACTION_ERROR;)
      count_local(e);
  }
  // The next message from `from` (copied out and released); waits on the remote-event CQ.
  bool recv(int from, void* out, uint32_t len, int timeout_ms = 30000) {
    for (int waited = 0;;) {
      void* hdr = nullptr;
      gni_return_t rc = GNI_SmsgGetNext(ep[size_t(from)], &hdr);
      if (rc == GNI_RC_SUCCESS) {
        std::memcpy(out, hdr, len);
        CHECK_OR_EXIT(GNI_SmsgRelease(ep[size_t(from)]) == GNI_RC_SUCCESS);
        gni_cq_entry_t e;
        GNI_CqGetEvent(g.rcq, &e);  // its remote event, so the CQ never overruns
        return true;
      }
      if (rc != GNI_RC_NOT_DONE) return false;
      gni_cq_entry_t e;
      rc = GNI_CqWaitEvent(g.rcq, 10, &e);
      if (rc == GNI_RC_TIMEOUT && (waited += 10) > timeout_ms) return false;
    }
  }
};

uint64_t* shared_u64(size_t n) {
  void* p = mmap(nullptr, n * 8, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap");
  return static_cast<uint64_t*>(p);
}

// The node's totals of one per-CDM counter, from its counter page (what nicemuctl stats shows).
struct Page {
  const char* base = nullptr;
  explicit Page(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void* p = mmap(nullptr, ctr::kPageSize, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p != MAP_FAILED) base = static_cast<const char*>(p);
  }
  uint64_t total(uint32_t c) const {
    if (!base) return 0;
    auto* h = reinterpret_cast<const ctr::PageHeader*>(base);
    return reinterpret_cast<const std::atomic<uint64_t>*>(base + h->totals_offset)[c].load();
  }
  uint64_t node(uint32_t c) const {
    if (!base) return 0;
    auto* h = reinterpret_cast<const ctr::PageHeader*>(base);
    return reinterpret_cast<const std::atomic<uint64_t>*>(base + h->node_offset)[c].load();
  }
};

std::string fault_counters(const Page& p) {
  namespace c = ctr::cdm;
  char b[512];
  std::snprintf(b, sizeof b,
                "smsg_drops=%" PRIu64 " smsg_retransmits=%" PRIu64 " smsg_dups=%" PRIu64
                " smsg_dups_suppressed=%" PRIu64
                " smsg_exhausted=%" PRIu64 " errors=%" PRIu64 " errors_effect_done=%" PRIu64 " delays=%" PRIu64,
                p.total(c::fault_smsg_drops), p.total(c::fault_smsg_retransmits), p.total(c::fault_smsg_dups),
                p.total(c::fault_smsg_dups_suppressed), p.total(c::fault_smsg_exhausted), p.total(c::fault_errors),
                p.total(c::fault_errors_effect_done), p.total(c::fault_delays));
  return b;
}

struct Opts {
  uint64_t seed = 1;
  uint64_t count = 0;
  std::string ordering = "relaxed";
  std::string extra;  // more fault-spec tokens (smsg scenario)
  bool no_fence = false;  // fence: the second PUT without GNI_RDMAMODE_FENCE
  bool fence_first = false;  // fence: GNI_RDMAMODE_FENCE on the first PUT instead of the second
  bool rdma = false;  // race, envelope: the payload PUT by GNI_PostRdma (BTE), not GNI_PostFma
};

std::vector<std::string> daemon_args(const std::string& spec) {
  return {"--fault", spec, "--stats-interval-ms", "10"};
}

// Waits for every child; false if one failed or hung.
bool wait_all(Cluster& cl, const std::vector<pid_t>& kids, int timeout_s = 120) {
  bool ok = true;
  for (pid_t p : kids) {
    int rc = cl.wait(p, timeout_s);
    if (rc != 0) {
      std::fprintf(stderr, "fault-scenarios: rank pid %d exited with %d%s\n", int(p), rc, rc == 255 ? " (hung)" : "");
      ok = false;
    }
  }
  return ok;
}

// (a) Every message arrives exactly once and in order under drops, duplicates and reordering.
int scenario_smsg(const Opts& o) {
  const uint64_t n = o.count ? o.count : 100000;
  std::string spec = "seed=" + std::to_string(o.seed) +
                     " smsg.drop=0.1 smsg.dup=0.05 reorder=0.2 delay_us=10..100 retransmit_us=50 window=4096 " +
                     o.extra;
  // Exhaustion (injected, or a link down for longer than the retransmissions last) loses
  // messages: the sender sees each as an error event, the receiver the rest in order.
  const bool lossy = o.extra.find("exhaust") != std::string::npos || o.extra.find("link_down") != std::string::npos;
  Cluster cl(1, daemon_args(spec));
  Cred c = cl.credential();
  // delivered, out of order, extra, lost (sender's error events), sender's GNI_GetNicStat retransmissions
  uint64_t* res = shared_u64(5);
  pid_t tx = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 2, c, 0);
    for (uint64_t i = 0; i < n; ++i) r.send(1, &i, sizeof i);
    wait_flag(board()->done[1]);
    r.drain_local();
    res[3] = r.smsg_errors;
    uint32_t retrans = 0;
    CHECK_OR_EXIT(GNI_GetNicStat(r.g.nic, GNI_STAT_SMSG_RETRANS_COUNT, &retrans) == GNI_RC_SUCCESS);
    res[4] = retrans;
    return lossy || r.smsg_errors == 0 ? 0 : 1;
  });
  pid_t rx = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 2, c, 0);
    uint64_t got = 0, bad = 0, v = 0, next = 0;
    while (got < n) {
      if (!r.recv(0, &v, sizeof v, lossy ? 2000 : 30000)) break;
      ++got;
      if (lossy ? v < next : v != next) ++bad;  // lost messages leave gaps, never disorder
      next = v + 1;
    }
    // Nothing more may come: a duplicate would show up here.
    uint64_t extra = 0;
    if (got == n && r.recv(0, &v, sizeof v, 300)) ++extra;
    res[0] = got;
    res[1] = bad;
    res[2] = extra;
    board()->done[1].store(1);
    return 0;
  });
  bool ok = wait_all(cl, {tx, rx}, 600);
  Page page(nicemu::ctl::stats_path(cl.socket(0)));
  usleep(50000);
  std::printf("outcome: smsg seed=%" PRIu64 " messages=%" PRIu64 " delivered=%" PRIu64 " lost=%" PRIu64
              " out_of_order=%" PRIu64 " duplicates_delivered=%" PRIu64 " %s link_down=%" PRIu64 "\n",
              o.seed, n, res[0], res[3], res[1], res[2], fault_counters(page).c_str(),
              page.total(ctr::cdm::fault_link_down));
  // Timing decides how many later messages overtook a held one (written out of order into
  // the mailbox, put back in order by the receiver's sequence check).
  std::printf("info: reorder_held=%" PRIu64 " reorder_passed=%" PRIu64 "\n", page.total(ctr::cdm::reorder_held),
              page.total(ctr::cdm::reorder_passed));
  ok = ok && res[0] + res[3] == n && res[1] == 0 && res[2] == 0 &&
       (lossy || page.total(ctr::cdm::fault_smsg_drops) > 0) &&
       page.total(ctr::cdm::fault_smsg_dups) == page.total(ctr::cdm::fault_smsg_dups_suppressed) &&
       page.total(ctr::cdm::fault_smsg_exhausted) == res[3] &&
       page.total(ctr::cdm::fault_smsg_retransmits) == res[4];
  if (page.total(ctr::cdm::fault_smsg_retransmits) != res[4])
    std::fprintf(stderr, "GNI_STAT_SMSG_RETRANS_COUNT %" PRIu64 " != fault_smsg_retransmits %" PRIu64 "\n", res[4],
                 page.total(ctr::cdm::fault_smsg_retransmits));
  return ok ? 0 : 1;
}

// Posts `d` until it succeeds; every failure must be a recoverable CQE error. Returns the
// number of failures seen.
uint64_t post_until_ok(Rank& r, gni_ep_handle_t ep, gni_post_descriptor_t& d, bool rdma, uint64_t& unrecoverable) {
  uint64_t failures = 0;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    gni_return_t rc = rdma ? GNI_PostRdma(ep, &d) : GNI_PostFma(ep, &d);
    CHECK_OR_EXIT(rc == GNI_RC_SUCCESS);
    gni_cq_entry_t e = 0;
    rc = GNI_CqWaitEvent(r.g.cq, 10000, &e);
    CHECK_OR_EXIT(rc == GNI_RC_SUCCESS || rc == GNI_RC_TRANSACTION_ERROR);
    gni_post_descriptor_t* out = nullptr;
    gni_return_t gc = GNI_GetCompleted(r.g.cq, e, &out);
    CHECK_OR_EXIT(out == &d);
    if (GNI_CQ_STATUS_OK(e) && gc == GNI_RC_SUCCESS) return failures;
    // A failed transaction: the spec's recovery rule is to repost if recoverable.
    CHECK_OR_EXIT(gc == GNI_RC_TRANSACTION_ERROR);
    uint32_t rec = 0;
    CHECK_OR_EXIT(GNI_CqErrorRecoverable(e, &rec) == GNI_RC_SUCCESS);
    if (!rec) ++unrecoverable;
    ++failures;
  }
  ++unrecoverable;
  return failures;
}

// (b) PUT and GET (FMA and RDMA) under injected transient errors: all reported recoverable,
// and a replay loop completes every transfer with verified data.
int scenario_rdma(const Opts& o) {
  const uint64_t n = o.count ? o.count : 2000;
  std::string spec = "seed=" + std::to_string(o.seed) + " put.error=0.1 get.error=0.1 rdma.error=0.1 error_done=0.5";
  Cluster cl(1, daemon_args(spec));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(4);  // failures, unrecoverable, mismatches
  pid_t tgt = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 2, c, 0, 8192);
    wait_flag(board()->done[0]);
    // The target's own view of its memory: every word holds what was last written.
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; ++i)
      if (r.buf[i % 4096] != 0 && (r.buf[i % 4096] >> 32) != 0xABCD) ++bad;
    res[3] = bad;
    return 0;
  });
  pid_t ini = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 2, c, 0, 8192);
    wait_flag(board()->r[1].ready);
    RankInfo& t = board()->r[1];
    uint64_t failures = 0, unrec = 0, mism = 0;
    std::vector<uint64_t>& lb = r.buf;
    for (uint64_t i = 0; i < n; ++i) {
      const bool rdma = i % 2;
      const uint64_t slot = (i * 7) % 4096;
      const uint64_t val = (uint64_t{0xABCD} << 32) | i;
      lb[4096] = val;
      auto put = harness::make_desc(rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, uint64_t(&lb[4096]), r.buf_mh,
                                    t.va + slot * 8, t.mh, 8);
      failures += post_until_ok(r, r.ep[1], put, rdma, unrec);
      lb[4097] = 0;
      auto get = harness::make_desc(rdma ? GNI_POST_RDMA_GET : GNI_POST_FMA_GET, uint64_t(&lb[4097]), r.buf_mh,
                                    t.va + slot * 8, t.mh, 8);
      failures += post_until_ok(r, r.ep[1], get, rdma, unrec);
      if (lb[4097] != val) ++mism;
    }
    res[0] = failures;
    res[1] = unrec;
    res[2] = mism;
    board()->done[0].store(1);
    return 0;
  });
  bool ok = wait_all(cl, {ini, tgt});
  Page page(nicemu::ctl::stats_path(cl.socket(0)));
  usleep(50000);
  std::printf("outcome: rdma seed=%" PRIu64 " transfers=%" PRIu64 " failures=%" PRIu64 " unrecoverable=%" PRIu64
              " verified=%s %s\n",
              o.seed, 2 * n, res[0], res[1], res[2] == 0 && res[3] == 0 ? "yes" : "no", fault_counters(page).c_str());
  ok = ok && res[0] > 0 && res[1] == 0 && res[2] == 0 && res[3] == 0 && page.total(ctr::cdm::fault_errors) == res[0];
  return ok ? 0 : 1;
}

// Posts without local events under put.error=1: a silent PUT has no CQE to carry an error,
// so it is never failed (gni_pub.h: errors kill or are reported through the CQ); each is
// read back by a GET. The same PUT with a GLOBAL event gets its (recoverable) error.
int scenario_silent(const Opts& o) {
  const uint64_t n = o.count ? o.count : 200;
  Cluster cl(1, daemon_args("seed=" + std::to_string(o.seed) + " put.error=1 rdma_put.error=1 error_done=0"));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(4);  // lost silent puts, evented puts that failed, recoverable ones
  pid_t tgt = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 2, c, 0);
    wait_flag(board()->done[0]);
    return 0;
  });
  pid_t ini = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 2, c, 0);
    wait_flag(board()->r[1].ready);
    RankInfo& t = board()->r[1];
    for (uint64_t k = 1; k <= n; ++k) {
      const bool rdma = k % 2;
      r.buf[2] = k;
      auto put = harness::make_desc(rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, uint64_t(&r.buf[2]), r.buf_mh, t.va,
                                    t.mh, 8, GNI_CQMODE_SILENT);
      CHECK_OR_EXIT((rdma ? GNI_PostRdma(r.ep[1], &put) : GNI_PostFma(r.ep[1], &put)) == GNI_RC_SUCCESS);
      r.buf[3] = 0;
      auto get = harness::make_desc(GNI_POST_FMA_GET, uint64_t(&r.buf[3]), r.buf_mh, t.va, t.mh, 8);
      CHECK_OR_EXIT(harness::post_and_wait(r.g.cq, r.ep[1], get) == 0);
      if (r.buf[3] != k) ++res[0];
    }
    for (bool rdma : {false, true}) {
      auto put = harness::make_desc(rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, uint64_t(&r.buf[2]), r.buf_mh, t.va,
                                    t.mh, 8);
      CHECK_OR_EXIT(rdma ? GNI_PostRdma(r.ep[1], &put) == GNI_RC_SUCCESS : GNI_PostFma(r.ep[1], &put) == GNI_RC_SUCCESS);
      gni_cq_entry_t e = 0;
      const gni_return_t rc = GNI_CqWaitEvent(r.g.cq, 10000, &e);
      if (rc == GNI_RC_TRANSACTION_ERROR) {
        ++res[1];
        uint32_t rec = 0;
        if (GNI_CqErrorRecoverable(e, &rec) == GNI_RC_SUCCESS && rec) ++res[2];
      }
      gni_post_descriptor_t* done = nullptr;
      GNI_GetCompleted(r.g.cq, e, &done);
    }
    board()->done[0].store(1);
    return 0;
  });
  bool ok = wait_all(cl, {ini, tgt});
  std::printf("outcome: silent seed=%" PRIu64 " silent_puts=%" PRIu64 " lost=%" PRIu64 " evented_failed=%" PRIu64
              "/2 recoverable=%" PRIu64 "\n",
              o.seed, n, res[0], res[1], res[2]);
  return ok && res[0] == 0 && res[1] == 2 && res[2] == 2 ? 0 : 1;
}

// PUTs with a remote event under put.error=1 error_done=1: every PUT fails at the initiator
// (recoverable), yet took effect, so the target gets its data and its remote event, as from
// a request that reached it before the response was lost.
int scenario_remote(const Opts& o) {
  const uint64_t n = o.count ? o.count : 100;
  Cluster cl(1, daemon_args("seed=" + std::to_string(o.seed) + " put.error=1 rdma_put.error=1 error_done=1"));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(4);  // recoverable failures, remote events at the target, final word
  pid_t tgt = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 2, c, 0);
    wait_flag(board()->done[0]);
    gni_cq_entry_t e = 0;
    while (GNI_CqGetEvent(r.g.rcq, &e) == GNI_RC_SUCCESS)
      if (GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST) ++res[1];
    res[2] = r.buf[0];
    return 0;
  });
  pid_t ini = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 2, c, 0);
    wait_flag(board()->r[1].ready);
    RankInfo& t = board()->r[1];
    for (uint64_t k = 1; k <= n; ++k) {
      const bool rdma = k % 2;
      r.buf[2] = k;
      auto put = harness::make_desc(rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, uint64_t(&r.buf[2]), r.buf_mh, t.va,
                                    t.mh, 8, GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT);
      CHECK_OR_EXIT((rdma ? GNI_PostRdma(r.ep[1], &put) : GNI_PostFma(r.ep[1], &put)) == GNI_RC_SUCCESS);
      gni_cq_entry_t e = 0;
      const gni_return_t rc = GNI_CqWaitEvent(r.g.cq, 10000, &e);
      uint32_t rec = 0;
      if (rc == GNI_RC_TRANSACTION_ERROR && GNI_CqErrorRecoverable(e, &rec) == GNI_RC_SUCCESS && rec) ++res[0];
      gni_post_descriptor_t* done = nullptr;
      GNI_GetCompleted(r.g.cq, e, &done);
    }
    board()->done[0].store(1);
    return 0;
  });
  bool ok = wait_all(cl, {ini, tgt});
  std::printf("outcome: remote seed=%" PRIu64 " puts=%" PRIu64 " failed_recoverable=%" PRIu64
              " remote_events=%" PRIu64 " final=%" PRIu64 "\n",
              o.seed, n, res[0], res[1], res[2]);
  return ok && res[0] == n && res[1] == n && res[2] == n ? 0 : 1;
}

// AMOs under injected transient errors, replayed: an AMO whose response was lost took
// effect anyway (error_done), so replaying a non-idempotent FADD counts it twice — exactly
// what a runtime's recovery code has to expect on hardware.
int scenario_amo(const Opts& o) {
  const uint64_t n = o.count ? o.count : 2000;
  std::string spec = "seed=" + std::to_string(o.seed) + " amo.error=0.2 error_done=0.5";
  Cluster cl(1, daemon_args(spec));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(4);  // failures, unrecoverable, final value
  pid_t tgt = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 2, c, 0);
    wait_flag(board()->done[0]);
    res[2] = r.buf[0];
    return 0;
  });
  pid_t ini = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 2, c, 0);
    wait_flag(board()->r[1].ready);
    RankInfo& t = board()->r[1];
    uint64_t failures = 0, unrec = 0;
    for (uint64_t i = 0; i < n; ++i) {
      auto d = harness::make_desc(GNI_POST_AMO, uint64_t(&r.buf[8]), r.buf_mh, t.va, t.mh, 8);
      d.amo_cmd = GNI_FMA_ATOMIC_FADD;
      d.first_operand = 1;
      failures += post_until_ok(r, r.ep[1], d, false, unrec);
    }
    res[0] = failures;
    res[1] = unrec;
    board()->done[0].store(1);
    return 0;
  });
  bool ok = wait_all(cl, {ini, tgt});
  Page page(nicemu::ctl::stats_path(cl.socket(0)));
  usleep(50000);
  const uint64_t done = page.total(ctr::cdm::fault_errors_effect_done);
  std::printf("outcome: amo seed=%" PRIu64 " fadds=%" PRIu64 " failures=%" PRIu64 " unrecoverable=%" PRIu64
              " final=%" PRIu64 " effect_done=%" PRIu64 "\n",
              o.seed, n, res[0], res[1], res[2], done);
  // Every FADD counted once, plus once more for each failure whose effect was done.
  ok = ok && res[1] == 0 && res[0] > 0 && res[2] == n + done && done > 0 && done < res[0];
  return ok ? 0 : 1;
}

// Half of the payload PUTs (FMA, or RDMA with --rdma) held 20-40 ms: far above scheduling
// noise on an idle host, so which message passes which repeats with the seed.
constexpr uint64_t kHoldMinUs = 20000;
std::string payload_delay_spec(const Opts& o) {
  return "seed=" + std::to_string(o.seed) + (o.rdma ? " rdma.delay=0.5" : " put.delay=0.5") + " delay_us=" +
         std::to_string(kHoldMinUs) + "..40000";
}

// A trial whose round (the payload posted to the reply to its notification) took longer
// than the shortest hold: a held payload may have landed first only because a rank waited
// for a CPU, so its outcome depends on the host's load, not on the seed. Counted, and
// printed on a line of its own, so that test_fault.sh can tell a load-made difference.
// steady_clock is CLOCK_MONOTONIC, one clock for every process of the host.
uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}
bool slow_since(uint64_t t0_ns) { return now_ns() - t0_ns >= kHoldMinUs * 1000; }

void print_slow(uint64_t slow, uint64_t n) {
  std::printf("timing: slow=%" PRIu64 " of %" PRIu64 " trials took longer than the %" PRIu64
              " ms hold (their outcome may follow scheduling, not the seed)\n",
              slow, n, kHoldMinUs / 1000);
}

uint32_t ordering_flags(const std::string& m) {
  if (m == "strict") return GNI_MEM_STRICT_PI_ORDERING;
  if (m == "relaxed") return GNI_MEM_RELAXED_PI_ORDERING;
  return 0;  // default
}

// (c) Rank 0 PUTs k into rank 2's memory, then tells rank 1 by SMSG; rank 1 GETs the word.
// Relaxed: a delayed PUT is passed by the notification, the GET returns the old value.
int scenario_race(const Opts& o) {
  const uint64_t n = o.count ? o.count : 200;
  Cluster cl(1, daemon_args(payload_delay_spec(o)));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(4);  // stale, fresh, slow trials
  const uint32_t flags = ordering_flags(o.ordering);
  pid_t tgt = cl.spawn(0, [&] {
    Rank r;
    r.open(2, 3, c, flags);
    wait_flag(board()->done[0]);
    return 0;
  });
  pid_t putter = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 3, c, flags);
    wait_flag(board()->r[2].ready);
    RankInfo& t = board()->r[2];
    for (uint64_t k = 1; k <= n; ++k) {
      r.buf[0] = k;
      auto put = harness::make_desc(o.rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, uint64_t(&r.buf[0]), r.buf_mh,
                                    t.va, t.mh, 8);
      const uint64_t t0 = now_ns();
      CHECK_OR_EXIT((o.rdma ? GNI_PostRdma(r.ep[2], &put) : GNI_PostFma(r.ep[2], &put)) == GNI_RC_SUCCESS);
      r.send(1, &k, sizeof k);  // the notification
      uint64_t seen = 0;
      CHECK_OR_EXIT(r.recv(1, &seen, sizeof seen));
      (seen == k ? res[1] : res[0])++;
      if (slow_since(t0)) res[2]++;  // the GET ran before the reply, so within this round
      r.wait_posts(k);  // the PUT's global completion before the next trial
    }
    board()->done[0].store(1);
    return 0;
  });
  pid_t getter = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 3, c, 0);
    wait_flag(board()->r[2].ready);
    RankInfo& t = board()->r[2];
    for (uint64_t k = 1; k <= n; ++k) {
      uint64_t note = 0;
      CHECK_OR_EXIT(r.recv(0, &note, sizeof note));
      r.buf[1] = 0;
      auto get = harness::make_desc(GNI_POST_FMA_GET, uint64_t(&r.buf[1]), r.buf_mh, t.va, t.mh, 8);
      CHECK_OR_EXIT(harness::post_and_wait(r.g.cq, r.ep[2], get) == 0);
      uint64_t seen = r.buf[1];
      r.send(0, &seen, sizeof seen);
    }
    wait_flag(board()->done[0]);
    return 0;
  });
  bool ok = wait_all(cl, {putter, getter, tgt});
  std::printf("outcome: race seed=%" PRIu64 " ordering=%s payload=%s trials=%" PRIu64 " stale=%" PRIu64
              " fresh=%" PRIu64 "\n",
              o.seed, o.ordering.c_str(), o.rdma ? "rdma" : "fma", n, res[0], res[1]);
  print_slow(res[2], n);
  // Relaxed must show the race; strict and default never.
  ok = ok && res[0] + res[1] == n && (o.ordering == "relaxed" ? res[0] > 0 : res[0] == 0);
  return ok ? 0 : 1;
}

// (d) Rank 0 PUTs a payload into rank 1's buffer, then sends the envelope by SMSG; rank 1
// notes whether the payload was there when the envelope arrived, then waits for it
// (target-side reassembly).
int scenario_envelope(const Opts& o) {
  const uint64_t n = o.count ? o.count : 200;
  Cluster cl(1, daemon_args(payload_delay_spec(o)));
  Cred c = cl.credential();
  // payload first, envelope first, reassembly failures, slow trials, the current post's time
  uint64_t* res = shared_u64(5);
  const uint32_t flags = ordering_flags(o.ordering);
  pid_t tx = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 2, c, flags);
    wait_flag(board()->r[1].ready);
    RankInfo& t = board()->r[1];
    for (uint64_t k = 1; k <= n; ++k) {
      const uint64_t slot = k % 512;
      r.buf[0] = k;
      auto put = harness::make_desc(o.rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, uint64_t(&r.buf[0]), r.buf_mh,
                                    t.va + slot * 8, t.mh, 8, GNI_CQMODE_GLOBAL_EVENT);
      __atomic_store_n(&res[4], now_ns(), __ATOMIC_RELEASE);
      CHECK_OR_EXIT((o.rdma ? GNI_PostRdma(r.ep[1], &put) : GNI_PostFma(r.ep[1], &put)) == GNI_RC_SUCCESS);
      r.send(1, &k, sizeof k);
      uint64_t ack = 0;
      CHECK_OR_EXIT(r.recv(1, &ack, sizeof ack) && ack == k);
      r.wait_posts(k);
    }
    return 0;
  });
  pid_t rx = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 2, c, flags);
    volatile uint64_t* b = r.buf.data();
    for (uint64_t k = 1; k <= n; ++k) {
      uint64_t env = 0;
      CHECK_OR_EXIT(r.recv(0, &env, sizeof env) && env == k);
      const uint64_t slot = k % 512;
      // Timed at the look, not at the ack, which may include the wait for the payload.
      if (slow_since(__atomic_load_n(&res[4], __ATOMIC_ACQUIRE))) res[3]++;
      if (b[slot] == k) {
        res[0]++;
      } else {
        res[1]++;
        // Reassembly: the payload is on its way; wait for it (bounded).
        int waited = 0;
        while (b[slot] != k && waited < 20000) usleep(100), ++waited;
        if (b[slot] != k) res[2]++;
      }
      r.send(0, &k, sizeof k);
    }
    return 0;
  });
  bool ok = wait_all(cl, {tx, rx});
  std::printf("outcome: envelope seed=%" PRIu64 " ordering=%s payload=%s messages=%" PRIu64
              " payload_first=%" PRIu64 " envelope_first=%" PRIu64 " reassembly_failures=%" PRIu64 "\n",
              o.seed, o.ordering.c_str(), o.rdma ? "rdma" : "fma", n, res[0], res[1], res[2]);
  print_slow(res[3], n);
  ok = ok && res[0] + res[1] == n && res[2] == 0 &&
       (o.ordering == "relaxed" ? res[0] > 0 && res[1] > 0 : res[1] == 0);
  return ok ? 0 : 1;
}

// RDMA FENCE under reordering: rank 0 PUTs an old then a new value into the same word of
// rank 1 (relaxed memory, half of the RDMA posts delayed), the second with
// GNI_RDMAMODE_FENCE, waits for both and reads the word back. Fenced: the new value always
// wins. --no-fence: a delayed first PUT may land last (the old value wins). --fence-first:
// the fence on the first PUT, which gni_pub.h has the next descriptor wait for: the new
// value always wins too.
int scenario_fence(const Opts& o) {
  const uint64_t n = o.count ? o.count : 100;
  Cluster cl(1, daemon_args("seed=" + std::to_string(o.seed) + " rdma.delay=0.5 delay_us=2000..4000"));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(4);  // new value won, old value won, other
  const uint32_t flags = GNI_MEM_RELAXED_PI_ORDERING;
  pid_t tgt = cl.spawn(0, [&] {
    Rank r;
    r.open(1, 2, c, flags);
    wait_flag(board()->done[0]);
    return 0;
  });
  pid_t ini = cl.spawn(0, [&] {
    Rank r;
    r.open(0, 2, c, flags);
    wait_flag(board()->r[1].ready);
    RankInfo& t = board()->r[1];
    for (uint64_t k = 1; k <= n; ++k) {
      r.buf[2] = 2 * k;      // old
      r.buf[3] = 2 * k + 1;  // new
      auto a = harness::make_desc(GNI_POST_RDMA_PUT, uint64_t(&r.buf[2]), r.buf_mh, t.va, t.mh, 8);
      auto b = harness::make_desc(GNI_POST_RDMA_PUT, uint64_t(&r.buf[3]), r.buf_mh, t.va, t.mh, 8);
      if (o.fence_first)
        a.rdma_mode = GNI_RDMAMODE_FENCE;
      else if (!o.no_fence)
        b.rdma_mode = GNI_RDMAMODE_FENCE;
      CHECK_OR_EXIT(GNI_PostRdma(r.ep[1], &a) == GNI_RC_SUCCESS);
      CHECK_OR_EXIT(GNI_PostRdma(r.ep[1], &b) == GNI_RC_SUCCESS);
      r.wait_posts(2 * k);
      r.buf[4] = 0;
      auto get = harness::make_desc(GNI_POST_FMA_GET, uint64_t(&r.buf[4]), r.buf_mh, t.va, t.mh, 8);
      CHECK_OR_EXIT(harness::post_and_wait(r.g.cq, r.ep[1], get) == 0);
      res[r.buf[4] == 2 * k + 1 ? 0 : r.buf[4] == 2 * k ? 1 : 2]++;
    }
    board()->done[0].store(1);
    return 0;
  });
  bool ok = wait_all(cl, {ini, tgt});
  std::printf("outcome: fence seed=%" PRIu64 " fenced=%s trials=%" PRIu64 " new_won=%" PRIu64 " old_won=%" PRIu64
              " other=%" PRIu64 "\n",
              o.seed, o.no_fence ? "no" : o.fence_first ? "first" : "yes", n, res[0], res[1], res[2]);
  ok = ok && res[2] == 0 && res[0] + res[1] == n && (o.no_fence ? res[1] > 0 : res[1] == 0);
  return ok ? 0 : 1;
}

// (e) Rank 2 is killed while ranks 0 and 1 have operations posted to it and to each other
// (with reordering holding some of them): every posted operation completes or fails.
int scenario_kill(const Opts& o) {
  const uint64_t n = o.count ? o.count : 3000;
  std::string spec = "seed=" + std::to_string(o.seed) + " reorder=0.3 delay_us=500..3000 put.error=0.02";
  Cluster cl(1, daemon_args(spec));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(8);  // per survivor: posted, completed ok, completed with error
  auto survivor = [&](int me) {
    Rank r;
    r.open(me, 3, c, GNI_MEM_RELAXED_PI_ORDERING);
    for (int j = 0; j < 3; ++j) wait_flag(board()->r[j].ready);
    board()->done[me].store(1);
    wait_flag(board()->phase);  // all connected
    std::vector<gni_post_descriptor_t> d(n);
    uint64_t posted = 0, okc = 0, errc = 0, smsg_posted = 0;
    auto take = [&](int timeout_ms) {
      gni_cq_entry_t e;
      gni_return_t rc = GNI_CqWaitEvent(r.g.cq, uint64_t(timeout_ms), &e);
      if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) return false;
      if (GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST) {
        gni_post_descriptor_t* out = nullptr;
        GNI_GetCompleted(r.g.cq, e, &out);
      }
      (GNI_CQ_STATUS_OK(e) ? okc : errc)++;
      return true;
    };
    for (uint64_t i = 0; i < n; ++i) {
      const int to = (i % 3 == 0) ? 1 - me : 2;  // two thirds to the victim
      RankInfo& t = board()->r[to];
      if (i % 5 == 4) {
        uint64_t v = i;
        gni_return_t rc = GNI_SmsgSendWTag(r.ep[size_t(to)], &v, 8, nullptr, 0, uint32_t(i), 1);
        if (rc == GNI_RC_SUCCESS) ++smsg_posted, ++posted;
      } else {
        d[i] = harness::make_desc(GNI_POST_FMA_PUT, uint64_t(&r.buf[0]), r.buf_mh, t.va + (i % 64) * 8, t.mh, 8);
        CHECK_OR_EXIT(GNI_PostFma(r.ep[size_t(to)], &d[i]) == GNI_RC_SUCCESS);
        ++posted;
      }
      while (posted - okc - errc > 32 && take(1)) {
      }
      // Release the peer's messages so its credits return.
      void* h;
      while (GNI_SmsgGetNext(r.ep[size_t(1 - me)], &h) == GNI_RC_SUCCESS) GNI_SmsgRelease(r.ep[size_t(1 - me)]);
      if (i == n / 3) board()->done[me].store(2);  // the parent may kill the victim now
    }
    // Every posted operation must complete or fail within a bounded time.
    for (int idle = 0; okc + errc < posted && idle < 10000; ++idle)
      if (take(1)) idle = 0;
    res[me * 3 + 0] = posted;
    res[me * 3 + 1] = okc;
    res[me * 3 + 2] = errc;
    return okc + errc == posted ? 0 : 1;
  };
  pid_t s0 = cl.spawn(0, [&] { return survivor(0); });
  pid_t s1 = cl.spawn(0, [&] { return survivor(1); });
  pid_t victim = cl.spawn(0, [&] {
    Rank r;
    r.open(2, 3, c, GNI_MEM_RELAXED_PI_ORDERING);
    for (;;) {  // consumes messages until killed
      for (int j = 0; j < 2; ++j) {
        void* h;
        if (board()->r[j].ready.load() && GNI_SmsgGetNext(r.ep[size_t(j)], &h) == GNI_RC_SUCCESS)
          GNI_SmsgRelease(r.ep[size_t(j)]);
      }
      gni_cq_entry_t e;
      GNI_CqWaitEvent(r.g.rcq, 5, &e);
    }
    return 0;
  });
  wait_flag(board()->done[0]);
  wait_flag(board()->done[1]);
  board()->phase.store(1);
  wait_flag(board()->done[0], 2);
  kill(victim, SIGKILL);
  cl.wait(victim, 10);
  bool ok = wait_all(cl, {s0, s1});
  const uint64_t posted = res[0] + res[3], done = res[1] + res[2] + res[4] + res[5];
  std::printf("outcome: kill seed=%" PRIu64 " all_operations_finished=%s hung=%" PRIu64 "\n", o.seed,
              ok && posted == done ? "yes" : "no", posted - done);
  std::printf("info: posted=%" PRIu64 " succeeded=%" PRIu64 " failed=%" PRIu64 "\n", posted, res[1] + res[4],
              res[2] + res[5]);
  ok = ok && posted == done && res[2] + res[5] > 0;
  return ok ? 0 : 1;
}

}  // namespace

// Directed datagrams under datagram.error and datagram.drop: each post of the client ends
// COMPLETED (matched by the server's wildcard, which gets its payload), ERROR or TIMEOUT
// (never reaching the server); the probe reports each by its id before the wait consumes it,
// as GNI_PostDataProbeById does for completed, timed-out and failed datagrams.
int scenario_datagram(const Opts& o) {
  const uint64_t n = o.count ? o.count : 200;
  Cluster cl(1, daemon_args("seed=" + std::to_string(o.seed) + " datagram.error=0.2 datagram.drop=0.2"));
  Cred c = cl.credential();
  // completed, error, timeout, other, probes naming another id, payloads the server got, out of order
  uint64_t* res = shared_u64(7);
  char* states = reinterpret_cast<char*>(shared_u64(1 + n / 8));  // the sequence, one letter per post
  pid_t srv = cl.spawn(0, [&] {
    Gni g;
    CHECK_OR_EXIT(g.open(101, c) == GNI_RC_SUCCESS);
    board()->r[1].addr = g.addr;
    board()->r[1].inst = 101;
    board()->r[1].ready.store(1);
    gni_ep_handle_t ep;
    CHECK_OR_EXIT(GNI_EpCreate(g.nic, g.cq, &ep) == GNI_RC_SUCCESS);  // unbound: a wildcard
    uint64_t last = 0;
    for (;;) {
      uint64_t in = 0, out = 0;
      CHECK_OR_EXIT(GNI_EpPostDataWId(ep, &out, sizeof out, &in, sizeof in, 0) == GNI_RC_SUCCESS);
      gni_post_state_t st = GNI_POST_PENDING;
      uint32_t ra = 0, ri = 0;
      gni_return_t rc;
      while ((rc = GNI_EpPostDataWaitById(ep, 0, 50, &st, &ra, &ri)) == GNI_RC_TIMEOUT && !board()->done[0].load()) {
      }
      if (rc == GNI_RC_TIMEOUT) {
        // The client is done; a match that came after the last look is still counted.
        GNI_EpPostDataCancelById(ep, 0);
        if (GNI_EpPostDataTestById(ep, 0, &st, &ra, &ri) == GNI_RC_SUCCESS && st == GNI_POST_COMPLETED) ++res[5];
        break;
      }
      CHECK_OR_EXIT(rc == GNI_RC_SUCCESS && st == GNI_POST_COMPLETED);
      ++res[5];
      if (in <= last) ++res[6];
      last = in;
    }
    return 0;
  });
  pid_t cli = cl.spawn(0, [&] {
    Gni g;
    CHECK_OR_EXIT(g.open(100, c) == GNI_RC_SUCCESS);
    wait_flag(board()->r[1].ready);
    gni_ep_handle_t ep;
    CHECK_OR_EXIT(GNI_EpCreate(g.nic, g.cq, &ep) == GNI_RC_SUCCESS);
    CHECK_OR_EXIT(GNI_EpBind(ep, board()->r[1].addr, board()->r[1].inst) == GNI_RC_SUCCESS);
    for (uint64_t k = 1; k <= n; ++k) {
      uint64_t in = 0;
      CHECK_OR_EXIT(GNI_EpPostDataWId(ep, &k, sizeof k, &in, sizeof in, k) == GNI_RC_SUCCESS);
      uint64_t id = 0;
      CHECK_OR_EXIT(GNI_PostdataProbeWaitById(g.nic, 10000, &id) == GNI_RC_SUCCESS);
      if (id != k) ++res[4];
      gni_post_state_t st = GNI_POST_PENDING;
      uint32_t ra = 0, ri = 0;
      CHECK_OR_EXIT(GNI_EpPostDataWaitById(ep, k, 10000, &st, &ra, &ri) == GNI_RC_SUCCESS);
      const int slot = st == GNI_POST_COMPLETED ? 0 : st == GNI_POST_ERROR ? 1 : st == GNI_POST_TIMEOUT ? 2 : 3;
      ++res[slot];
      states[k - 1] = "CETX"[slot];
    }
    board()->done[0].store(1);
    return 0;
  });
  bool ok = wait_all(cl, {cli, srv});
  std::printf("outcome: datagram seed=%" PRIu64 " posts=%" PRIu64 " completed=%" PRIu64 " error=%" PRIu64
              " timeout=%" PRIu64 " other=%" PRIu64 " probe_mismatch=%" PRIu64 " delivered=%" PRIu64
              " first=%.32s\n",
              o.seed, n, res[0], res[1], res[2], res[3], res[4], res[5], states);
  return ok && res[0] + res[1] + res[2] == n && res[3] == 0 && res[4] == 0 && res[5] == res[0] && res[6] == 0 &&
                 res[1] > 0 && res[2] > 0
             ? 0
             : 1;
}

// GNI_MEM_UPDATE_REGION under reg.error=0.3 reg.exhaust=0.3: plain registrations fail with
// GNI_RC_ERROR_RESOURCE or GNI_RC_ERROR_NOMEM; updates of a reserved region only with
// GNI_RC_ERROR_NOMEM (the reserve took its MDD and PTE range; pinning the pages can still
// fail), and an update that failed can be repeated.
int scenario_update(const Opts& o) {
  const uint64_t n = o.count ? o.count : 200;
  Cluster cl(1, daemon_args("seed=" + std::to_string(o.seed) + " reg.error=0.3 reg.exhaust=0.3"));
  Cred c = cl.credential();
  uint64_t* res = shared_u64(6);  // plain resource, plain nomem, update resource, update nomem, other, updates done
  pid_t p = cl.spawn(0, [&] {
    Gni g;
    CHECK_OR_EXIT(g.open(100, c) == GNI_RC_SUCCESS);
    const size_t page = 4096;
    std::vector<char> mem((n + 1) * page);
    char* base = reinterpret_cast<char*>((uintptr_t(mem.data()) + page - 1) & ~uintptr_t(page - 1));
    gni_mem_handle_t reserved{};
    gni_return_t rc;
    // The reservation itself may be failed by the rules too: retried until it is made.
    while ((rc = GNI_MemRegister(g.nic, uint64_t(base), n * page, nullptr, GNI_MEM_RESERVE_REGION, uint32_t(-1),
                                 &reserved)) != GNI_RC_SUCCESS)
      CHECK_OR_EXIT(rc == GNI_RC_ERROR_RESOURCE || rc == GNI_RC_ERROR_NOMEM);
    for (uint64_t k = 0; k < n; ++k) {
      gni_mem_handle_t h{};
      rc = GNI_MemRegister(g.nic, uint64_t(base + k * page), page, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &h);
      if (rc == GNI_RC_SUCCESS) GNI_MemDeregister(g.nic, &h);
      ++res[rc == GNI_RC_ERROR_RESOURCE ? 0 : rc == GNI_RC_ERROR_NOMEM ? 1 : rc == GNI_RC_SUCCESS ? 5 : 4];
      gni_mem_handle_t u = reserved;
      for (;;) {  // an update that failed is repeated, as a client filling in pages would
        rc = GNI_MemRegister(g.nic, uint64_t(base + k * page), page, nullptr, GNI_MEM_UPDATE_REGION, uint32_t(-1), &u);
        if (rc == GNI_RC_SUCCESS) break;
        ++res[rc == GNI_RC_ERROR_RESOURCE ? 2 : rc == GNI_RC_ERROR_NOMEM ? 3 : 4];
        if (rc != GNI_RC_ERROR_RESOURCE && rc != GNI_RC_ERROR_NOMEM) break;
      }
    }
    GNI_MemDeregister(g.nic, &reserved);
    return 0;
  });
  bool ok = wait_all(cl, {p});
  std::printf("outcome: update seed=%" PRIu64 " pages=%" PRIu64 " plain_resource=%" PRIu64 " plain_nomem=%" PRIu64
              " update_resource=%" PRIu64 " update_nomem=%" PRIu64 " other=%" PRIu64 "\n",
              o.seed, n, res[0], res[1], res[2], res[3], res[4]);
  return ok && res[0] > 0 && res[1] > 0 && res[2] == 0 && res[3] > 0 && res[4] == 0 ? 0 : 1;
}

// Epoch announces obey the per-peer rules: two daemons on hosts of their own (UDP fabric on
// loopback), each with `packet.drop=0.5@11 link_down=10@0..60000ms`. The link to 10 being
// down, all five announce rounds of 11 to 10 are dropped; of 10's to 11, those the seed's
// draws say (a stream of their own per peer, so the count replays).
int scenario_announce(const Opts& o) {
  setenv("NICEMU_TEST_FABRIC", "1", 1);
  Cluster cl(2, daemon_args("seed=" + std::to_string(o.seed) + " packet.drop=0.5@11 link_down=10@0..60000ms"));
  usleep(1500 * 1000);  // the announce rounds: 0, 50, 100, 200 and 400 ms after the start
  auto dropped = [&](int node, uint32_t to) -> uint64_t {
    const auto st = cl.status(node);
    if (!st.contains("fabric") || !st["fabric"].is_object()) return UINT64_MAX;
    return st["fabric"]["announces_dropped"].value(std::to_string(to), uint64_t{0});
  };
  const uint64_t to_11 = dropped(0, cl.addr(1)), to_10 = dropped(1, cl.addr(0));
  std::printf("outcome: announce seed=%" PRIu64 " dropped_10_to_11=%" PRIu64 "/5 dropped_11_to_10=%" PRIu64 "/5\n",
              o.seed, to_11, to_10);
  return to_10 == 5 && to_11 <= 5 ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"fault-scenarios: the fault-injection scenarios of docs/fault-injection.md, one command each",
               "fault-scenarios"};
  app.require_subcommand(1);
  Opts o;
  std::string daemon;
  app.add_option("--daemon", daemon, "nicemu daemon binary (default: $NICEMU_DAEMON, else the build's)");
  auto add = [&](const char* name, const char* what, bool ordering) {
    auto* s = app.add_subcommand(name, what);
    s->add_option("--seed", o.seed, "seed of the fault injector")->capture_default_str();
    s->add_option("--count", o.count, "messages / transfers / trials (default: the scenario's)");
    if (ordering)
      s->add_option("--ordering", o.ordering, "PI ordering of the target memory")
          ->check(CLI::IsMember({"strict", "default", "relaxed"}))
          ->capture_default_str();
    return s;
  };
  auto* smsg = add("smsg", "(a) SMSG under 10% drop, 5% duplication and reordering: exactly once, in order", false);
  smsg->add_option("--extra", o.extra,
                   "more fault-spec tokens, e.g. 'smsg.exhaust=0.01' or 'retransmit_us=5000 link_down=*@0..20ms'");
  auto* rdma = add("rdma", "(b) PUT/GET under injected transient errors, replayed until verified", false);
  auto* race = add("race", "(c) a Get passes an earlier Put (relaxed) or never does (strict, default)", true);
  auto* env =
      add("envelope", "(d) payload PUT and envelope SMSG in both orders (relaxed), in issue order (strict)", true);
  for (auto* s : {race, env})
    s->add_flag("--rdma", o.rdma, "the payload PUT by GNI_PostRdma (BTE) instead of GNI_PostFma (rdma.delay rules)");
  auto* amo =
      add("amo", "AMO FADDs under injected errors, replayed: failed AMOs whose effect was done count twice", false);
  auto* fen = add("fence", "RDMA PUTs to one word under delays: a fenced second PUT always lands last", false);
  auto* nof =
      fen->add_flag("--no-fence", o.no_fence, "post the second PUT without GNI_RDMAMODE_FENCE (the old value may win)");
  fen->add_flag("--fence-first", o.fence_first, "put GNI_RDMAMODE_FENCE on the first PUT instead (the next one waits for it)")
      ->excludes(nof);
  auto* sil = add("silent", "PUTs without local events under put.error=1: never failed (no CQE could report it)",
                  false);
  auto* rem = add("remote", "PUTs failed after taking effect (error_done=1): the target still gets each remote event",
                  false);
  auto* kil = add("kill", "(e) a rank killed mid-run: every posted operation completes or fails", false);
  auto* dgm = add("datagram",
                  "directed datagrams under datagram.error/drop: each ends COMPLETED, ERROR or TIMEOUT, probed by id",
                  false);
  auto* ann = add("announce", "epoch announces obey the per-peer rules and link windows (two fabric hosts)", false);
  auto* upd = add("update", "GNI_MEM_UPDATE_REGION under reg.error/exhaust: only GNI_RC_ERROR_NOMEM, then repeated",
                  false);
  CLI11_PARSE(app, argc, argv);
  if (!daemon.empty()) setenv("NICEMU_DAEMON", daemon.c_str(), 1);
  if (!std::getenv("NICEMU_DAEMON")) setenv("NICEMU_DAEMON", NICEMU_DAEMON_PATH, 1);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    board();  // mapped before the ranks fork, so they share it
    if (smsg->parsed()) return scenario_smsg(o);
    if (rdma->parsed()) return scenario_rdma(o);
    if (race->parsed()) return scenario_race(o);
    if (env->parsed()) return scenario_envelope(o);
    if (kil->parsed()) return scenario_kill(o);
    if (fen->parsed()) return scenario_fence(o);
    if (sil->parsed()) return scenario_silent(o);
    if (rem->parsed()) return scenario_remote(o);
    if (amo->parsed()) return scenario_amo(o);
    if (dgm->parsed()) return scenario_datagram(o);
    if (upd->parsed()) return scenario_update(o);
    if (ann->parsed()) return scenario_announce(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault-scenarios: %s\n", e.what());
  }
  return 1;
}
