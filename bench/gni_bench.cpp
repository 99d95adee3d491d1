// gni_bench: uGNI micro-benchmarks between two ranks on one emulated node.
//
//   smsg_lat     SMSG one-way latency: ping-pong, half the round-trip time. The receiver
//                polls its remote-event CQ (GNI_CqGetEvent) and then takes the message
//                with GNI_SmsgGetNextWTag / GNI_SmsgRelease, the way uGNI clients
//                (Open MPI btl/ugni, UCX uct/ugni) poll.
//   smsg_bw      SMSG message rate: rank 0 streams messages into a mailbox of --window
//                credits, rank 1 takes and releases them; messages/s at the sender, from
//                the first send to the receiver's final acknowledgement.
//   fma_put_lat  FMA PUT / GET latency, 8 B .. 4 KiB: post one descriptor with
//   fma_get_lat  GNI_CQMODE_GLOBAL_EVENT, poll the local CQ with GNI_CqGetEvent, hand the
//                event to GNI_GetCompleted; time per operation. The target buffer is
//                ordinary heap memory of rank 1 (the common case for clients).
//   rdma_put_lat The same with GNI_PostRdma (only alone): the one-copy path in the
//   rdma_get_lat initiator by default, the daemon's BTE engine with NICEMU_RDMA_DIRECT=0.
//   rdma_put_bw  RDMA (BTE) PUT bandwidth, 4 MiB messages: rank 0 keeps 16 GNI_PostRdma
//                outstanding on one EP and sleeps in GNI_CqWaitEvent (the daemon's BTE
//                engine moves the data); GB/s from the first post to the last completion.
//                Followed by xmem_put_bw: the same messages written by rank 0 itself with
//                one process_vm_writev each, the single-copy reference.
//   msgq_lat     MSGQ one-way latency (ping-pong) and message rate (stream, a ring of
//   msgq_bw      --window slots): both ranks join the node's queue, which is connected to
//                its own node (loopback), and deliver with GNI_MsgqProgress(0) polls.
//   smsg_am_lat  SMSG through a progress engine shaped like UCX's and Open MPI's
//   smsg_am_bw   (am_engine.h): both CQs polled per pass, every waiting message taken by
//                GetNextWTag, dispatched by tag, released; the reply is sent from the
//                handler and local send completions are reaped into send descriptors.
//                am_lat: half the round trip; am_bw: messages/s of a stream.
//   smsg_calls   rank 0 alone, an SMSG channel between two of its own endpoints: each
//                round sends, takes the remote event, GetNextWTag, Release, takes the local
//                completion and polls the empty CQ, each call through its own non-inlined
//                wrapper (call_*), so `valgrind --tool=callgrind` gives instructions per
//                call (bench/run-profile); ns per round is reported too.
//   rdv_lat      Rendezvous round trip, per size (--sizes, default 100 B, 4 KiB, 64 KiB,
//                1 MiB, 4 MiB): rank 0 registers its page-aligned, touched buffer
//                (GNI_MemRegister, or UDREG_Register on a lazy cache made for the run), sends
//                {address, handle, length} by SMSG; rank 1 GETs it with GNI_PostRdma into a
//                buffer it registered once, waits for its local completion and answers by
//                SMSG; rank 0 deregisters (GNI_MemDeregister, or UDREG_Unregister) on the
//                answer. Each iteration timed alone at rank 0: median and p99. Next to it the
//                same run's 8 B SMSG round trip (ping-pong, per iteration, median) and the
//                ratio. Every 64th GET is checked at its first and last 8 bytes (stamped by
//                rank 0 per iteration) and one untimed GET per size and mode at every byte.
//                --rdv-reg direct|udreg|both (default both).
//
// The program forks the two ranks itself; they exchange addresses, SMSG attributes and
// memory handles over a socketpair (what PMI does in applications). Each rank pins itself
// to its own CPU (--cpus, sched_setaffinity) and busy-polls only on that CPU; the parent
// sleeps in sigtimedwait and the daemon is idle (same-host SMSG/FMA run in the library),
// so no third process competes for the two cores of a small machine.
//
// The job credential comes from the daemon (control op kCredIssue), as from ALPS on a
// Cray; the daemon is --socket, else $NICEMU_SOCKET, else node $NICEMU_NODE in
// $NICEMU_RUNDIR (else the first daemon found there). With --peer-socket, rank 1 attaches
// to that daemon instead (another emulated node of this host), which is granted the job's
// credential (kCredGrant) as nicemu-run does for a job on several nodes.
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "am_engine.h"
#include "gni_pub.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/ctl/ctl_client.h"
#include "socket_choice.h"
#include "udreg_pub.h"

namespace {

struct Options {
  std::string test = "all";
  uint64_t iters = 0;   // 0: per-test default
  int64_t warmup = -1;  // -1: per-test default
  uint32_t size = 8;
  bool size_given = false;
  uint32_t window = 64;
  bool csv = false;
  std::string socket;
  std::string peer_socket;  // rank 1's daemon (another emulated node of this host)
  std::string cpus = "0,1";
  int cpu[2] = {0, 1};
  unsigned timeout_s = 600;
  std::vector<uint64_t> sizes = {100, 4096, 65536, 1 << 20, 4 << 20};  // rdv_lat
  std::string rdv_reg = "both";
};

Options opt;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "gni_bench: %s\n", what);
  std::fflush(stderr);
  _exit(2);
}

#define CHECK_GNI(call)                                                                    \
  do {                                                                                     \
    gni_return_t rc_ = (call);                                                             \
    if (rc_ != GNI_RC_SUCCESS) {                                                           \
      std::fprintf(stderr, "gni_bench: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
                   gni_err_str[rc_]);                                                      \
      std::fflush(stderr);                                                                 \
      _exit(2);                                                                            \
    }                                                                                      \
  } while (0)

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- out-of-band exchange between the two ranks ------------------------------------------

int oob_fd[2] = {-1, -1};

template <typename T>
void oob_send(int rank, const T& v) {
  if (::send(oob_fd[rank], &v, sizeof(T), MSG_NOSIGNAL) != ssize_t(sizeof(T))) die("oob send failed (peer gone?)");
}
template <typename T>
T oob_recv(int rank) {
  T v{};
  if (::recv(oob_fd[rank], &v, sizeof(T), 0) != ssize_t(sizeof(T))) die("oob recv failed (peer gone?)");
  return v;
}
// Blocking barrier: the waiting rank sleeps in recv(), it does not spin.
void barrier(int rank) {
  oob_send(rank, int{1});
  (void)oob_recv<int>(rank);
}

// ---- results -----------------------------------------------------------------------------

void report(const char* test, uint64_t size, double value, const char* unit) {
  if (opt.csv)
    std::printf("%s,%llu,%.6g,%s\n", test, static_cast<unsigned long long>(size), value, unit);
  else if (std::strcmp(unit, "msg/s") == 0)
    std::printf("%-17s %8llu %14.0f  %s\n", test, static_cast<unsigned long long>(size), value, unit);
  else
    std::printf("%-17s %8llu %14.3f  %s\n", test, static_cast<unsigned long long>(size), value, unit);
  std::fflush(stdout);
}

// ---- one call each, never inlined: callgrind's inclusive cost of call_X is X's cost -----

[[gnu::noinline]] gni_return_t call_SmsgSendWTag(gni_ep_handle_t ep, void* data, uint32_t len, uint32_t id, uint8_t tag) {
  return GNI_SmsgSendWTag(ep, nullptr, 0, data, len, id, tag);
}
[[gnu::noinline]] gni_return_t call_SmsgGetNextWTag(gni_ep_handle_t ep, void** msg, uint8_t* tag) {
  return GNI_SmsgGetNextWTag(ep, msg, tag);
}
[[gnu::noinline]] gni_return_t call_SmsgRelease(gni_ep_handle_t ep) { return GNI_SmsgRelease(ep); }
// The two CQ polls differ only in a comment the compiler keeps, so it cannot fold them into one.
[[gnu::noinline]] gni_return_t call_CqGetEvent_full(gni_cq_handle_t cq, gni_cq_entry_t* e) {
  asm volatile("# full" ::: "memory");
  return GNI_CqGetEvent(cq, e);
}
[[gnu::noinline]] gni_return_t call_CqGetEvent_empty(gni_cq_handle_t cq, gni_cq_entry_t* e) {
  asm volatile("# empty" ::: "memory");
  return GNI_CqGetEvent(cq, e);
}

// ---- one rank ----------------------------------------------------------------------------

constexpr uint32_t kFmaMax = 4096;
constexpr uint64_t kRdmaSize = 4 << 20;
constexpr uint32_t kRdmaWindow = 16;
constexpr uint8_t kTagData = 1, kTagAck = 2;

struct Info {
  uint32_t addr;
  uint32_t inst;
  gni_smsg_attr_t smsg;
  uint64_t buf;
  gni_mem_handle_t buf_h;
  uint64_t big;  // RDMA target (kRdmaSize)
  gni_mem_handle_t big_h;
  int32_t pid;
};

struct Rank {
  int id = 0;
  gni_cdm_handle_t cdm = nullptr;
  gni_nic_handle_t nic = nullptr;
  gni_cq_handle_t cq = nullptr;   // local completions (SMSG sends, FMA posts)
  gni_cq_handle_t rcq = nullptr;  // remote events (SMSG arrivals)
  gni_ep_handle_t ep = nullptr;
  char* mbox = nullptr;
  char* buf = nullptr;  // FMA: target buffer (rank 1), GET destination (rank 0)
  char* src = nullptr;  // FMA PUT source / SMSG payload
  gni_mem_handle_t buf_h{};
  gni_mem_handle_t mbox_h{};
  char* big = nullptr;  // RDMA source (rank 0) / target (rank 1)
  gni_mem_handle_t big_h{};
  Info peer{};
  uint64_t local_events = 0;
  gni_msgq_handle_t msgq = nullptr;
  uint64_t msgq_got = 0;   // messages the MSGQ callback delivered
  uint8_t msgq_tag = 0;    // tag of the last one
  uint32_t self_addr = 0;

  // Local SMSG completions: a progress engine consumes them as they come.
  void drain_local() {
    gni_cq_entry_t e;
    gni_return_t rc;
    while ((rc = GNI_CqGetEvent(cq, &e)) == GNI_RC_SUCCESS) ++local_events;
    if (rc != GNI_RC_NOT_DONE) die("local CQ error (overrun or transaction error)");
  }

  bool events_taken = false;  // send_one took remote events recv_one has not looked behind

  // Takes one remote event, if any; false if there was none. An SMSG event says "look in
  // the mailbox": a message, or credits that came back (then there is no message).
  bool take_remote_event() {
    gni_cq_entry_t e;
    gni_return_t rc = GNI_CqGetEvent(rcq, &e);
    if (rc == GNI_RC_NOT_DONE) return false;
    if (rc != GNI_RC_SUCCESS) die("remote-event CQ error (overrun or transaction error)");
    if (GNI_CQ_GET_TYPE(e) != GNI_CQ_EVENT_TYPE_SMSG) die("unexpected remote event type");
    return true;
  }

  // Waits for one message: remote-event CQ first, then the mailbox; an event with no
  // message (credits that came back) waits again. After send_one took events while out of
  // credits, the mailbox is looked at first (one of them may have announced a message).
  // Returns its tag; the first `n` bytes of the message go to `out` if given.
  uint8_t recv_one(void* out = nullptr, size_t n = 0) {
    for (;;) {
      if (!events_taken)
        while (!take_remote_event()) drain_local();
      events_taken = false;
      void* msg = nullptr;
      uint8_t tag = GNI_SMSG_ANY_TAG;
      gni_return_t rc = GNI_SmsgGetNextWTag(ep, &msg, &tag);
      if (rc == GNI_RC_SUCCESS) {
        if (out) std::memcpy(out, msg, n);
        CHECK_GNI(GNI_SmsgRelease(ep));
        return tag;
      }
      if (rc != GNI_RC_NOT_DONE) die("GNI_SmsgGetNextWTag failed");
    }
  }

  // Out of credits: reap local completions and remote events (credits come back as an
  // SMSG event, which a real progress engine takes from its receive CQ) and try again.
  void send_one(uint32_t len, uint8_t tag, uint32_t msg_id, const void* data = nullptr) {
    void* p = data ? const_cast<void*>(data) : src;
    gni_return_t rc;
    while ((rc = GNI_SmsgSendWTag(ep, p, len, nullptr, 0, msg_id, tag)) == GNI_RC_NOT_DONE) {
      drain_local();
      while (take_remote_event()) events_taken = true;
    }
    if (rc != GNI_RC_SUCCESS) die("GNI_SmsgSendWTag failed");
  }

  void setup(uint8_t ptag, uint32_t cookie) {
    CHECK_GNI(GNI_CdmCreate(uint32_t(id), ptag, cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm));
    uint32_t addr = 0;
    CHECK_GNI(GNI_CdmAttach(cdm, 0, &addr, &nic));
    self_addr = addr;
    CHECK_GNI(GNI_CqCreate(nic, 4096, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &cq));
    CHECK_GNI(GNI_CqCreate(nic, 4096, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &rcq));

    gni_smsg_attr_t local{};
    local.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    local.mbox_maxcredit = opt.window;
    local.msg_maxsize = std::max<uint32_t>(opt.size, 64);
    unsigned need = 0;
    CHECK_GNI(GNI_SmsgBufferSizeNeeded(&local, &need));
    size_t mbox_bytes = (size_t(need) + 4095) & ~size_t{4095};
    mbox = static_cast<char*>(std::aligned_alloc(4096, mbox_bytes));
    buf = static_cast<char*>(std::aligned_alloc(4096, 2 * kFmaMax));
    src = static_cast<char*>(std::aligned_alloc(4096, std::max<size_t>(2 * kFmaMax, (opt.size + 4095) & ~4095u)));
    if (!mbox || !buf || !src) die("out of memory");
    std::memset(mbox, 0, mbox_bytes);
    std::memset(buf, id, 2 * kFmaMax);
    std::memset(src, 'a' + id, std::max<size_t>(2 * kFmaMax, opt.size));
    local.msg_buffer = mbox;
    local.buff_size = unsigned(mbox_bytes);
    local.mbox_offset = 0;
    CHECK_GNI(GNI_MemRegister(nic, uint64_t(mbox), mbox_bytes, rcq, GNI_MEM_READWRITE, uint32_t(-1), &local.mem_hndl));
    CHECK_GNI(GNI_MemRegister(nic, uint64_t(buf), 2 * kFmaMax, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &buf_h));
    big = static_cast<char*>(std::aligned_alloc(4096, kRdmaSize));
    if (!big) die("out of memory");
    std::memset(big, 'A' + id, kRdmaSize);
    CHECK_GNI(GNI_MemRegister(nic, uint64_t(big), kRdmaSize, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &big_h));

    Info mine{};
    mine.addr = addr;
    mine.inst = uint32_t(id);
    mine.smsg = local;
    mine.buf = uint64_t(buf);
    mine.buf_h = buf_h;
    mine.big = uint64_t(big);
    mine.big_h = big_h;
    mine.pid = int32_t(getpid());
    oob_send(id, mine);
    peer = oob_recv<Info>(id);
    CHECK_GNI(GNI_EpCreate(nic, cq, &ep));
    CHECK_GNI(GNI_EpBind(ep, peer.addr, peer.inst));
    CHECK_GNI(GNI_SmsgInit(ep, &local, &peer.smsg));
    mbox_h = local.mem_hndl;
    barrier(id);  // both mailboxes are initialised before anyone sends
  }

  // (a) ping-pong; rank 0 reports half the round-trip time.
  void smsg_lat() {
    const uint64_t iters = opt.iters ? opt.iters : 200000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 20000;
    barrier(id);
    double t0 = 0;
    for (uint64_t i = 0; i < warm + iters; ++i) {
      if (id == 0) {
        if (i == warm) t0 = now_s();
        send_one(opt.size, kTagData, uint32_t(i));
        (void)recv_one();
      } else {
        (void)recv_one();
        send_one(opt.size, kTagData, uint32_t(i));
      }
    }
    if (id == 0) report("smsg_lat", opt.size, (now_s() - t0) / double(iters) / 2 * 1e6, "us");
    drain_local();
  }

  // (b) uni-directional stream; rank 0 reports messages per second.
  void smsg_bw() {
    const uint64_t iters = opt.iters ? opt.iters : 2000000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 100000;
    barrier(id);
    auto phase = [&](uint64_t n) {
      if (id == 0) {
        for (uint64_t i = 0; i < n; ++i) {
          send_one(opt.size, kTagData, uint32_t(i));
          if ((i & 63) == 63) drain_local();
        }
        if (recv_one() != kTagAck) die("smsg_bw: expected the acknowledgement");
      } else {
        for (uint64_t i = 0; i < n; ++i)
          if (recv_one() != kTagData) die("smsg_bw: unexpected tag");
        send_one(8, kTagAck, 0);
      }
    };
    if (warm) phase(warm);
    double t0 = now_s();
    phase(iters);
    double t = now_s() - t0;
    if (id == 0) report("smsg_bw", opt.size, double(iters) / t, "msg/s");
    drain_local();
  }

  // A mailbox of our own for an extra SMSG channel (smsg_calls), registered with rcq.
  gni_smsg_attr_t own_mailbox() {
    gni_smsg_attr_t a{};
    a.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    a.mbox_maxcredit = opt.window;
    a.msg_maxsize = std::max<uint32_t>(opt.size, 64);
    unsigned need = 0;
    CHECK_GNI(GNI_SmsgBufferSizeNeeded(&a, &need));
    size_t bytes = (size_t(need) + 4095) & ~size_t{4095};
    char* m = static_cast<char*>(std::aligned_alloc(4096, bytes));
    if (!m) die("out of memory");
    std::memset(m, 0, bytes);
    a.msg_buffer = m;
    a.buff_size = unsigned(bytes);
    CHECK_GNI(GNI_MemRegister(nic, uint64_t(m), bytes, rcq, GNI_MEM_READWRITE, uint32_t(-1), &a.mem_hndl));
    return a;
  }

  // (e) progress-engine ping-pong: the pong is sent by rank 1's handler of the ping.
  struct AmState {
    Rank* r;
    uint64_t got = 0;
    bool reply_pending = false;
  };
  static void on_ping(nicemu::bench::AmEngine& am, uint32_t ep_index, const void*, void* arg) {
    auto* st = static_cast<AmState*>(arg);
    ++st->got;
    if (am.send(ep_index, kTagAck, st->r->src, opt.size) != GNI_RC_SUCCESS) st->reply_pending = true;
  }
  static void on_data(nicemu::bench::AmEngine&, uint32_t, const void*, void* arg) { ++static_cast<AmState*>(arg)->got; }

  void am_progress(nicemu::bench::AmEngine& am) {
    if (am.progress() < 0) {
      std::fprintf(stderr, "gni_bench: rank %d: progress engine: %s (%s)\n", id, am.error, gni_err_str[am.error_rc]);
      die("progress engine failed");
    }
  }
  void am_send(nicemu::bench::AmEngine& am, uint8_t tag, uint32_t len) {
    gni_return_t rc;
    while ((rc = am.send(0, tag, src, len)) == GNI_RC_NOT_DONE) am_progress(am);
    if (rc != GNI_RC_SUCCESS) die("progress engine: GNI_SmsgSendWTag failed");
  }
  void am_wait(nicemu::bench::AmEngine& am, AmState& st, uint64_t until) {
    while (st.got < until) {
      am_progress(am);
      if (st.reply_pending) {
        st.reply_pending = false;
        am_send(am, kTagAck, opt.size);
      }
    }
  }

  // The engine over this rank's two CQs and its one endpoint: data messages go to
  // `on_data_msg`, acknowledgements (and pongs) are counted.
  void am_setup(nicemu::bench::AmEngine& am, AmState& st, nicemu::bench::AmEngine::Handler on_data_msg) {
    CHECK_GNI(am.add_ep(ep, 0));
    am.on(kTagData, on_data_msg, &st);
    am.on(kTagAck, on_data, &st);
    barrier(id);
  }

  void smsg_am_lat() {
    const uint64_t iters = opt.iters ? opt.iters : 200000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 20000;
    nicemu::bench::AmEngine am(cq, rcq, 2 * opt.window);
    AmState st{this};
    am_setup(am, st, on_ping);
    double t0 = 0;
    for (uint64_t i = 0; i < warm + iters; ++i) {
      if (id == 0) {
        if (i == warm) t0 = now_s();
        am_send(am, kTagData, opt.size);
      }
      am_wait(am, st, i + 1);
    }
    if (id == 0) report("smsg_am_lat", opt.size, (now_s() - t0) / double(iters) / 2 * 1e6, "us");
    while (am.inflight()) am_progress(am);
    barrier(id);
  }

  // (f) progress-engine stream: the sender progresses when out of credits or descriptors
  // and every 16 sends (reaping its completions), the receiver only progresses.
  void smsg_am_bw() {
    const uint64_t iters = opt.iters ? opt.iters : 2000000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 100000;
    nicemu::bench::AmEngine am(cq, rcq, 2 * opt.window);
    AmState st{this};
    am_setup(am, st, on_data);
    uint64_t expect = 0;
    auto phase = [&](uint64_t n) {
      if (id == 0) {
        for (uint64_t i = 0; i < n; ++i) {
          am_send(am, kTagData, opt.size);
          if ((i & 15) == 15) am_progress(am);
        }
        am_wait(am, st, ++expect);  // the acknowledgement
      } else {
        expect += n;
        am_wait(am, st, expect);
        am_send(am, kTagAck, 8);
      }
    };
    if (warm) phase(warm);
    double t0 = now_s();
    phase(iters);
    double t = now_s() - t0;
    if (id == 0) report("smsg_am_bw", opt.size, double(iters) / t, "msg/s");
    while (am.inflight()) am_progress(am);
    barrier(id);
  }

  // (g) the calls of one SMSG round, each through its call_* wrapper, on rank 0 alone.
  void smsg_calls() {
    const uint64_t iters = opt.iters ? opt.iters : 1000000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 10000;
    barrier(id);
    if (id == 0) {
      drain_local();
      gni_smsg_attr_t ax = own_mailbox(), ay = own_mailbox();
      gni_ep_handle_t ex, ey;
      CHECK_GNI(GNI_EpCreate(nic, cq, &ex));
      CHECK_GNI(GNI_EpCreate(nic, cq, &ey));
      CHECK_GNI(GNI_EpBind(ex, peer_self_addr(), uint32_t(id)));
      CHECK_GNI(GNI_EpBind(ey, peer_self_addr(), uint32_t(id)));
      CHECK_GNI(GNI_SmsgInit(ex, &ax, &ay));
      CHECK_GNI(GNI_SmsgInit(ey, &ay, &ax));
      gni_cq_entry_t e;
      double t0 = 0;
      for (uint64_t i = 0; i < warm + iters; ++i) {
        if (i == warm) t0 = now_s();
        if (call_SmsgSendWTag(ex, src, opt.size, uint32_t(i), kTagData) != GNI_RC_SUCCESS) die("smsg_calls: send");
        if (call_CqGetEvent_full(rcq, &e) != GNI_RC_SUCCESS) die("smsg_calls: no remote event");
        void* msg = nullptr;
        uint8_t tag = GNI_SMSG_ANY_TAG;
        if (call_SmsgGetNextWTag(ey, &msg, &tag) != GNI_RC_SUCCESS || tag != kTagData) die("smsg_calls: no message");
        if (call_SmsgRelease(ey) != GNI_RC_SUCCESS) die("smsg_calls: release");
        if (call_CqGetEvent_full(cq, &e) != GNI_RC_SUCCESS) die("smsg_calls: no local completion");
        if (call_CqGetEvent_empty(cq, &e) != GNI_RC_NOT_DONE) die("smsg_calls: local CQ not empty");
      }
      report("smsg_calls", opt.size, (now_s() - t0) / double(iters) * 1e9, "ns/round");
      GNI_EpUnbind(ex);
      GNI_EpUnbind(ey);
      GNI_EpDestroy(ex);
      GNI_EpDestroy(ey);
      GNI_MemDeregister(nic, &ax.mem_hndl);
      GNI_MemDeregister(nic, &ay.mem_hndl);
      std::free(ax.msg_buffer);
      std::free(ay.msg_buffer);
    }
    barrier(id);
  }
  uint32_t peer_self_addr() const { return self_addr; }

  static int msgq_cb(uint32_t, uint32_t, void*, uint8_t tag, void* data) {
    auto* r = static_cast<Rank*>(data);
    ++r->msgq_got;
    r->msgq_tag = tag;
    return 1;
  }
  // Both ranks join the node's queue; rank 0 connects the node to itself.
  void msgq_setup() {
    if (opt.size > GNI_MSGQ_MSG_SZ_MAX) die("MSGQ messages are at most 128 bytes (--size)");
    gni_msgq_attr_t a{};
    a.max_msg_sz = GNI_MSGQ_MSG_SZ_MAX;
    a.smsg_q_sz = opt.window;
    a.rcv_pool_sz = 1;
    a.num_msgq_eps = 1;
    a.nloc_insts = 2;
    a.modes = 0;
    a.rcv_cq_sz = 16;
    CHECK_GNI(GNI_MsgqInit(nic, msgq_cb, this, cq, &a, &msgq));
    barrier(id);
    if (id == 0) {
      gni_msgq_ep_attr_t ea;
      uint32_t size = 0;
      CHECK_GNI(GNI_MsgqGetConnAttrs(msgq, peer.addr, &ea, &size));
      CHECK_GNI(GNI_MsgqConnect(msgq, peer.addr, &ea));
    }
    barrier(id);
  }
  void msgq_send(uint8_t tag, uint32_t msg_id) {
    gni_return_t rc;
    while ((rc = GNI_MsgqSend(msgq, ep, src, opt.size, nullptr, 0, msg_id, tag)) == GNI_RC_NOT_DONE) drain_local();
    if (rc != GNI_RC_SUCCESS) die("GNI_MsgqSend failed");
  }
  // Progress delivers whatever has arrived, possibly many messages per call: wait for a
  // count, not for a call.
  uint8_t msgq_recv(uint64_t n = 1) {
    const uint64_t want = msgq_got + n;
    while (msgq_got < want) {
      const uint64_t before = msgq_got;
      gni_return_t rc = GNI_MsgqProgress(msgq, 0);
      if (rc != GNI_RC_SUCCESS && rc != GNI_RC_NOT_DONE) die("GNI_MsgqProgress failed");
      // SUCCESS also when nothing was there (Cray's "all messages were processed"): what
      // says that nothing arrived is the count.
      if (msgq_got == before) drain_local();
    }
    return msgq_tag;
  }
  void msgq_lat() {
    const uint64_t iters = opt.iters ? opt.iters : 200000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 20000;
    barrier(id);
    double t0 = 0;
    for (uint64_t i = 0; i < warm + iters; ++i) {
      if (id == 0) {
        if (i == warm) t0 = now_s();
        msgq_send(kTagData, uint32_t(i));
        (void)msgq_recv();
      } else {
        (void)msgq_recv();
        msgq_send(kTagData, uint32_t(i));
      }
    }
    if (id == 0) report("msgq_lat", opt.size, (now_s() - t0) / double(iters) / 2 * 1e6, "us");
    drain_local();
  }
  void msgq_bw() {
    const uint64_t iters = opt.iters ? opt.iters : 2000000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 100000;
    barrier(id);
    auto phase = [&](uint64_t n) {
      if (id == 0) {
        for (uint64_t i = 0; i < n; ++i) {
          msgq_send(kTagData, uint32_t(i));
          if ((i & 63) == 63) drain_local();
        }
        if (msgq_recv() != kTagAck) die("msgq_bw: expected the acknowledgement");
      } else {
        const uint64_t before = msgq_got;
        if (msgq_recv(n) != kTagData || msgq_got != before + n) die("msgq_bw: unexpected message");
        msgq_send(kTagAck, 0);
      }
    };
    if (warm) phase(warm);
    double t0 = now_s();
    phase(iters);
    double t = now_s() - t0;
    if (id == 0) report("msgq_bw", opt.size, double(iters) / t, "msg/s");
    drain_local();
  }

  // (c) FMA (or RDMA) PUT or GET latency per size; rank 1 sleeps in the barrier meanwhile.
  void fma_lat(bool put, bool rdma = false) {
    const uint64_t iters = opt.iters ? opt.iters : 50000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 2000;
    barrier(id);
    if (id == 0) {
      drain_local();
      std::vector<uint32_t> sizes;
      if (opt.size_given) {
        if (opt.size == 0 || opt.size > kFmaMax || (!put && (opt.size & 3)))
          die("FMA/RDMA size must be 1..4096 (GET: a multiple of 4)");
        sizes.push_back(opt.size);
      } else {
        for (uint32_t s = 8; s <= kFmaMax; s *= 2) sizes.push_back(s);
      }
      for (uint32_t len : sizes) {
        gni_post_descriptor_t d{};
        d.type = rdma ? (put ? GNI_POST_RDMA_PUT : GNI_POST_RDMA_GET) : (put ? GNI_POST_FMA_PUT : GNI_POST_FMA_GET);
        d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
        d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
        // An RDMA source must be registered (FMA's need not): the upper half of buf.
        d.local_addr = put ? (rdma ? uint64_t(buf + kFmaMax) : uint64_t(src)) : uint64_t(buf);
        d.local_mem_hndl = buf_h;
        d.remote_addr = peer.buf;
        d.remote_mem_hndl = peer.buf_h;
        d.length = len;
        double t0 = 0;
        for (uint64_t i = 0; i < warm + iters; ++i) {
          if (i == warm) t0 = now_s();
          CHECK_GNI(rdma ? GNI_PostRdma(ep, &d) : GNI_PostFma(ep, &d));
          gni_cq_entry_t e;
          gni_return_t rc;
          while ((rc = GNI_CqGetEvent(cq, &e)) == GNI_RC_NOT_DONE) {
          }
          if (rc != GNI_RC_SUCCESS) die(rdma ? "RDMA completion error" : "FMA completion error");
          gni_post_descriptor_t* out = nullptr;
          CHECK_GNI(GNI_GetCompleted(cq, e, &out));
          if (out != &d) die("GNI_GetCompleted returned another descriptor");
        }
        const char* name = rdma ? (put ? "rdma_put_lat" : "rdma_get_lat") : (put ? "fma_put_lat" : "fma_get_lat");
        report(name, len, (now_s() - t0) / double(iters) * 1e6, "us");
      }
    }
    barrier(id);
  }

  // (d) RDMA PUT bandwidth with a window of posts, then the process_vm_writev reference.
  void rdma_put_bw() {
    const uint64_t iters = opt.iters ? opt.iters : 200;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 10;
    barrier(id);
    if (id == 0) {
      // Completions to a blocking CQ (the descriptor's src_cq_hndl): rank 0 sleeps, and the
      // BTE channels of the daemon get both CPUs, as they would get the NIC on a Cray.
      gni_cq_handle_t bcq;
      CHECK_GNI(GNI_CqCreate(nic, 1024, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &bcq));
      std::vector<gni_post_descriptor_t> ds(kRdmaWindow);
      auto post = [&](gni_post_descriptor_t& d) {
        d = gni_post_descriptor_t{};
        d.type = GNI_POST_RDMA_PUT;
        d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
        d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
        d.local_addr = uint64_t(big);
        d.local_mem_hndl = big_h;
        d.remote_addr = peer.big;
        d.remote_mem_hndl = peer.big_h;
        d.length = kRdmaSize;
        d.src_cq_hndl = bcq;
        CHECK_GNI(GNI_PostRdma(ep, &d));
      };
      auto run = [&](uint64_t n) {
        uint64_t posted = 0, done = 0;
        while (posted < n && posted < kRdmaWindow) post(ds[posted++]);
        while (done < n) {
          gni_cq_entry_t e;
          if (GNI_CqWaitEvent(bcq, 10000, &e) != GNI_RC_SUCCESS) die("RDMA completion error or timeout");
          gni_post_descriptor_t* out = nullptr;
          CHECK_GNI(GNI_GetCompleted(bcq, e, &out));
          ++done;
          if (posted < n) {
            post(*out);
            ++posted;
          }
        }
      };
      if (warm) run(warm);
      double t0 = now_s();
      run(iters);
      double t = now_s() - t0;
      report("rdma_put_bw", kRdmaSize, double(iters) * double(kRdmaSize) / t / 1e9, "GB/s");
      for (uint64_t i = 0; i < warm + iters; ++i) {
        if (i == warm) t0 = now_s();
        iovec l{big, kRdmaSize}, r{reinterpret_cast<void*>(peer.big), kRdmaSize};
        if (process_vm_writev(pid_t(peer.pid), &l, 1, &r, 1, 0) != ssize_t(kRdmaSize)) die("process_vm_writev failed");
      }
      report("xmem_put_bw", kRdmaSize, double(iters) * double(kRdmaSize) / (now_s() - t0) / 1e9, "GB/s");
      CHECK_GNI(GNI_CqDestroy(bcq));
    }
    barrier(id);
  }

  // (h) rendezvous: registration, handle by SMSG, RDMA GET by the peer, answer, deregistration.
  struct Rts {
    uint64_t addr;
    gni_mem_handle_t mh;
    uint64_t len;
    uint64_t seq;
  };
  struct Fin {
    uint64_t seq;
    uint32_t checked;  // this GET's bytes were compared ...
    uint32_t bad;      // ... and differed from what rank 0 wrote
  };
  static constexpr uint64_t kFullCheck = ~uint64_t{0};
  static uint8_t pattern(uint64_t size, uint64_t k) { return uint8_t(k * 131 + size * 7 + 1); }
  static uint64_t stamp_of(uint64_t size, int mode, uint64_t seq) {
    return 0x5a00000000000000ull ^ (uint64_t(mode) << 52) ^ (size << 20) ^ seq;
  }

  gni_cq_handle_t rdv_cq = nullptr;  // rank 1: GET completions (blocking: it may sleep on it)
  char* rdv_dst = nullptr;           // rank 1: GET destination, registered once
  gni_mem_handle_t rdv_dst_h{};
  udreg_cache_handle_t rdv_cache = nullptr;  // rank 0 with --rdv-reg udreg|both

  static void* udreg_reg(void* addr, uint64_t len, void* ctx) {
    auto* h = new gni_mem_handle_t;
    gni_return_t rc = GNI_MemRegister(static_cast<gni_nic_handle_t>(ctx), uint64_t(addr), len, nullptr,
                                      GNI_MEM_READWRITE, uint32_t(-1), h);
    if (rc != GNI_RC_SUCCESS) {
      delete h;
      return rc == GNI_RC_ERROR_RESOURCE ? nullptr : UDREG_DEVICE_REG_FAILED;
    }
    return h;
  }
  static uint32_t udreg_dereg(void* data, void* ctx) {
    auto* h = static_cast<gni_mem_handle_t*>(data);
    gni_return_t rc = GNI_MemDeregister(static_cast<gni_nic_handle_t>(ctx), h);
    delete h;
    return rc == GNI_RC_SUCCESS ? 0 : 1;
  }

  static double pct(std::vector<double>& v, double p) {
    std::sort(v.begin(), v.end());
    size_t i = size_t(p * double(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
  }

  // Rank 1's side of one rendezvous: take the handle, GET, check if asked, answer.
  void rdv_serve(int mode, bool verify) {
    Rts rts{};
    if (recv_one(&rts, sizeof rts) != kTagData) die("rdv_lat: expected a handle message");
    const bool full = rts.seq == kFullCheck;
    Fin fin{rts.seq, 0, 0};
    if (full)
      std::memset(rdv_dst, 0, rts.len);
    else if (verify) {
      std::memset(rdv_dst, 0, 8);
      std::memset(rdv_dst + rts.len - 8, 0, 8);
    }
    gni_post_descriptor_t d{};
    d.type = GNI_POST_RDMA_GET;
    d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
    d.local_addr = uint64_t(rdv_dst);
    d.local_mem_hndl = rdv_dst_h;
    d.remote_addr = rts.addr;
    d.remote_mem_hndl = rts.mh;
    d.length = rts.len;
    d.src_cq_hndl = rdv_cq;
    CHECK_GNI(GNI_PostRdma(ep, &d));
    // The same-host GET usually completes inside the post; otherwise the daemon moves the
    // data, and this rank sleeps rather than take a CPU from it.
    gni_cq_entry_t e;
    gni_return_t rc = GNI_CqGetEvent(rdv_cq, &e);
    if (rc == GNI_RC_NOT_DONE) rc = GNI_CqWaitEvent(rdv_cq, 10000, &e);
    if (rc != GNI_RC_SUCCESS) die("rdv_lat: GET completion error or timeout");
    gni_post_descriptor_t* out = nullptr;
    CHECK_GNI(GNI_GetCompleted(rdv_cq, e, &out));
    if (out != &d) die("rdv_lat: GNI_GetCompleted returned another descriptor");
    if (full) {
      fin.checked = 1;
      for (uint64_t k = 0; k < rts.len && !fin.bad; ++k)
        if (uint8_t(rdv_dst[k]) != pattern(rts.len, k)) fin.bad = 1;
    } else if (verify) {
      fin.checked = 1;
      const uint64_t st = stamp_of(rts.len, mode, rts.seq);
      uint64_t first = 0, last = 0;
      std::memcpy(&first, rdv_dst, 8);
      std::memcpy(&last, rdv_dst + rts.len - 8, 8);
      fin.bad = first != st || last != st;
    }
    send_one(sizeof fin, kTagAck, 0, &fin);
  }

  // Rank 0's side: register, send the handle, wait for the answer, deregister.
  Fin rdv_round(int mode, char* b, uint64_t len, uint64_t seq) {
    gni_mem_handle_t h{};
    udreg_entry_t* ent = nullptr;
    if (mode == 0) {
      CHECK_GNI(GNI_MemRegister(nic, uint64_t(b), len, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &h));
    } else {
      if (UDREG_Register(rdv_cache, b, len, &ent) != UDREG_RC_SUCCESS) die("rdv_lat: UDREG_Register failed");
      h = *static_cast<gni_mem_handle_t*>(ent->device_data);
    }
    Rts rts{uint64_t(b), h, len, seq};
    send_one(sizeof rts, kTagData, uint32_t(seq), &rts);
    Fin fin{};
    if (recv_one(&fin, sizeof fin) != kTagAck || fin.seq != seq) die("rdv_lat: unexpected answer");
    if (mode == 0)
      CHECK_GNI(GNI_MemDeregister(nic, &h));
    else if (UDREG_Unregister(rdv_cache, ent) != UDREG_RC_SUCCESS)
      die("rdv_lat: UDREG_Unregister failed");
    return fin;
  }

  void rdv_lat() {
    const uint64_t iters = opt.iters ? opt.iters : 2000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 200;
    const uint64_t max_len = *std::max_element(opt.sizes.begin(), opt.sizes.end());
    std::vector<int> modes;
    if (opt.rdv_reg != "udreg") modes.push_back(0);
    if (opt.rdv_reg != "direct") modes.push_back(1);
    barrier(id);
    drain_local();

    // The plain SMSG round trip of this run: 8 B ping-pong, each round trip timed.
    const uint64_t smsg_iters = std::max<uint64_t>(iters, 10000), smsg_warm = smsg_iters / 10;
    std::vector<double> rtt;
    rtt.reserve(smsg_iters);
    for (uint64_t i = 0; i < smsg_warm + smsg_iters; ++i) {
      if (id == 0) {
        const double t0 = now_s();
        send_one(8, kTagData, uint32_t(i));
        (void)recv_one();
        if (i >= smsg_warm) rtt.push_back(now_s() - t0);
      } else {
        (void)recv_one();
        send_one(8, kTagData, uint32_t(i));
      }
    }
    double smsg_rtt = 0;
    if (id == 0) {
      smsg_rtt = pct(rtt, 0.5) * 1e6;
      report("rdv_smsg_rtt", 8, smsg_rtt, "us");
      report("rdv_smsg_p99", 8, pct(rtt, 0.99) * 1e6, "us");
    }

    if (id == 1) {
      CHECK_GNI(GNI_CqCreate(nic, 64, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &rdv_cq));
      rdv_dst = static_cast<char*>(std::aligned_alloc(4096, (max_len + 4095) & ~uint64_t{4095}));
      if (!rdv_dst) die("out of memory");
      std::memset(rdv_dst, 0, max_len);
      CHECK_GNI(GNI_MemRegister(nic, uint64_t(rdv_dst), max_len, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &rdv_dst_h));
    } else if (modes.back() == 1) {
      udreg_cache_attr_t a{};
      std::snprintf(a.cache_name, sizeof a.cache_name, "gni_bench_rdv_%d", int(getpid()));
      a.max_entries = 64;
      // What an MPI's rendezvous cache does: entries stay registered after their last
      // reference (lazy), so a buffer sent again is a hit.
      a.modes = UDREG_CC_MODE_USE_KERNEL_CACHE | UDREG_CC_MODE_USE_LAZY_DEREG;
      a.reg_context = nic;
      a.dreg_context = nic;
      a.device_reg_func = udreg_reg;
      a.device_dereg_func = udreg_dereg;
      if (UDREG_CacheCreate(&a) != UDREG_RC_SUCCESS) die("rdv_lat: UDREG_CacheCreate failed");
      if (UDREG_CacheAccess(a.cache_name, &rdv_cache) != UDREG_RC_SUCCESS) die("rdv_lat: UDREG_CacheAccess failed");
    }
    barrier(id);

    for (uint64_t len : opt.sizes) {
      // Rank 0's buffer: its own pages (mmap), touched, so registration pins resident memory.
      const uint64_t map_len = (len + 4095) & ~uint64_t{4095};
      char* b = nullptr;
      if (id == 0) {
        b = static_cast<char*>(mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (b == MAP_FAILED) die("rdv_lat: mmap failed");
      }
      for (int mode : modes) {
        if (id == 0)
          for (uint64_t k = 0; k < len; ++k) b[k] = char(pattern(len, k));
        barrier(id);
        std::vector<double> t;
        t.reserve(iters);
        uint64_t checked = 0;
        for (uint64_t i = 0; i < warm + iters; ++i) {
          const bool verify = i % 64 == 0 || i + 1 == warm + iters;
          if (id == 1) {
            rdv_serve(mode, verify);
            continue;
          }
          const uint64_t st = stamp_of(len, mode, i);
          std::memcpy(b, &st, 8);
          std::memcpy(b + len - 8, &st, 8);
          const double t0 = now_s();
          const Fin fin = rdv_round(mode, b, len, i);
          const double dt = now_s() - t0;
          if (fin.bad) die("rdv_lat: the GET read other bytes than the sender's (first/last 8)");
          checked += fin.checked;
          if (i >= warm) t.push_back(dt);
        }
        // One untimed GET of the whole buffer, every byte compared.
        if (id == 0) {
          for (uint64_t k = 0; k < len; ++k) b[k] = char(pattern(len, k));
          const Fin fin = rdv_round(mode, b, len, kFullCheck);
          if (!fin.checked || fin.bad) die("rdv_lat: the full-buffer GET read other bytes than the sender's");
          ++checked;
          const char* name = mode == 0 ? "rdv_lat" : "rdv_udreg_lat";
          const double med = pct(t, 0.5) * 1e6;
          report(name, len, med, "us");
          report(mode == 0 ? "rdv_p99" : "rdv_udreg_p99", len, pct(t, 0.99) * 1e6, "us");
          report(mode == 0 ? "rdv_ratio" : "rdv_udreg_ratio", len, med / smsg_rtt, "x_smsg_rtt");
          report(mode == 0 ? "rdv_checked" : "rdv_udreg_checked", len, double(checked), "gets");
        } else {
          rdv_serve(mode, true);
        }
        barrier(id);
      }
      if (id == 0) {
        // Drop the cached registration before the pages go (not left to the invalidation).
        if (rdv_cache)
          while (UDREG_Evict(rdv_cache) == UDREG_RC_SUCCESS) {
          }
        munmap(b, map_len);
      }
    }

    if (id == 1) {
      CHECK_GNI(GNI_MemDeregister(nic, &rdv_dst_h));
      std::free(rdv_dst);
      CHECK_GNI(GNI_CqDestroy(rdv_cq));
    } else if (rdv_cache) {
      UDREG_CacheRelease(rdv_cache);
      UDREG_CacheDestroy(rdv_cache);
    }
    drain_local();
    barrier(id);
  }
};

int run_rank(int id, uint8_t ptag, uint32_t cookie) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(opt.cpu[id], &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::fprintf(stderr, "gni_bench: rank %d: cannot pin to CPU %d: %s\n", id, opt.cpu[id], std::strerror(errno));
    return 2;
  }
  Rank r;
  r.id = id;
  r.setup(ptag, cookie);
  auto want = [](const char* t) { return opt.test == "all" || opt.test == t; };
  if (want("smsg_lat")) r.smsg_lat();
  if (want("smsg_bw")) r.smsg_bw();
  if (want("smsg_am_lat")) r.smsg_am_lat();
  if (want("smsg_am_bw")) r.smsg_am_bw();
  if (opt.test == "smsg_calls") r.smsg_calls();
  if (opt.test == "rdv_lat") r.rdv_lat();
  if (want("fma_put_lat")) r.fma_lat(true);
  if (want("fma_get_lat")) r.fma_lat(false);
  if (opt.test == "rdma_put_lat") r.fma_lat(true, true);
  if (opt.test == "rdma_get_lat") r.fma_lat(false, true);
  if (want("rdma_put_bw")) r.rdma_put_bw();
  if (want("msgq_lat") || want("msgq_bw")) {
    r.msgq_setup();
    if (want("msgq_lat")) r.msgq_lat();
    if (want("msgq_bw")) r.msgq_bw();
    barrier(id);
    CHECK_GNI(GNI_MsgqRelease(r.msgq));
  }
  barrier(id);
  // Leave the domain cleanly: endpoints, registrations, CQs, CDM.
  GNI_EpUnbind(r.ep);
  GNI_EpDestroy(r.ep);
  GNI_MemDeregister(r.nic, &r.buf_h);
  GNI_MemDeregister(r.nic, &r.big_h);
  GNI_MemDeregister(r.nic, &r.mbox_h);
  GNI_CqDestroy(r.cq);
  GNI_CqDestroy(r.rcq);
  GNI_CdmDestroy(r.cdm);
  std::fflush(stdout);
  return 0;
}

// ---- parent ------------------------------------------------------------------------------


bool issue_credential(const std::string& sock, uint8_t& ptag, uint32_t& cookie) {
  nicemu::abi::ctl::Cred req{};
  req.h.op = uint16_t(nicemu::abi::ctl::Op::kCredIssue);
  req.uid = getuid();
  nicemu::abi::ctl::CredReply rep{};
  nicemu::ctl::Connection c;
  if (!c.connect(sock) || !c.call(req, rep) || rep.r.rc != 0) return false;
  ptag = uint8_t(rep.ptag);
  cookie = rep.cookie;
  return true;
}

bool grant_credential(const std::string& sock, uint8_t ptag, uint32_t cookie) {
  nicemu::abi::ctl::Cred req{};
  req.h.op = uint16_t(nicemu::abi::ctl::Op::kCredGrant);
  req.uid = getuid();
  req.ptag = ptag;
  req.cookie = cookie;
  nicemu::abi::ctl::CredReply rep{};
  nicemu::ctl::Connection c;
  return c.connect(sock) && c.call(req, rep) && rep.r.rc == 0;
}

bool parse_cpus(const std::string& s) {
  int a = -1, b = -1;
  char tail;
  if (std::sscanf(s.c_str(), "%d,%d%c", &a, &b, &tail) != 2 || a < 0 || b < 0 || a >= CPU_SETSIZE ||
      b >= CPU_SETSIZE)
    return false;
  opt.cpu[0] = a;
  opt.cpu[1] = b;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gni_bench: uGNI SMSG latency / message rate, FMA PUT/GET latency and RDMA PUT bandwidth between two ranks "
               "on one nicemu node, each pinned to its own CPU"};
  app.add_option("--test", opt.test,
                 "smsg_lat | smsg_bw | smsg_am_lat | smsg_am_bw | fma_put_lat | fma_get_lat | rdma_put_bw | msgq_lat | "
                 "msgq_bw | all (all of these) | smsg_calls, rdv_lat, rdma_put_lat, rdma_get_lat (only alone)")
      ->check(CLI::IsMember({"smsg_lat", "smsg_bw", "smsg_am_lat", "smsg_am_bw", "fma_put_lat", "fma_get_lat",
                             "rdma_put_bw", "msgq_lat", "msgq_bw", "all", "smsg_calls", "rdv_lat", "rdma_put_lat",
                             "rdma_get_lat"}));
  app.add_option("--iters", opt.iters,
                 "timed iterations (default: smsg_lat/smsg_am_lat 200000, smsg_bw/smsg_am_bw 2000000, smsg_calls 1000000, "
                 "fma 50000 per size, rdv_lat 2000 per size and registration mode)");
  app.add_option("--warmup", opt.warmup,
                 "untimed iterations first (default: smsg_lat 20000, smsg_bw 100000, fma 2000 per size, rdv_lat 200)");
  auto* size_opt = app.add_option("--size", opt.size,
                                  "SMSG payload bytes (default 8); if given, also the only FMA size "
                                  "(default: 8, 16, ... 4096)");
  app.add_option("--window", opt.window,
                 "SMSG mailbox credits (the smsg_bw window) and MSGQ ring slots (msgq_bw) (default 64)")
      ->check(CLI::Range(1u, 65535u));
  app.add_option("--sizes", opt.sizes,
                 "rdv_lat buffer sizes in bytes, multiples of 4 from 16 (default 100 4096 65536 1048576 4194304)")
      ->check(CLI::Range(uint64_t{16}, uint64_t{1} << 30));
  app.add_option("--rdv-reg", opt.rdv_reg,
                 "rdv_lat registration: direct (GNI_MemRegister/Deregister per send), udreg (a lazy uDREG cache), "
                 "both (default)")
      ->check(CLI::IsMember({"direct", "udreg", "both"}));
  app.add_flag("--csv", opt.csv, "one line per result: test,size,value,unit");
  app.add_option("--socket", opt.socket,
                 "control socket of the nicemu daemon (default: $NICEMU_SOCKET, else node $NICEMU_NODE in "
                 "$NICEMU_RUNDIR)");
  app.add_option("--peer-socket", opt.peer_socket,
                 "control socket of another nicemu daemon of this host: rank 1 runs on that emulated node "
                 "(default: both ranks on --socket's node)");
  app.add_option("--cpus", opt.cpus, "CPUs of rank 0 and rank 1, e.g. 0,1 (sched_setaffinity)");
  app.add_option("--timeout", opt.timeout_s, "seconds before the run is abandoned (default 600)");
  CLI11_PARSE(app, argc, argv);
  opt.size_given = size_opt->count() > 0;
  if (!parse_cpus(opt.cpus)) {
    std::fprintf(stderr, "gni_bench: --cpus wants two CPU numbers, e.g. 0,1\n");
    return 2;
  }
  for (uint64_t s : opt.sizes)
    if (s % 4) {
      std::fprintf(stderr, "gni_bench: --sizes: %llu is not a multiple of 4 (RDMA GET lengths are)\n",
                   static_cast<unsigned long long>(s));
      return 2;
    }
  if (opt.sizes.empty()) {
    std::fprintf(stderr, "gni_bench: --sizes is empty\n");
    return 2;
  }
  if (opt.size == 0 || opt.size > GNI_SMSG_MAX_SIZE) {
    std::fprintf(stderr, "gni_bench: --size must be 1..%d\n", GNI_SMSG_MAX_SIZE);
    return 2;
  }

  std::string sock = resolve_socket(opt.socket);
  if (sock.empty()) {
    std::fprintf(stderr, "gni_bench: no nicemu daemon: give --socket or set NICEMU_RUNDIR/NICEMU_NODE\n");
    return 2;
  }
  uint8_t ptag = 0;
  uint32_t cookie = 0;
  if (!issue_credential(sock, ptag, cookie)) {
    std::fprintf(stderr, "gni_bench: cannot obtain a credential from %s\n", sock.c_str());
    return 2;
  }
  if (!opt.peer_socket.empty() && !grant_credential(opt.peer_socket, ptag, cookie)) {
    std::fprintf(stderr, "gni_bench: the daemon at %s refused the job credential\n", opt.peer_socket.c_str());
    return 2;
  }
  setenv("NICEMU_SOCKET", sock.c_str(), 1);  // libugni in the ranks attaches to this daemon

  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, oob_fd) != 0) {
    std::perror("gni_bench: socketpair");
    return 2;
  }
  if (!opt.csv) {
    std::printf("# gni_bench: daemon %s, ranks pinned to CPUs %d and %d, SMSG window %u\n", sock.c_str(),
                opt.cpu[0], opt.cpu[1], opt.window);
    std::printf("%-17s %8s %14s  %s\n", "test", "size", "value", "unit");
  }
  std::fflush(stdout);

  // The parent sleeps in sigtimedwait: SIGCHLD, or a signal to stop, or the timeout.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, &old);

  pid_t parent = getpid();
  pid_t kids[2] = {-1, -1};
  for (int id = 0; id < 2; ++id) {
    pid_t p = fork();
    if (p < 0) {
      std::perror("gni_bench: fork");
      if (kids[0] > 0) kill(kids[0], SIGKILL);
      return 2;
    }
    if (p == 0) {
      sigprocmask(SIG_SETMASK, &old, nullptr);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(2);
      ::close(oob_fd[1 - id]);
      if (id == 1 && !opt.peer_socket.empty()) setenv("NICEMU_SOCKET", opt.peer_socket.c_str(), 1);
      int rc = 2;
      try {
        rc = run_rank(id, ptag, cookie);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gni_bench: rank %d: %s\n", id, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    kids[id] = p;
  }
  ::close(oob_fd[0]);
  ::close(oob_fd[1]);

  auto kill_all = [&] {
    for (pid_t& k : kids)
      if (k > 0) {
        kill(k, SIGKILL);
        waitpid(k, nullptr, 0);
        k = -1;
      }
  };
  int result = 0;
  const double deadline = now_s() + opt.timeout_s;
  while (kids[0] > 0 || kids[1] > 0) {
    double left = deadline - now_s();
    if (left <= 0) {
      std::fprintf(stderr, "gni_bench: timeout after %u s\n", opt.timeout_s);
      kill_all();
      return 3;
    }
    timespec ts{time_t(left), long((left - double(time_t(left))) * 1e9)};
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      kill_all();
      return 128 + sig;
    }
    for (int id = 0; id < 2; ++id) {
      if (kids[id] <= 0) continue;
      int st = 0;
      if (waitpid(kids[id], &st, WNOHANG) != kids[id]) continue;
      kids[id] = -1;
      int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (code != 0) {
        std::fprintf(stderr, "gni_bench: rank %d failed (%d)\n", id, code);
        result = code;
        kill_all();  // the other rank would wait for its peer forever
      }
    }
  }
  return result;
}
