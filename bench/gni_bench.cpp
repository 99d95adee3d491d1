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
//                call (tools/bench-profile); ns per round is reported too.
//
// The program forks the two ranks itself; they exchange addresses, SMSG attributes and
// memory handles over a socketpair (what PMI does in applications). Each rank pins itself
// to its own CPU (--cpus, sched_setaffinity) and busy-polls only on that CPU; the parent
// sleeps in sigtimedwait and the daemon is idle (same-host SMSG/FMA run in the library),
// so no third process competes for the two cores of a small machine.
//
// The job credential comes from the daemon (control op kCredIssue), as from ALPS on a
// Cray; the daemon is --socket, else $NICEMU_SOCKET, else node $NICEMU_NODE in
// $NICEMU_RUNDIR (else the first daemon found there).
#include <sched.h>
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
  std::string cpus = "0,1";
  int cpu[2] = {0, 1};
  unsigned timeout_s = 600;
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
    std::printf("%-12s %8llu %14.0f  %s\n", test, static_cast<unsigned long long>(size), value, unit);
  else
    std::printf("%-12s %8llu %14.3f  %s\n", test, static_cast<unsigned long long>(size), value, unit);
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
  // Returns its tag.
  uint8_t recv_one() {
    for (;;) {
      if (!events_taken)
        while (!take_remote_event()) drain_local();
      events_taken = false;
      void* msg = nullptr;
      uint8_t tag = GNI_SMSG_ANY_TAG;
      gni_return_t rc = GNI_SmsgGetNextWTag(ep, &msg, &tag);
      if (rc == GNI_RC_SUCCESS) {
        CHECK_GNI(GNI_SmsgRelease(ep));
        return tag;
      }
      if (rc != GNI_RC_NOT_DONE) die("GNI_SmsgGetNextWTag failed");
    }
  }

  // Out of credits: reap local completions and remote events (credits come back as an
  // SMSG event, which a real progress engine takes from its receive CQ) and try again.
  void send_one(uint32_t len, uint8_t tag, uint32_t msg_id) {
    gni_return_t rc;
    while ((rc = GNI_SmsgSendWTag(ep, src, len, nullptr, 0, msg_id, tag)) == GNI_RC_NOT_DONE) {
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

  // (c) FMA PUT or GET latency per size; rank 1 sleeps in the barrier meanwhile.
  void fma_lat(bool put) {
    const uint64_t iters = opt.iters ? opt.iters : 50000;
    const uint64_t warm = opt.warmup >= 0 ? uint64_t(opt.warmup) : 2000;
    barrier(id);
    if (id == 0) {
      drain_local();
      std::vector<uint32_t> sizes;
      if (opt.size_given) {
        if (opt.size > kFmaMax || (!put && (opt.size & 3))) die("FMA size must be <= 4096 (GET: a multiple of 4)");
        sizes.push_back(opt.size);
      } else {
        for (uint32_t s = 8; s <= kFmaMax; s *= 2) sizes.push_back(s);
      }
      for (uint32_t len : sizes) {
        gni_post_descriptor_t d{};
        d.type = put ? GNI_POST_FMA_PUT : GNI_POST_FMA_GET;
        d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
        d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
        d.local_addr = put ? uint64_t(src) : uint64_t(buf);
        d.local_mem_hndl = buf_h;
        d.remote_addr = peer.buf;
        d.remote_mem_hndl = peer.buf_h;
        d.length = len;
        double t0 = 0;
        for (uint64_t i = 0; i < warm + iters; ++i) {
          if (i == warm) t0 = now_s();
          CHECK_GNI(GNI_PostFma(ep, &d));
          gni_cq_entry_t e;
          gni_return_t rc;
          while ((rc = GNI_CqGetEvent(cq, &e)) == GNI_RC_NOT_DONE) {
          }
          if (rc != GNI_RC_SUCCESS) die("FMA completion error");
          gni_post_descriptor_t* out = nullptr;
          CHECK_GNI(GNI_GetCompleted(cq, e, &out));
          if (out != &d) die("GNI_GetCompleted returned another descriptor");
        }
        report(put ? "fma_put_lat" : "fma_get_lat", len, (now_s() - t0) / double(iters) * 1e6, "us");
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
  if (want("fma_put_lat")) r.fma_lat(true);
  if (want("fma_get_lat")) r.fma_lat(false);
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
                 "msgq_bw | all (all of these) | smsg_calls (only alone)")
      ->check(CLI::IsMember({"smsg_lat", "smsg_bw", "smsg_am_lat", "smsg_am_bw", "fma_put_lat", "fma_get_lat",
                             "rdma_put_bw", "msgq_lat", "msgq_bw", "all", "smsg_calls"}));
  app.add_option("--iters", opt.iters,
                 "timed iterations (default: smsg_lat/smsg_am_lat 200000, smsg_bw/smsg_am_bw 2000000, smsg_calls 1000000, "
                 "fma 50000 per size)");
  app.add_option("--warmup", opt.warmup, "untimed iterations first (default: smsg_lat 20000, smsg_bw 100000, fma 2000 per size)");
  auto* size_opt = app.add_option("--size", opt.size,
                                  "SMSG payload bytes (default 8); if given, also the only FMA size "
                                  "(default: 8, 16, ... 4096)");
  app.add_option("--window", opt.window,
                 "SMSG mailbox credits (the smsg_bw window) and MSGQ ring slots (msgq_bw) (default 64)")
      ->check(CLI::Range(1u, 65535u));
  app.add_flag("--csv", opt.csv, "one line per result: test,size,value,unit");
  app.add_option("--socket", opt.socket,
                 "control socket of the nicemu daemon (default: $NICEMU_SOCKET, else node $NICEMU_NODE in "
                 "$NICEMU_RUNDIR)");
  app.add_option("--cpus", opt.cpus, "CPUs of rank 0 and rank 1, e.g. 0,1 (sched_setaffinity)");
  app.add_option("--timeout", opt.timeout_s, "seconds before the run is abandoned (default 600)");
  CLI11_PARSE(app, argc, argv);
  opt.size_given = size_opt->count() > 0;
  if (!parse_cpus(opt.cpus)) {
    std::fprintf(stderr, "gni_bench: --cpus wants two CPU numbers, e.g. 0,1\n");
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
  setenv("NICEMU_SOCKET", sock.c_str(), 1);  // libugni in the ranks attaches to this daemon

  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, oob_fd) != 0) {
    std::perror("gni_bench: socketpair");
    return 2;
  }
  if (!opt.csv) {
    std::printf("# gni_bench: daemon %s, ranks pinned to CPUs %d and %d, SMSG window %u\n", sock.c_str(),
                opt.cpu[0], opt.cpu[1], opt.window);
    std::printf("%-12s %8s %14s  %s\n", "test", "size", "value", "unit");
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
