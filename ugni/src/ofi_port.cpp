// The ofi fabric's data plane in the library (ofi_port.h says what and why).
#include "ofi_port.h"

#include "internal.h"
#include "ofi_order.h"

#ifndef NICEMU_HAVE_OFI

#include <cstdio>

namespace nicemu::ugni {
struct OfiPort {};
void ofi_open(Nic* n, const abi::ctl::AttachReply& rep) {
  if (rep.fabric_data != abi::ctl::kFabricDataOfi) return;
  static bool said = false;
  if (!said)
    std::fprintf(stderr,
                 "libugni(nicemu): the daemon runs the ofi fabric, but this libugni was built without libfabric: "
                 "posts to other hosts go through the daemons (docs/fabric.md)\n");
  said = true;
  (void)n;
}
void ofi_close(Nic*) {}
void ofi_register(Nic*, const gni_mem_handle_t&, bool) {}
void ofi_deregister(Nic*, const gni_mem_handle_t&) {}
OfiTaken ofi_post(Ep*, Cq*, const gni_post_descriptor_t*, uint16_t, uint16_t, int32_t) { return OfiTaken::kNo; }
struct OfiChain {};
bool ofi_chain_takes(Ep*, const gni_post_descriptor_t*, uint16_t) { return false; }
OfiChain* ofi_chain_open(Nic*, Cq*, const gni_post_descriptor_t*, uint32_t, int32_t) { return nullptr; }
void ofi_chain_post(OfiChain*, Ep*, const gni_post_descriptor_t*, uint16_t, uint32_t) {}
void ofi_chain_close(OfiChain*, uint32_t, uint64_t) {}
bool ofi_nic_down(Nic*) { return false; }
bool ofi_msgs(Nic*, size_t) { return false; }
bool ofi_peer(Nic*, uint32_t, uint32_t, uint64_t&) { return false; }
bool ofi_insert(Nic*, const uint8_t*, uint32_t, uint64_t&) { return false; }
void ofi_forget_peer(Nic*, uint32_t, uint32_t) {}
int ofi_ask_route(Nic*, uint32_t, uint32_t, std::string&) { return -1; }
std::string ofi_peer_name(Nic*, uint64_t) { return {}; }
uint32_t ofi_self_name(Nic*, uint8_t*) { return 0; }
uint64_t ofi_send(Nic*, uint64_t, const void*, size_t, OfiSendCtx*, bool) { return abi::cqe::kErrTransient; }
void ofi_poll(Nic*, bool) {}
void ofi_idle(Nic*) {}
bool ofi_wait(Nic*, uint64_t) { return false; }
OfiOrder* ofi_order(Nic*) { return nullptr; }
}  // namespace nicemu::ugni

#else

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "amo_lock.h"
#include "cancel_point.h"
#include "fault_engine.h"
#include "nic_dma.h"
#include "nicemu/fault/fault_page.h"
#include "fma_requester.h"
#include "ofi_peer_check.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/ofi_msg.h"
#include "nicemu/abi/ofi_smsg.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/amo/amo_alu.h"
#include "nicemu/abi/futex.h"
#include "nicemu/common/params.h"
#include "nicemu/abi/remote_ops.h"
#include "smsg_ofi.h"
#include "msgq_ofi.h"
#include "nicemu/abi/ofi_msgq.h"

namespace nicemu::ugni {

namespace cqe = nicemu::abi::cqe;
namespace rop = nicemu::abi::remote;
namespace msg = nicemu::abi::ofimsg;

namespace {

using nicemu::fault::monotonic_ns;

// libfabric's exported functions, found at run time (the rest of its API is inline calls
// through the objects' operation tables). libugni does not link libfabric: libfabric's own
// gni provider links libugni, and a libugni that needed libfabric.so.1 would pull a second
// libfabric into that provider's processes (and fail to link where the two disagree on
// symbol versions). Loaded only when a daemon says ofi; in a process that already has a
// libfabric, dlopen returns that one.
struct OfiLib {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**) = nullptr;
  void (*freeinfo)(fi_info*) = nullptr;
  fi_info* (*dupinfo)(const fi_info*) = nullptr;
  int (*fabric)(fi_fabric_attr*, fid_fabric**, void*) = nullptr;
  const char* (*strerror)(int) = nullptr;
  uint32_t (*version)() = nullptr;
  std::string error;  // why it could not be loaded; empty when loaded
};

template <class F>
bool find(void* h, const char* name, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  if (!fn && error.empty()) error = std::string("libfabric.so.1 has no ") + name;
  return fn != nullptr;
}

const OfiLib& ofi_lib() {
  static const OfiLib lib = [] {
    OfiLib l;
    // ofi_rxm over tcp defaults to a shared receive context that pre-posts 4096 bounce buffers
    // of 16 KiB per endpoint at fi_enable: 64 MiB written per CDM, a quarter second or more per
    // GNI_CdmAttach (Open MPI and UCX attach several CDMs per rank). 256 of them keep the
    // shared context, whose small RMA round trips are half those without it (per-connection
    // receives). Read when libfabric initialises its providers (its first fi_getinfo), so set
    // before; a value in the environment wins, and a process whose libfabric is already
    // initialised keeps what it has.
    setenv("FI_OFI_RXM_MSG_RX_SIZE", "256", 0);
    void* h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      l.error = std::string("cannot load libfabric.so.1 (Debian libfabric1): ") + (e ? e : "?");
      return l;
    }
    find(h, "fi_getinfo", l.getinfo, l.error);
    find(h, "fi_freeinfo", l.freeinfo, l.error);
    find(h, "fi_dupinfo", l.dupinfo, l.error);
    find(h, "fi_fabric", l.fabric, l.error);
    find(h, "fi_strerror", l.strerror, l.error);
    find(h, "fi_version", l.version, l.error);
    return l;  // the handle stays open for the process's life: providers keep state in it
  }();
  return lib;
}

const char* ofi_strerror(int rc) { return ofi_lib().strerror ? ofi_lib().strerror(rc) : "?"; }

void say(const char* what, int rc) {
  std::fprintf(stderr, "libugni(nicemu): ofi fabric: %s%s%s; this CDM's posts to other hosts go through the daemons\n",
               what, rc ? ": " : "", rc ? ofi_strerror(-rc) : "");
}

struct OfiOp;
}  // namespace

// A chain's members in flight rank to rank (ofi_port.h): one local event for all of them.
struct OfiChain {
  std::atomic<uint32_t> left{1};  // members in flight, and the poster's hold until closed
  std::mutex mu;
  uint32_t fail_index = rop::kNoChainFailure;
  uint64_t fail_status = cqe::kOk;
  Cq* cq = nullptr;
  uint16_t cq_mode = 0;
  uint32_t local_event = 0;
  int32_t tid = -1;
  // A member (or the same-host ones, at close) is done: the chain's event once all are.
  void done(uint32_t index, uint64_t st) {
    if (st != cqe::kOk) {
      std::lock_guard<std::mutex> lk(mu);
      if (fail_index == rop::kNoChainFailure || index < fail_index) fail_index = index, fail_status = st;
    }
    if (left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    complete_fma(cq, cq_mode, local_event, fail_status, tid);
    delete this;
  }
};

namespace {
// The context of one provider operation: the provider hands it back as op_context. `kind`
// says what it belongs to: a part of a post, a receive buffer, a reply we send.
enum class CtxKind : uint8_t { kPart, kRecv, kReply, kSmsg };
struct OfiCtx {
  fi_context2 ctx;  // first
  OfiOp* op = nullptr;
  CtxKind kind = CtxKind::kPart;
};
// An SMSG frame's send (smsg_ofi.cpp) is read as an OfiCtx up to its kind.
static_assert(sizeof(fi_context2) == sizeof(OfiSendCtx::provider) && offsetof(OfiCtx, op) == offsetof(OfiSendCtx, unused) &&
              offsetof(OfiCtx, kind) == offsetof(OfiSendCtx, kind));

// FI_MR_LOCAL: registered buffers of the port for small sends (requests, replies, sync
// flags, SMSG and MSGQ frames), registered once at open; a send copies its bytes into a slot
// rather than registering them (a registration costs a system call on verbs).
struct OfiPool {
  static constexpr size_t kSlot = 2048;
  static constexpr uint32_t kSlots = 512;
  std::unique_ptr<uint8_t[]> mem;
  fid_mr* mr = nullptr;
  void* desc = nullptr;
  std::mutex mu;
  std::vector<uint32_t> free;  // under mu
  uint8_t* at(uint32_t s) const { return mem.get() + size_t{s} * kSlot; }
};

// What covers the local buffer of one provider operation while it runs (FI_MR_LOCAL): a GNI
// registration of ours (its descriptor only), a pool slot, or the buffer registered for it.
// `at`: the buffer the provider reads or writes (the slot, or the buffer itself).
struct Lent {
  fid_mr* own = nullptr;
  OfiPool* pool = nullptr;
  uint32_t slot = 0;
  void* desc = nullptr;
  const void* at = nullptr;
  bool covered = false;
  Lent() = default;
  Lent(const Lent&) = delete;
  Lent& operator=(const Lent&) = delete;
  ~Lent() { release(); }
  void release() {
    if (own) fi_close(&own->fid);
    if (pool) {
      std::lock_guard<std::mutex> lk(pool->mu);
      pool->free.push_back(slot);
    }
    own = nullptr, pool = nullptr, desc = nullptr, at = nullptr, covered = false;
  }
};

// A posted receive buffer for peers' messages (nicemu/abi/ofi_msg.h), re-posted when handled.
// Large enough for an SMSG frame too (smsg_ofi.h).
struct OfiRecv {
  OfiCtx c;
  fid_mr* mr = nullptr;  // FI_MR_LOCAL: registered at open, closed at teardown
  void* desc = nullptr;
  alignas(8) uint8_t buf[std::max(msg::kMaxMessage, abi::ofismsg::kMaxFrame)];
};
// A reply of ours in flight: the provider reads it until its send completes.
struct OfiReply {
  OfiCtx c;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  msg::Reply r{};
  Lent lent;  // FI_MR_LOCAL: a pool slot holding a copy of r
};

// How long an initiator waits for the reply to a message (its target's progress thread
// executes it at once; an AMO lock waits at most amo::kDaemonLockWaitNs): then the post
// completes TRANSIENT, as the daemons' path reports a lost peer.
constexpr uint64_t kReplyTimeoutNs = 5'000'000'000ull;
// Endpoints a port opens beside its own for targets whose posts timed out (OfiPort::renew).
constexpr size_t kMaxFreshEps = 64;

// One post in flight: what its completion must produce. A PUT with a sync flag is two
// provider writes (data, then flag): its events come when both are done. A post done by a
// message (an AMO, a CQ write) is its send and the reply; a GET with a remote event is the
// read, then the event's message and its reply.
struct OfiOp {
  OfiCtx part[2];
  std::atomic<int> parts{1};
  std::atomic<uint64_t> status{0};  // the first error of its parts
  Cq* cq = nullptr;
  uint16_t cq_mode = 0;
  bool bte = false;
  uint32_t local_event = 0;
  int32_t tid = -1;
  uint64_t flag = 0;  // a sync flag's value: the provider reads it until completion
  // A sync flag on a provider without ordered writes: written by the driving thread once
  // the data's write completed (delivery complete: the data is at the target).
  bool flag_after = false, flag_event = false;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  uint64_t flag_addr = 0, key = 0, data = 0;
  // A message to send (msg_kind != 0), now (AMO, CQ write) or once the read is in (event_after).
  bool event_after = false;
  uint16_t msg_kind = 0;
  uint8_t fetch_size = 0;  // a fetching AMO: bytes of the fetched value to store at fetch_va
  uint64_t fetch_va = 0;
  msg::Request req{};
  // The target CDM, (node << 32) | route: a post failing TRANSIENT is judged by whether it
  // lives (PeerCheck) before its events, once (`judged`).
  uint64_t peer = 0;
  bool judged = false;
  // A chain's member: done into the chain, no events of its own.
  OfiChain* chain = nullptr;
  uint32_t chain_index = 0;
  // The port's list of posts in flight (OfiPort::live): at NIC down each gets its error
  // event at once (`reported`), and its completion by the provider later posts nothing.
  OfiOp* live_prev = nullptr;
  OfiOp* live_next = nullptr;
  bool reported = false;  // under live_mu
  // In flight towards its peer until complete (ofi_order.h): later posts it may not be
  // passed by are held until then.
  OfiOrderTicket order;
  // What issuing it needs (OfiPort::issue): post_impl fills it in, and it is issued then or,
  // held by the order, by whichever thread completes what it waited for.
  uint8_t how = 0;  // kHowMsg, kHowRead, kHowWrite
  bool sync = false, data_event = false;
  uint64_t local = 0, length = 0, raddr = 0;
  uint64_t refused_at = 0;  // a held post: when the provider first had no room for it
  uint64_t posted_at = 0;  // with OfiPort::post_timeout only
  fid_ep* via = nullptr;   // the endpoint it was issued on (OfiPort::ep_to): its flag and event message too
  Lent lent[2];  // FI_MR_LOCAL: what covers part[i]'s local buffer
  // FI_MR_PROV_KEY: the target's key of the remote handle rq1/rq2 (OfiPort::key_for). key_wait
  // 0: `key` is known; 1: asked, held until the answer; 2: the question failed with key_status.
  // Written under OfiPort::mu (key, key_status before key_wait).
  std::atomic<uint8_t> key_wait{0};
  bool keyed = false;    // `key` is an answer: forgotten if the post fails (a stale registration)
  bool key_ask = false;  // the question itself: no events, it answers the posts waiting (key_answered)
  uint64_t key_status = 0;
  uint64_t answer = 0;   // key_ask: the key the target told
  uint64_t rq1 = 0, rq2 = 0;
  OfiOp() { part[0].op = part[1].op = this; }
};

constexpr uint8_t kHowMsg = 0, kHowRead = 1, kHowWrite = 2;

// Posts the order may hold per port (ofi_order.h): beyond, a post returns
// GNI_RC_ERROR_RESOURCE, as when its CDM is out of transaction ids. SMSG messages are
// bounded by their channels' credits instead.
constexpr uint32_t kMaxHeld = 16384;

// Held SMSG messages are told apart from posts (OfiOp) by the low bit of the item.
constexpr uintptr_t kSmsgItem = 1;

// Remote CQ data of a write asking for a remote event (the provider's cq_data_size must be
// 8): a tag, the engine, the target registration's slot and the initiating EP's event data,
// from which the target builds the same CQE the daemons' responder pushes.
constexpr uint64_t kCqDataTag = 0x6Eull << 56;
constexpr uint64_t kCqDataTagMask = 0xFFull << 56;
constexpr uint64_t kCqDataBte = 1ull << 48;
constexpr uint64_t cq_data(bool bte, uint32_t slot, uint32_t event) {
  return kCqDataTag | (bte ? kCqDataBte : 0) | (uint64_t{slot & (abi::mdh::kMaxSlots - 1)} << 32) | event;
}

// A peer CDM: its address in our AV, or none (the daemons' path) until retry_at.
struct OfiPeer {
  bool ok = false;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  uint64_t retry_at = 0;
};

// The CQE status of a failed completion: the provider's view of what went wrong.
uint64_t status_of_error(int err) {
  switch (err) {
    case FI_EKEYREJECTED:
    case FI_EACCES:
    case FI_EINVAL:
    case FI_EFAULT:
    case FI_ENOKEY:
      return cqe::kErrProtection;  // no registration of that key (deregistered, stale) or outside it
    default:
      // Recoverable: the client may repost. Connection errors too: tcp;ofi_rxm resets the
      // connection of a live peer on a key it does not know (and reconnects), and the
      // daemons' path reports a peer lost the same way.
      return cqe::kErrTransient;
  }
}

}  // namespace

struct OfiPort {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_ep* ep = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  bool virt_addr = false;
  bool mr_endpoint = false;  // FI_MR_ENDPOINT: a registration is bound to the EP and enabled
  bool waitable = false;  // the CQ has a wait object: the progress thread sleeps in fi_cq_sread
  bool cq_data = false;   // 8 bytes of remote CQ data: remote events go rank to rank
  bool waw = false;       // writes ordered (FI_ORDER_WAW): PUT_W_SYNCFLAG goes rank to rank
  bool msgs = false;      // FI_MSG: AMOs, GETs' remote events and CQ writes as messages (ofi_msg.h)
  // The provider may hold a post forever (udp;ofi_rxd: a key its target does not know, a
  // dead target): each post gets its events by post_timeout_ns at the latest (expire_posts): the setting
  // client_ofi_post_timeout_ms (NICEMU_OFI_POST_TIMEOUT_MS, 5 s), read at open.
  bool post_timeout = false;
  uint64_t post_timeout_ns = 0;
  // udp;ofi_rxd after a post timed out: the peer's window on our endpoint stays closed behind
  // the dropped packet (and the target's, for our address), so every later post to that
  // target would time out too. Posts to it go through a fresh endpoint of ours from then on
  // (a new address: fresh state on both sides). The old ones stay open (the provider may
  // still hold posts on them) until teardown. Under mu; any_fresh: the map is not empty.
  std::map<fi_addr_t, fid_ep*> fresh;
  std::vector<fid_ep*> retired;
  std::atomic<bool> any_fresh{false};
  uint64_t key_mask = ~0ull;
  // Memory modes (ofi_port.h): the provider's keys, asked of the target (prov_key); a
  // registration's descriptor on every local buffer (mr_local). Each the provider's demand,
  // or emulated (client_ofi_mr_mode): then our own keys are random per registration, so a
  // peer cannot compute them.
  bool prov_key = false, mr_local = false, emulated_key = false;
  uint64_t key_seed = 0;
  std::atomic<uint64_t> key_counter{0};
  uint64_t fresh_key() {
    return ofi_mix(key_seed ^ key_counter.fetch_add(1, std::memory_order_relaxed)) & key_mask;
  }
  // Keys peers told, per (AV address, handle), and the posts waiting for one asked: under mu.
  struct KeyEntry {
    bool known = false;
    uint64_t key = 0;
    std::vector<OfiOp*> waiters;
  };
  using KeyId = std::tuple<fi_addr_t, uint64_t, uint64_t>;
  static constexpr size_t kMaxKeys = 65536;  // beyond, the known ones are forgotten (asked again)
  std::map<KeyId, KeyEntry> keys;
  std::unique_ptr<OfiPool> pool;  // FI_MR_LOCAL
  std::atomic<bool> said_local{false};
  size_t max_msg = 0;
  std::mutex mu;  // peers, mrs
  std::map<uint64_t, OfiPeer> peers;     // (node << 32) | route
  struct Mr {
    fid_mr* mr;
    gni_mem_handle_t h;  // the registration's handle: its remote events' CQ (remote_event)
    uint64_t key = 0;    // what peers pass (fi_mr_key: told when asked, with provider keys)
    void* desc = nullptr;  // fi_mr_desc: for posts from or into it (FI_MR_LOCAL)
  };
  std::map<uint32_t, Mr> mrs;            // registration slot -> provider registration
  std::map<fi_addr_t, std::string> av_raw;  // peers' AV entries -> their addresses (a verdict compares)
  // Posts failing TRANSIENT towards a peer wait here for the verdict on it (PEER_GONE or
  // TRANSIENT); created at open, before the progress thread.
  std::unique_ptr<PeerCheck> check;
  // Order between RMA and messages to a peer (ofi_order.h); made at open, before posts.
  std::unique_ptr<OfiOrder> order;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> in_flight{0};
  std::thread progress;
  Nic* nic = nullptr;
  // Messages: our receive buffers, our own address (where replies come), the posts waiting
  // for a reply by id (and until when), and the driving thread's AV entries of repliers.
  std::vector<std::unique_ptr<OfiRecv>> recvs;
  uint8_t self_addr[abi::ctl::kOfiAddrMax] = {};
  uint32_t self_len = 0;
  // Posts waiting for a reply: a table of slots, reused (no allocation per post once it has
  // grown to the most ever in flight). A reply's id names its slot (low 24 bits) and a
  // sequence number, so a late reply to a slot used again since matches nothing.
  struct Pending {
    uint64_t id = 0;  // 0: free
    OfiOp* op = nullptr;
    uint64_t deadline = 0;
  };
  static constexpr uint64_t kSlotBits = 24;
  std::mutex pmu;  // pending, free_slots
  std::vector<Pending> pending;
  std::vector<uint32_t> free_slots;
  uint64_t next_seq = 1;  // under pmu
  std::map<std::string, fi_addr_t, std::less<>> reply_to;  // the driving thread only; found by string_view
  // Sends the driving thread must make once the provider has room (-FI_EAGAIN): a sync flag
  // or a GET's event message (op), or a reply.
  struct Deferred {
    OfiOp* op;
    OfiReply* reply;
  };
  std::vector<Deferred> deferred;  // the driving thread only
  // Who drives the provider (reads its CQ and dispatches, above: deferred, reply_to,
  // next_expiry): the progress thread, or an application thread polling an empty CQ
  // (ofi_poll), one at a time, in CQ order.
  std::mutex drive_mu;
  uint64_t next_expiry = 0;  // under drive_mu
  // The progress thread keeps away while an application thread polls: that thread reads
  // completions the moment they are there, where the progress thread would be woken for
  // them (a wake-up here costs tens of microseconds) and race it for them.
  // polled_at: the last inline poll, or the end of an application thread's sleep in the
  // provider (ofi_wait) (0: the thread went to sleep, ofi_idle); in_sread: a thread (the
  // progress thread, or one in ofi_wait) sleeps in fi_cq_sread holding drive_mu (a poller
  // wakes it once, kicked); backoff: the futex word the progress thread waits on while it
  // keeps away (1 while it waits).
  std::atomic<uint64_t> polled_at{0};
  std::atomic<bool> in_sread{false}, kicked{false};
  // Application threads waiting for drive_mu (poll_inline with wait): the progress thread
  // leaves it to them and does not go to sleep in fi_cq_sread meanwhile. Without this it
  // took the mutex again the moment it let go (a mutex is not fair), 100 ms of fi_cq_sread at
  // a time, and a waiting GNI_MsgqProgress(q, 0) took seconds on a loaded host.
  std::atomic<uint32_t> drive_waiters{0};
  std::atomic<uint32_t> backoff{0};
  std::atomic<bool> app_waiting{false};  // an application thread sleeps in the provider (ofi_wait)
  // Posts in flight, for NIC down (ofi_nic_down): our daemon died or shut down. Its posts
  // complete NIC_DOWN at once, as those our daemon held do; and as a target we stop: peers'
  // messages are answered PEER_GONE unexecuted, our provider registrations are closed.
  std::mutex live_mu;
  OfiOp* live = nullptr;          // under live_mu
  bool down_reported = false;     // under live_mu
  std::atomic<bool> down{false};  // NIC down seen by the port
  bool mrs_closed = false;        // the driving thread's (under drive_mu)

  uint64_t key_of(const gni_mem_handle_t& h) const { return ofi_key(h.qword1, h.qword2) & key_mask; }
  fid_ep* ep_to(fi_addr_t dest) {
    if (!any_fresh.load(std::memory_order_acquire)) return ep;
    std::lock_guard<std::mutex> lk(mu);
    auto it = fresh.find(dest);
    return it == fresh.end() ? ep : it->second;
  }
  void renew(fi_addr_t dest);
  int reg(void* buf, size_t len, uint64_t access, uint64_t key, fid_mr** out);
  const void* lend(Lent& l, const void* buf, size_t len, uint64_t access, bool copy);
  bool gni_desc(Lent& l, const gni_mem_handle_t& h, uint64_t va, uint64_t len);
  bool local_ok(const Lent& l);
  bool prepare_local(OfiOp* op);
  void give_back(OfiSendCtx* s);
  void key_for(OfiOp* op);
  void ask_key(fi_addr_t dest, uint64_t q1, uint64_t q2);
  void key_answered(OfiOp* a, uint64_t st);
  void unwait(OfiOp* op);
  void drop_key(OfiOp* op);
  void complete(OfiOp* op, uint64_t st);
  void complete_part(OfiOp* op, uint64_t st);
  OfiIssue issue(OfiOp* op, bool patient);
  OfiIssue issue_held(void* item, const OfiOrderTicket& t);
  void drop_held(void* item, uint64_t st);
  ssize_t write_flag(OfiOp* op);
  void remote_event(uint64_t data);
  ssize_t send_msg(OfiOp* op, OfiCtx& c);
  ssize_t send_deferred(const Deferred& d);
  void await_reply(OfiOp* op);
  bool take_pending(uint64_t id, OfiOp*& op);
  void fail_rest(OfiOp* op, int parts, uint64_t st);
  void link(OfiOp* op);
  bool unlink(OfiOp* op);
  bool nic_is_down();
  void forget(uint64_t peer, fi_addr_t dest);
  void close_mrs();
  void on_message(OfiRecv* r, size_t len);
  void smsg_done(OfiCtx* c, uint64_t st) {
    auto* s = reinterpret_cast<OfiSendCtx*>(c);
    give_back(s);
    s->done(nic, s, st);
    in_flight.fetch_sub(1, std::memory_order_release);
  }
  void on_reply(const msg::Reply& r);
  void serve(const msg::Request& q);
  uint64_t serve_amo(const msg::Request& q, uint64_t& fetched);
  void repost(OfiRecv* r);
  void expire(uint64_t now);
  void expire_posts(uint64_t now);
  void flush_deferred();
  bool progress_once(bool may_sleep, bool app = false);
  void lock_drive(std::unique_lock<std::mutex>& lk);
  void poll_inline(bool wait = false);
  bool wait_inline(uint64_t max_ns);
  void run();
  bool resolve(uint32_t node, uint32_t route, fi_addr_t& out);
  PeerAnswer ask_peer(uint64_t peer);
  void judge(uint64_t peer, const PeerAnswer& a, std::vector<void*>& ops);
  void teardown();
};

void OfiPort::complete_part(OfiOp* op, uint64_t st) {
  uint64_t none = cqe::kOk;
  if (st != cqe::kOk) op->status.compare_exchange_strong(none, st, std::memory_order_acq_rel);
  if (op->parts.fetch_sub(1, std::memory_order_acq_rel) == 1) complete(op, op->status.load(std::memory_order_acquire));
}

// A write with remote CQ data landed in our memory: the remote event the daemons' responder
// would push, into the CQ of the registration (none: no event, as there).
void OfiPort::remote_event(uint64_t data) {
  if ((data & kCqDataTagMask) != kCqDataTag) return;
  const uint32_t slot = static_cast<uint32_t>(data >> 32) & (abi::mdh::kMaxSlots - 1);
  gni_mem_handle_t h;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = mrs.find(slot);
    if (it == mrs.end()) return;
    h = it->second.h;
  }
  uint32_t dst = abi::kNoCq;
  if (abi::region_cq_write_target(nic->self->base, h.qword1, h.qword2, dst) != cqe::kOk) return;
  const uint64_t src = (data & kCqDataBte) ? cqe::kSrcRemoteDma : cqe::kSrcRemoteRequest;
  push_remote_event(*nic->self, dst, cqe::make(src, cqe::kTypePost, cqe::kOk, 0, 0, static_cast<uint32_t>(data)));
}

ssize_t OfiPort::write_flag(OfiOp* op) {
  // FI_MR_LOCAL: the flag's copy in a pool slot (prepare_local).
  const void* src = op->lent[1].at ? op->lent[1].at : &op->flag;
  void* desc = op->lent[1].desc;
  return op->flag_event ? fi_writedata(op->via, src, sizeof op->flag, desc, op->data, op->dest, op->flag_addr, op->key,
                                       &op->part[1].ctx)
                        : fi_write(op->via, src, sizeof op->flag, desc, op->dest, op->flag_addr, op->key,
                                   &op->part[1].ctx);
}

void OfiPort::link(OfiOp* op) {
  std::lock_guard<std::mutex> lk(live_mu);
  op->live_next = live;
  if (live) live->live_prev = op;
  live = op;
}

// Off the list; true if its events are still to come (not posted at NIC down).
bool OfiPort::unlink(OfiOp* op) {
  std::lock_guard<std::mutex> lk(live_mu);
  if (op->live_prev)
    op->live_prev->live_next = op->live_next;
  else if (live == op)
    live = op->live_next;
  if (op->live_next) op->live_next->live_prev = op->live_prev;
  op->live_prev = op->live_next = nullptr;
  return !op->reported;
}

// Our NIC is down: the daemon marked our region at shutdown, or the kernel did when it
// died (its lease), or a poll saw its socket hang up. Two loads.
bool OfiPort::nic_is_down() {
  return down.load(std::memory_order_relaxed) || nic->nic_down.load(std::memory_order_relaxed) ||
         nic->self->state() == abi::kRegionNicDown;
}

// The peer answered that the CDM at `dest` is gone: the next post looks its route up afresh
// (a CDM attached since, to a restarted daemon, may have the same one).
void OfiPort::forget(uint64_t peer, fi_addr_t dest) {
  std::lock_guard<std::mutex> lk(mu);
  if (auto it = peers.find(peer); it != peers.end() && it->second.ok && it->second.addr == dest) peers.erase(it);
}

// NIC down, as a target: peers' RMA on our memory fails from now on (a key the provider no
// longer knows), as no daemon serves our region any more. By the driving thread.
void OfiPort::close_mrs() {
  std::map<uint32_t, Mr> gone;
  {
    std::lock_guard<std::mutex> lk(mu);
    gone.swap(mrs);
  }
  for (auto& [slot, m] : gone) fi_close(&m.mr->fid);
  mrs_closed = true;
}

// A provider registration: bound to the endpoint and enabled where the provider wants that
// (FI_MR_ENDPOINT). `key`: the requested key, ignored by a provider whose keys are its own.
int OfiPort::reg(void* buf, size_t len, uint64_t access, uint64_t key, fid_mr** out) {
  fid_mr* mr = nullptr;
  int rc = fi_mr_reg(domain, buf, len, access, 0, prov_key && !emulated_key ? 0 : key, 0, &mr, nullptr);
  if (rc == 0 && mr_endpoint) {
    if ((rc = fi_mr_bind(mr, &ep->fid, 0)) == 0) rc = fi_mr_enable(mr);
    if (rc) fi_close(&mr->fid);
  }
  if (rc == 0) *out = mr;
  return rc;
}

// Covers `len` bytes at `buf` for one operation (FI_MR_LOCAL): copied into a pool slot
// (`copy`: a send's source, small enough, a slot free) or the buffer registered for it. Again
// on a covered Lent: a slot gets the bytes again (a request's id is set late). The buffer the
// provider is to use, or nullptr (nothing registered: local_ok counts it).
const void* OfiPort::lend(Lent& l, const void* buf, size_t len, uint64_t access, bool copy) {
  if (l.pool) {
    std::memcpy(l.pool->at(l.slot), buf, len);
    return l.at;
  }
  if (l.covered) return l.at;
  if (copy && pool && len <= OfiPool::kSlot) {
    std::unique_lock<std::mutex> lk(pool->mu);
    if (!pool->free.empty()) {
      l.slot = pool->free.back();
      pool->free.pop_back();
      lk.unlock();
      l.pool = pool.get();
      l.desc = pool->desc;
      l.at = pool->at(l.slot);
      l.covered = true;
      std::memcpy(pool->at(l.slot), buf, len);
      return l.at;
    }
  }
  fid_mr* mr = nullptr;
  if (int rc = reg(const_cast<void*>(buf), len, access, fresh_key(), &mr)) {
    if (!said_local.exchange(true))
      std::fprintf(stderr, "libugni(nicemu): ofi fabric: fi_mr_reg of a local buffer (%zu bytes at %p): %s\n", len, buf,
                   ofi_strerror(-rc));
    return nullptr;
  }
  l.own = mr;
  l.desc = fi_mr_desc(mr);
  l.at = buf;
  l.covered = true;
  return l.at;
}

// The GNI registration of ours `h` covers [va, va + len): its descriptor (FI_MR_LOCAL).
bool OfiPort::gni_desc(Lent& l, const gni_mem_handle_t& h, uint64_t va, uint64_t len) {
  auto f = abi::mdh::decode(h.qword1, h.qword2);
  if (!f || (f->flags & abi::mdh::kFlagVmdh)) return false;
  if (va < f->va || va + len < va || va + len > f->va + (f->npages << abi::mdh::kPageShift)) return false;
  std::lock_guard<std::mutex> lk(mu);
  auto it = mrs.find(f->slot);
  if (it == mrs.end() || it->second.h.qword1 != h.qword1 || it->second.h.qword2 != h.qword2) return false;
  l.desc = it->second.desc;
  l.at = reinterpret_cast<const void*>(va);
  l.covered = true;
  return true;
}

// The check of local descriptors (the point of emulating FI_MR_LOCAL): an operation whose
// local buffer no registration covers is counted (ofi_local_missing, which the tests read)
// and not issued.
bool OfiPort::local_ok(const Lent& l) {
  if (!mr_local || l.covered) return true;
  count(nic->counters, ctr::cdm::ofi_local_missing);
  if (!said_local.exchange(true))
    std::fprintf(stderr, "libugni(nicemu): ofi fabric: a provider operation without a registration of its local "
                 "buffer (FI_MR_LOCAL): failed\n");
  return false;
}

// Before an issue (FI_MR_LOCAL): what covers each local buffer of the post. A PUT's source
// and a GET's destination are a GNI registration of ours when the post names one that covers
// them (post_impl), else a pool slot (a PUT's small source) or registered for the post; a
// message, a sync flag: pool slots.
bool OfiPort::prepare_local(OfiOp* op) {
  auto cover = [&](Lent& l, const void* buf, size_t len, uint64_t access, bool copy) {
    lend(l, buf, len, access, copy);
    return local_ok(l);  // counts what lend could not cover
  };
  const void* local = reinterpret_cast<const void*>(op->local);
  if (op->how == kHowMsg) return cover(op->lent[0], &op->req, sizeof op->req, FI_SEND, true);
  if (op->how == kHowRead)
    return cover(op->lent[0], local, op->length, FI_READ, false) &&
           (!op->event_after || cover(op->lent[1], &op->req, sizeof op->req, FI_SEND, true));
  return cover(op->lent[0], local, op->length, FI_WRITE, true) &&
         (!op->sync || cover(op->lent[1], &op->flag, sizeof op->flag, FI_WRITE, true));
}

// An SMSG or MSGQ send's lent registration, given back once its send completed or failed.
void OfiPort::give_back(OfiSendCtx* s) {
  if (!s->lent_mr && !s->lent_pool) return;
  Lent l;  // released as it goes
  l.own = static_cast<fid_mr*>(s->lent_mr);
  l.pool = static_cast<OfiPool*>(s->lent_pool);
  l.slot = s->lent_slot;
  s->lent_mr = s->lent_pool = nullptr;
}

// FI_MR_PROV_KEY: the key of op's remote handle at its target: cached, or asked (the post is
// held until the answer: key_wait). One question per (peer, handle) at a time.
void OfiPort::key_for(OfiOp* op) {
  bool ask = false;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (keys.size() >= kMaxKeys) std::erase_if(keys, [](const auto& e) { return e.second.known; });
    auto [it, fresh] = keys.try_emplace(KeyId{op->dest, op->rq1, op->rq2});
    op->keyed = true;
    if (it->second.known) {
      op->key = it->second.key;
      count(nic->counters, ctr::cdm::ofi_keys_cached);
      return;
    }
    it->second.waiters.push_back(op);
    op->key_wait.store(1, std::memory_order_release);
    ask = fresh;
  }
  if (ask) ask_key(op->dest, op->rq1, op->rq2);
}

// The question (ofi_msg.h kKey): a message without events of its own; its reply, failure or
// timeout answers the posts waiting (key_answered, from complete).
void OfiPort::ask_key(fi_addr_t dest, uint64_t q1, uint64_t q2) {
  auto* a = new OfiOp;
  a->key_ask = true;
  a->dest = dest;
  a->rq1 = q1, a->rq2 = q2;
  a->how = kHowMsg;
  a->msg_kind = msg::kKey;
  msg::Request& q = a->req;
  q.h = msg::header(msg::kKey, 0, sizeof q);
  q.ptag = nic->cdm->ptag;
  q.cookie = nic->cdm->cookie;
  q.engine = msg::kFma;
  q.qword1 = q1;
  q.qword2 = q2;
  q.reply_len = self_len;
  std::memcpy(q.reply_addr, self_addr, self_len);
  in_flight.fetch_add(1, std::memory_order_relaxed);
  count(nic->counters, ctr::cdm::ofi_keys_asked);
  issue(a, true);
}

// The answer to a question (st: its status; the key in a->answer): the waiting posts get the
// key, or fail with st, PROTECTION for a handle the target does not have (never written).
void OfiPort::key_answered(OfiOp* a, uint64_t st) {
  std::vector<OfiOp*> w;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = keys.find(KeyId{a->dest, a->rq1, a->rq2});
    if (it == keys.end()) return;
    w.swap(it->second.waiters);
    for (OfiOp* op : w) {
      if (st == cqe::kOk)
        op->key = a->answer;
      else
        op->key_status = st;
      op->key_wait.store(st == cqe::kOk ? 0 : 2, std::memory_order_release);
    }
    if (st == cqe::kOk) {
      it->second.known = true;
      it->second.key = a->answer;
    } else {
      keys.erase(it);  // asked again by the next post
    }
  }
  if (!w.empty()) order->pump();  // the first of them is parked at its FIFO's head (issue)
}

// A post still waiting for its key goes (dropped: NIC down, peer gone, close): off the list.
void OfiPort::unwait(OfiOp* op) {
  if (op->key_wait.load(std::memory_order_acquire) != 1) return;
  std::lock_guard<std::mutex> lk(mu);
  if (op->key_wait.load(std::memory_order_relaxed) != 1) return;
  auto it = keys.find(KeyId{op->dest, op->rq1, op->rq2});
  if (it == keys.end()) return;
  auto& v = it->second.waiters;
  v.erase(std::remove(v.begin(), v.end(), op), v.end());
}

// A post through a told key failed: the key may be stale (the target replaced the
// registration at that handle), so the next post asks again.
void OfiPort::drop_key(OfiOp* op) {
  std::lock_guard<std::mutex> lk(mu);
  auto it = keys.find(KeyId{op->dest, op->rq1, op->rq2});
  if (it != keys.end() && it->second.known && it->second.key == op->key) keys.erase(it);
}

void OfiPort::complete(OfiOp* op, uint64_t st) {
  if (op->key_ask) {  // a question: answers the posts waiting, no events of its own
    key_answered(op, st);
    delete op;
    in_flight.fetch_sub(1, std::memory_order_release);
    return;
  }
  if (prov_key) {
    unwait(op);  // dropped while it waited for its key
    if (op->keyed && st != cqe::kOk) drop_key(op);
  }
  // A broken connection or a reply that never came: the daemons' path says PEER_GONE if the
  // target died, TRANSIENT otherwise; so do we, once its daemon answered (judge). With our
  // NIC down nobody can answer: NIC_DOWN, as every post then.
  if (st == cqe::kErrTransient && nic_is_down()) st = cqe::kErrNicDown;
  if (st == cqe::kErrTransient && op->peer && !op->judged && check) {
    op->judged = true;
    check->suspect(op->peer, op);
    return;
  }
  if (unlink(op)) {
    if (st != cqe::kOk) count(nic->counters, ctr::cdm::ofi_errors);
    if (op->chain) {
      op->chain->done(op->chain_index, st);
    } else if (op->bte) {
      rdma_local_events(op->cq, op->cq_mode, op->local_event, op->tid, st);
    } else {
      complete_fma(op->cq, op->cq_mode, op->local_event, st, op->tid);
    }
  }
  const OfiOrderTicket t = op->order;
  delete op;
  // Took effect (or failed): the posts held behind it to its peer may go now, issued from
  // here. Before in_flight drops: a held post keeps the port open (ofi_close) until then.
  order->leave(t);
  in_flight.fetch_sub(1, std::memory_order_release);
}

// Issues a post post_impl prepared. `patient`: the posting thread, now, which waits up to
// 2 s for room in the provider, driving it. Else a held post the order lets go, on any
// thread (the one driving the provider too, which must not wait on itself): no room is
// kRetry (tried at the next look: OfiOrder::pump), and after 2 s of it the post fails
// TRANSIENT, as a patient one does.
OfiIssue OfiPort::issue(OfiOp* op, bool patient) {
  if (!patient && nic_is_down()) {  // held until our NIC went down: failed as every post then
    complete(op, cqe::kErrNicDown);
    return OfiIssue::kDone;
  }
  // Provider keys: a post whose key is still asked stays at its FIFO's head (parked: the
  // answer pumps it; post_impl never issues one itself); a failed question fails it unissued.
  if (const uint8_t w = op->key_wait.load(std::memory_order_acquire)) {
    if (w == 1) return OfiIssue::kRetry;
    complete(op, op->key_status);
    return OfiIssue::kDone;
  }
  if (mr_local && !prepare_local(op)) {
    complete(op, cqe::kErrTransient);  // counted (ofi_local_missing), said once
    return OfiIssue::kDone;
  }
  // Timed from its issue, not its post: a held post is not yet with the provider.
  if (post_timeout) {  // under live_mu: expire_posts reads it from another thread
    std::lock_guard<std::mutex> lk(live_mu);
    op->posted_at = monotonic_ns();
  }
  // 1: posted; 0: refused (the part completed with the error); -1: no room, nothing posted.
  auto post = [&](OfiCtx& c, auto&& call) {
    uint64_t give_up = 0;  // set at the first refusal: no clock read on the common path
    for (;;) {
      ssize_t rc = call(&c.ctx);
      if (rc == 0) return 1;
      if (rc == -FI_EAGAIN && !patient) {
        const uint64_t now = monotonic_ns();
        if (!op->refused_at) op->refused_at = now;
        if (now < op->refused_at + 2000000000ull) return -1;
      } else if (rc == -FI_EAGAIN && !give_up) {
        give_up = monotonic_ns() + 2000000000ull;
      }
      if (rc != -FI_EAGAIN || !patient || monotonic_ns() > give_up) {
        complete_part(op, rc == -FI_EAGAIN ? cqe::kErrTransient : status_of_error(static_cast<int>(-rc)));
        return 0;
      }
      ofi_poll(nic);  // room comes as the provider progresses: drive it (the progress thread may keep away)
      std::this_thread::yield();
    }
  };
  const fi_addr_t dest = op->dest;
  fid_ep* const e = op->via = ep_to(dest);
  if (op->how == kHowMsg) {
    // The reply completes it, with a fetched value stored by the driving thread.
    op->parts.store(2, std::memory_order_relaxed);
    await_reply(op);
    const uint64_t id = op->req.h.id;  // op may be gone once its message is posted
    // FI_MR_LOCAL: the request with its id into its slot.
    const void* src = mr_local ? lend(op->lent[0], &op->req, sizeof op->req, FI_SEND, true) : &op->req;
    void* desc = op->lent[0].desc;
    const int r = post(op->part[0], [&](void* ctx) { return fi_send(e, src, sizeof op->req, desc, dest, ctx); });
    OfiOp* waiting = nullptr;  // not sent: nobody will answer it
    if (r <= 0 && take_pending(id, waiting) && r == 0) complete_part(waiting, cqe::kErrTransient);
    return r < 0 ? OfiIssue::kRetry : OfiIssue::kDone;
  }
  if (op->how == kHowRead) {
    // With a remote event: the read, then the event's message and its reply (the driving thread).
    op->parts.store(op->event_after ? 3 : 1, std::memory_order_relaxed);
    const bool then = op->event_after;  // op may be gone once its read is posted
    void* desc = op->lent[0].desc;
    const int r = post(op->part[0], [&](void* ctx) {
      return fi_read(e, reinterpret_cast<void*>(op->local), op->length, desc, dest, op->raddr, op->key, ctx);
    });
    if (r == 0 && then) fail_rest(op, 2, cqe::kErrTransient);  // no event without its data
    return r < 0 ? OfiIssue::kRetry : OfiIssue::kDone;
  }
  // A PUT; with a sync flag, the flag's write after the data's: ordered (FI_ORDER_WAW), else,
  // and always for a held post (one provider call: nothing half issued when there is no
  // room), written by the driving thread when the data's write completed. The remote event
  // on the last write, so it comes when both are in.
  const bool sync = op->sync;
  if (sync) {
    op->parts.store(2, std::memory_order_relaxed);
    op->flag_after = !waw || !patient;
  }
  const bool flag_after = op->flag_after;  // op may be gone once its data's write is posted
  // FI_MR_LOCAL: a small unregistered source is read from its copy in a pool slot.
  const void* src = op->lent[0].at ? op->lent[0].at : reinterpret_cast<const void*>(op->local);
  void* desc = op->lent[0].desc;
  const int r = post(op->part[0], [&](void* ctx) {
    return op->data_event ? fi_writedata(e, src, op->length, desc, op->data, dest, op->raddr, op->key, ctx)
                          : fi_write(e, src, op->length, desc, dest, op->raddr, op->key, ctx);
  });
  if (r < 0) return OfiIssue::kRetry;
  if (!sync) return OfiIssue::kDone;
  if (r == 0) {  // no flag without its data
    complete_part(op, cqe::kErrTransient);
    return OfiIssue::kDone;
  }
  if (!flag_after) post(op->part[1], [&](void*) { return write_flag(op); });
  return OfiIssue::kDone;
}

OfiIssue OfiPort::issue_held(void* item, const OfiOrderTicket& t) {
  const auto v = reinterpret_cast<uintptr_t>(item);
  if (v & kSmsgItem) return smsg_ofi_issue_held(nic, reinterpret_cast<void*>(v & ~kSmsgItem), t);
  auto* op = static_cast<OfiOp*>(item);
  op->order = t;
  const OfiIssue r = issue(op, false);
  // Not issued (no room, or its key still asked): the order gives the count back itself, so
  // the post holds none (dropped while parked, it must not give it back twice). It stays alive:
  // the order keeps it (issuing) until we return.
  if (r == OfiIssue::kRetry) op->order = OfiOrderTicket{};
  return r;
}

// A held post completes unissued: with `st` as a post in flight would (NIC down, its peer
// gone), or at close (st 0) without events, as the posts in flight then.
void OfiPort::drop_held(void* item, uint64_t st) {
  const auto v = reinterpret_cast<uintptr_t>(item);
  if (v & kSmsgItem) return smsg_ofi_drop_held(nic, reinterpret_cast<void*>(v & ~kSmsgItem), st);
  auto* op = static_cast<OfiOp*>(item);
  if (st) return complete(op, st);
  if (prov_key) unwait(op);
  unlink(op);
  delete op;
  in_flight.fetch_sub(1, std::memory_order_release);
}

// A GET's event message (part[1]): FI_MR_LOCAL, from the slot prepare_local lent it, the
// request copied in now (its id is new).
ssize_t OfiPort::send_msg(OfiOp* op, OfiCtx& c) {
  const void* src = &op->req;
  if (mr_local) {
    src = lend(op->lent[1], &op->req, sizeof op->req, FI_SEND, true);
    if (!local_ok(op->lent[1])) return -FI_ENOMEM;
  }
  return fi_send(op->via ? op->via : ep, src, sizeof op->req, op->lent[1].desc, op->dest, &c.ctx);
}

ssize_t OfiPort::send_deferred(const Deferred& d) {
  if (d.reply) {
    const void* src = &d.reply->r;
    if (mr_local) {
      src = lend(d.reply->lent, &d.reply->r, sizeof d.reply->r, FI_SEND, true);
      if (!local_ok(d.reply->lent)) return -FI_ENOMEM;
    }
    return fi_send(ep, src, sizeof d.reply->r, d.reply->lent.desc, d.reply->dest, &d.reply->c.ctx);
  }
  if (d.op->flag_after) return write_flag(d.op);
  return send_msg(d.op, d.op->part[1]);
}

// A post whose message is about to go: waits for its reply by id (entered first: the reply
// may come before the send's own completion).
void OfiPort::await_reply(OfiOp* op) {
  const uint64_t deadline = monotonic_ns() + kReplyTimeoutNs;
  std::lock_guard<std::mutex> lk(pmu);
  uint32_t slot;
  if (!free_slots.empty()) {
    slot = free_slots.back();
    free_slots.pop_back();
  } else {
    slot = static_cast<uint32_t>(pending.size());  // at most a few thousand: posts are bounded by tids
    pending.emplace_back();
  }
  const uint64_t id = (next_seq++ << kSlotBits) | slot;
  pending[slot] = {id, op, deadline};
  op->req.h.id = id;
}

// Whoever takes a post off `pending` (its reply, its send's failure, its timeout) completes
// the reply's part of it.
bool OfiPort::take_pending(uint64_t id, OfiOp*& op) {
  const uint64_t slot = id & ((uint64_t{1} << kSlotBits) - 1);
  std::lock_guard<std::mutex> lk(pmu);
  if (id == 0 || slot >= pending.size() || pending[slot].id != id) return false;
  op = pending[slot].op;
  pending[slot] = {};
  free_slots.push_back(static_cast<uint32_t>(slot));
  return true;
}

void OfiPort::fail_rest(OfiOp* op, int parts, uint64_t st) {
  for (int i = 0; i < parts; ++i) complete_part(op, st);
}

void OfiPort::expire(uint64_t now) {
  std::vector<OfiOp*> late;
  {
    std::lock_guard<std::mutex> lk(pmu);
    for (size_t slot = 0; slot < pending.size(); ++slot) {
      Pending& w = pending[slot];
      if (!w.id || w.deadline > now) continue;
      late.push_back(w.op);
      w = {};
      free_slots.push_back(static_cast<uint32_t>(slot));
    }
  }
  for (OfiOp* op : late) complete_part(op, cqe::kErrTransient);  // the peer is gone or does not answer
}

// Posts the provider has held for post_timeout_ns (post_timeout): udp;ofi_rxd neither fails
// an access through a key its target does not know (the target drops it, and acks nothing
// after it from us) nor one to a dead target. Each gets its events now, by a stand-in that
// is judged as a failed connection is (TRANSIENT, PEER_GONE if the target died); the post
// itself stays with the provider, `reported`, and posts nothing if it ever completes.
void OfiPort::expire_posts(uint64_t now) {
  std::vector<OfiOp*> late;
  {
    std::lock_guard<std::mutex> lk(live_mu);
    for (OfiOp* op = live; op; op = op->live_next) {
      if (op->reported || !op->posted_at || now < op->posted_at + post_timeout_ns) continue;
      op->reported = true;
      auto* s = new OfiOp;
      s->cq = op->cq, s->cq_mode = op->cq_mode, s->bte = op->bte, s->local_event = op->local_event;
      s->tid = op->tid, s->chain = op->chain, s->chain_index = op->chain_index;
      s->peer = op->peer, s->dest = op->dest;
      s->keyed = op->keyed, s->key = op->key, s->rq1 = op->rq1, s->rq2 = op->rq2;  // a stale key is forgotten
      // Its place in the order goes with its events: posts held behind it go once they are
      // posted (complete reads op->order only after its unlink, under this lock).
      s->order = std::exchange(op->order, OfiOrderTicket{});
      late.push_back(s);
    }
  }
  // Before the events: a client reposting at once goes through the fresh endpoint.
  std::vector<fi_addr_t> stuck;
  for (OfiOp* s : late)
    if (std::find(stuck.begin(), stuck.end(), s->dest) == stuck.end()) stuck.push_back(s->dest);
  for (fi_addr_t d : stuck) renew(d);
  for (OfiOp* s : late) {
    link(s);
    in_flight.fetch_add(1, std::memory_order_relaxed);
    complete(s, cqe::kErrTransient);
  }
}

// Posts to `dest` go through a fresh endpoint from now on (`fresh` says why); by the driving
// thread. Without one (the provider refused, or kMaxFreshEps reached) they keep the old.
void OfiPort::renew(fi_addr_t dest) {
  fid_ep* e = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (fresh.size() + retired.size() >= kMaxFreshEps) return;
  }
  int rc = fi_endpoint(domain, info, &e, nullptr);
  if (!rc) rc = fi_ep_bind(e, &av->fid, 0);
  if (!rc) rc = fi_ep_bind(e, &cq->fid, FI_TRANSMIT | FI_RECV);
  if (!rc) rc = fi_enable(e);
  if (rc) {
    if (e) fi_close(&e->fid);
    std::fprintf(stderr, "libugni(nicemu): ofi fabric: no fresh endpoint for a target whose posts time out: %s; "
                 "they keep the old one\n", ofi_strerror(-rc));
    return;
  }
  std::lock_guard<std::mutex> lk(mu);
  auto [it, added] = fresh.try_emplace(dest, e);
  if (!added) {
    retired.push_back(it->second);
    it->second = e;
  }
  any_fresh.store(true, std::memory_order_release);
}

void OfiPort::repost(OfiRecv* r) {
  // A refusal leaves one buffer fewer (peers' requests then wait in the provider).
  for (int tries = 0; tries < 1000; ++tries) {
    ssize_t rc = fi_recv(ep, r->buf, sizeof r->buf, r->desc, FI_ADDR_UNSPEC, &r->c.ctx);
    if (rc != -FI_EAGAIN) return;
    std::this_thread::yield();
  }
}

void OfiPort::on_message(OfiRecv* r, size_t len) {
  if (abi::ofismsg::mine(r->buf, len)) return smsg_ofi_on_message(nic, r->buf, len);
  if (abi::ofimsgq::mine(r->buf, len)) return msgq_ofi_on_message(nic, r->buf, len);
  msg::Request q;
  msg::Reply rp;
  switch (msg::parse(r->buf, len, q, rp)) {
    case msg::Parsed::kRequest:
      return serve(q);
    case msg::Parsed::kReply:
      return on_reply(rp);
    case msg::Parsed::kBad:
      count(nic->counters, ctr::cdm::ofi_dropped);
      return;
  }
}

void OfiPort::on_reply(const msg::Reply& r) {
  OfiOp* op = nullptr;
  if (!take_pending(r.h.id, op)) {  // not waited for (late after its timeout, or forged)
    count(nic->counters, ctr::cdm::ofi_dropped);
    return;
  }
  static_assert(std::endian::native == std::endian::little);  // a 4-byte value is the low half
  if (r.status == cqe::kOk && op->fetch_size) std::memcpy(reinterpret_cast<void*>(op->fetch_va), &r.fetched, op->fetch_size);
  if (r.status == cqe::kOk && op->key_ask) op->answer = r.fetched;
  if (r.status == cqe::kErrPeerGone) {  // its NIC went down: the posts held for it fail as it did
    forget(op->peer, op->dest);
    order->fail(op->dest, cqe::kErrPeerGone);
  }
  complete_part(op, r.status < cqe::kErrStatusLast ? r.status : cqe::kErrProtection);
}

// The target side of an AMO, as the daemons' responder executes one (remote_responder.cpp):
// the request checked against our own registration table, the word changed under the AMO
// lock every path takes, with the same ALU.
uint64_t OfiPort::serve_amo(const msg::Request& q, uint64_t& fetched) {
  auto c = amo::decode(q.amo_cmd);
  if (!c || !amo::length_ok(*c, q.length) || (q.addr & (c->size - 1)))
    return cqe::kErrProtection;  // the initiating library checked these: a forged request
  const gni_mem_handle_t h{q.qword1, q.qword2};
  uint32_t dst_cq = abi::kNoCq;
  abi::Extents word;
  if (uint64_t st = translate_access(*nic->self, h, q.addr, c->size, true, &dst_cq, word)) return st;
  if (word.size() != 1) return cqe::kErrBounds;  // split over two segments: no single word
  abi::AmoLock* lock = amo_lock_for(*nic->self, word[0].va);
  if (!lock) return cqe::kErrMemAccess;
  // Bounded as the daemons' wait: this thread serves every peer of the CDM.
  if (amo::lock_acquire(lock, amo_lock_self(), spin_ns(), amo::kDaemonLockWaitNs, amo::kDaemonLockWaitNs) ==
      amo::LockResult::kTimeout)
    return cqe::kErrTransient;
  uint64_t old = 0;
  uint64_t st = xmem_read(self_pid(), word[0].va, &old, c->size);
  if (!st) {
    amo::Outcome o = amo::apply(*c, old, q.operand1, q.operand2);
    if (o.store) {
      NicDmaScope dma;  // the NIC's store of a peer's AMO
      st = xmem_write(self_pid(), word[0].va, &o.new_value, c->size);
    }
    fetched = o.fetched;
  }
  amo_lock_release(lock);
  if (!st && (q.flags & msg::kFlagRemoteEvent) && dst_cq != abi::kNoCq)
    push_remote_event(*nic->self, dst_cq, cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kOk, 0, 0, q.remote_event));
  return st;
}

// A peer's request: executed here, answered to the address it names.
void OfiPort::serve(const msg::Request& q) {
  count(nic->counters, ctr::cdm::ofi_served);
  uint64_t st = cqe::kOk, fetched = 0;
  const gni_mem_handle_t h{q.qword1, q.qword2};
  if (q.ptag != nic->cdm->ptag || q.cookie != nic->cdm->cookie) {
    st = cqe::kErrProtection;  // another job's: the daemons would not have found us
  } else if (nic_is_down()) {
    st = cqe::kErrPeerGone;  // no daemon serves our region: as the daemons' path finds a CDM whose NIC went down
  } else if (q.h.type == msg::kAmo) {
    st = serve_amo(q, fetched);
  } else if (q.h.type == msg::kKey) {
    // The key of a registration of ours, exactly this handle (a replaced one is another
    // handle, or has another key): PROTECTION otherwise, as a stale requested key gets.
    st = cqe::kErrProtection;
    if (auto f = abi::mdh::decode(q.qword1, q.qword2)) {
      std::lock_guard<std::mutex> lk(mu);
      auto it = mrs.find(f->slot);
      if (it != mrs.end() && it->second.h.qword1 == q.qword1 && it->second.h.qword2 == q.qword2) {
        st = cqe::kOk;
        fetched = it->second.key;
      }
    }
    if (st == cqe::kOk) count(nic->counters, ctr::cdm::ofi_keys_answered);
  } else if (q.h.type == msg::kEvent) {
    // The GET read our memory through the provider; its remote event is the responder's.
    uint32_t dst_cq = abi::kNoCq;
    abi::Extents pieces;
    st = translate_access(*nic->self, h, q.addr, q.length, false, &dst_cq, pieces);
    if (!st && dst_cq != abi::kNoCq) {
      const uint64_t src = q.engine == msg::kBte ? cqe::kSrcRemoteDma : cqe::kSrcRemoteRequest;
      push_remote_event(*nic->self, dst_cq, cqe::make(src, cqe::kTypePost, cqe::kOk, 0, 0, q.remote_event));
    }
  } else {  // kCqWrite
    uint32_t cq = abi::kNoCq;
    st = abi::region_cq_write_target(nic->self->base, q.qword1, q.qword2, cq);
    // A full CQ loses the entry and flags its overrun, as the hardware does.
    if (!st) push_remote_event(*nic->self, cq, cqe::make_cqwrite(q.operand1));
  }
  // Where to answer: the address the request names, entered in our AV once.
  // Looked up without a copy: this runs for every request served.
  const std::string_view key(reinterpret_cast<const char*>(q.reply_addr), q.reply_len);
  auto it = reply_to.find(key);
  if (it == reply_to.end()) {
    fi_addr_t a = FI_ADDR_UNSPEC;
    if (reply_to.size() >= 4096 || fi_av_insert(av, q.reply_addr, 1, &a, 0, nullptr) != 1) {
      count(nic->counters, ctr::cdm::ofi_dropped);  // no way back: the initiator times out
      return;
    }
    it = reply_to.emplace(std::string(key), a).first;
  }
  auto* r = new OfiReply;
  r->c.kind = CtxKind::kReply;
  r->dest = it->second;
  r->r.h = msg::header(msg::kReply, q.h.id, sizeof r->r);
  r->r.status = st;
  r->r.fetched = fetched;
  deferred.push_back({nullptr, r});  // sent before the next look at the CQ
}

// Sends what waited for room in the provider (replies, sync flags, GETs' event messages);
// by the driving thread.
void OfiPort::flush_deferred() {
  smsg_ofi_flush(nic);
  for (size_t i = 0; i < deferred.size();) {
    const Deferred d = deferred[i];
    ssize_t rc = send_deferred(d);
    if (rc == -FI_EAGAIN) {  // retried after the next look at the CQ (which makes room)
      ++i;
      continue;
    }
    if (rc && d.reply) {
      delete d.reply;  // the initiator times out
    } else if (rc) {
      const uint64_t st = status_of_error(static_cast<int>(-rc));
      OfiOp* waiting = nullptr;  // taken first: holding its part keeps the op alive
      const bool waited = !d.op->flag_after && take_pending(d.op->req.h.id, waiting);
      complete_part(d.op, st);  // the flag's or the event message's part
      if (waited) complete_part(waiting, st);
    }
    deferred[i] = deferred.back();
    deferred.pop_back();
  }
}

// One look at the provider, by whoever holds drive_mu (the progress thread, or an
// application thread polling its CQ): sends what waited for room, expires replies not
// coming, drives the provider (tcp;ofi_rxm progresses in the calls that read its CQ, also
// for the RMA peers do on our memory), turns completions into CQ events and serves peers'
// messages. may_sleep: in fi_cq_sread up to 100 ms (the progress thread), or 1 ms (`app`:
// an application thread waiting while posts are held, ofi_wait). True if it read something.
bool OfiPort::progress_once(bool may_sleep, bool app) {
  fi_cq_data_entry e[16];
  bool got = false;
  // NIC down: no peer's RMA lands in our memory from now on (a header load per look).
  if (!mrs_closed && nic_is_down()) close_mrs();
  do {  // once; `continue` ends it
    flush_deferred();
    if (order->any_parked()) order->pump();  // held posts the provider had no room for
    if (msgs || post_timeout) {
      const uint64_t now = monotonic_ns();
      if (now >= next_expiry) {
        if (msgs) expire(now);
        if (post_timeout) expire_posts(now);
        next_expiry = now + 100'000'000ull;
      }
    }
    ssize_t k;
    // in_sread raised, then the waiters read (a waiter raises its count, then reads
    // in_sread): one of the two sees the other, so no waiter sleeps behind our sread.
    bool sleep = may_sleep && waitable && deferred.empty();
    if (sleep) {
      in_sread.store(true, std::memory_order_seq_cst);
      sleep = drive_waiters.load(std::memory_order_seq_cst) == 0;
      if (!sleep) in_sread.store(false, std::memory_order_relaxed);
    }
    if (sleep) {
      // A held post the provider had no room for: looked at again within 1 ms (pump).
      {
        NicDmaScope dma;  // the provider lands peers' PUTs in registered memory here
        k = fi_cq_sread(cq, e, 16, nullptr, app || order->any_parked() ? 1 : 100);
      }
      in_sread.store(false, std::memory_order_relaxed);
      kicked.store(false, std::memory_order_relaxed);
    } else {
      NicDmaScope dma;
      k = fi_cq_read(cq, e, 16);
    }
    got = k > 0 || k == -FI_EAVAIL;
    if (k > 0)
      count(nic->counters, may_sleep && !app ? ctr::cdm::ofi_reads_thread : ctr::cdm::ofi_reads_inline,
            static_cast<uint64_t>(k));
    if (k > 0) {
      for (ssize_t i = 0; i < k; ++i) {
        if (e[i].flags & FI_REMOTE_CQ_DATA) {
          remote_event(e[i].data);  // a peer's write into our memory, not a post of ours
          continue;
        }
        if (!e[i].op_context) continue;
        auto* c = static_cast<OfiCtx*>(e[i].op_context);
        if (c->kind == CtxKind::kRecv) {
          auto* r = reinterpret_cast<OfiRecv*>(c);
          on_message(r, e[i].len);
          repost(r);
          continue;
        }
        if (c->kind == CtxKind::kReply) {
          delete reinterpret_cast<OfiReply*>(c);
          continue;
        }
        if (c->kind == CtxKind::kSmsg) {
          smsg_done(c, cqe::kOk);
          continue;
        }
        OfiOp* op = c->op;
        // Its data is in: now the flag, or the GET's remote event; not once our NIC is down
        // (its error event may have been posted already: nothing more lands at the peer).
        const bool then = c == &op->part[0] && (op->flag_after || op->event_after);
        if (then && nic_is_down()) {
          fail_rest(op, op->event_after ? 2 : 1, cqe::kErrNicDown);
        } else if (then && op->flag_after) {
          deferred.push_back({op, nullptr});
        } else if (then) {
          await_reply(op);
          deferred.push_back({op, nullptr});
        }
        complete_part(op, cqe::kOk);
      }
      continue;
    }
    if (k == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq, &err, 0) > 0 && err.op_context && !(err.flags & FI_REMOTE_CQ_DATA)) {
        auto* c = static_cast<OfiCtx*>(err.op_context);
        const uint64_t st = status_of_error(err.err);
        if (c->kind == CtxKind::kRecv) {  // truncated (larger than any message) or cancelled
          count(nic->counters, ctr::cdm::ofi_dropped);
          if (!stop.load(std::memory_order_acquire)) repost(reinterpret_cast<OfiRecv*>(c));
          continue;
        }
        if (c->kind == CtxKind::kReply) {
          delete reinterpret_cast<OfiReply*>(c);  // the initiator times out
          continue;
        }
        if (c->kind == CtxKind::kSmsg) {
          smsg_done(c, st);
          continue;
        }
        OfiOp* op = c->op;
        if (c == &op->part[0] && op->flag_after) complete_part(op, st);  // no flag without its data
        if (c == &op->part[0] && op->event_after) fail_rest(op, 2, st);  // no event without its data
        // A message that did not go: nobody will answer it.
        OfiOp* waiting = nullptr;
        if (op->msg_kind && (c == &op->part[1] || !op->event_after) && take_pending(op->req.h.id, waiting))
          complete_part(waiting, st);
        complete_part(op, st);
      }
      continue;
    }
    if (!waitable && may_sleep) {
      // No wait object: poll, briefly asleep between (the target side needs progress too).
      timespec ts{0, in_flight.load(std::memory_order_relaxed) ? 2000 : 200000};
      nanosleep(&ts, nullptr);
    }
  } while (false);
  // Replies to the requests just served, flags and event messages of the writes and reads
  // just completed: out now, not at the next look (an application thread may not look again).
  if (got && !deferred.empty()) flush_deferred();
  return got;
}

// How long the progress thread keeps away after an application thread's last poll: long
// enough to sleep rather than spin, short enough for a rank that stops polling (computing)
// to have its peers' requests served soon again. A thread going to sleep says so (ofi_idle).
constexpr uint64_t kPollWindowNs = 1'000'000;

// The progress thread: drives the provider while the application does not (a rank that
// computes, waits on a futex, or is the target of RMA it never polls for).
void OfiPort::run() {
  while (!stop.load(std::memory_order_acquire)) {
    const uint64_t last = polled_at.load(std::memory_order_relaxed);
    const uint64_t now = last ? monotonic_ns() : 0;
    if (last && now < last + kPollWindowNs) {
      backoff.store(1, std::memory_order_seq_cst);
      // Re-read after raising `backoff`: ofi_idle clears polled_at, then takes the word back
      // to 0 (so a wait that starts after it returns at once) and wakes us if it was 1.
      if (polled_at.load(std::memory_order_seq_cst) == last)
        abi::futex_wait(&backoff, 1, static_cast<int64_t>(last + kPollWindowNs - now));
      backoff.store(0, std::memory_order_relaxed);
      continue;
    }
    // A poller waits for the lock: its turn first (it wakes us as it leaves).
    if (const uint32_t w = drive_waiters.load(std::memory_order_acquire)) {
      abi::futex_wait(&drive_waiters, w, 1'000'000);
      continue;
    }
    std::lock_guard<std::mutex> lk(drive_mu);
    // A poller came while we waited for the lock: its turn (checked again above).
    const uint64_t again = polled_at.load(std::memory_order_relaxed);
    if (again != last && monotonic_ns() < again + kPollWindowNs) continue;
    progress_once(true);
    msgq_ofi_tick(nic);  // MSGQ replies overdue (msgq_ofi.h)
  }
}

// Takes drive_mu from whoever holds it: the driver's dispatch of what it read finishes first;
// a thread asleep in fi_cq_sread (holding drive_mu) is woken for it, and the progress thread
// keeps away until we are done.
void OfiPort::lock_drive(std::unique_lock<std::mutex>& lk) {
  drive_waiters.fetch_add(1, std::memory_order_seq_cst);
  if (in_sread.load(std::memory_order_seq_cst)) fi_cq_signal(cq);
  lk.lock();
  drive_waiters.fetch_sub(1, std::memory_order_release);
  abi::futex_wake_all(&drive_waiters);
}

void OfiPort::poll_inline(bool wait) {
  polled_at.store(monotonic_ns(), std::memory_order_relaxed);
  std::unique_lock<std::mutex> lk(drive_mu, std::try_to_lock);
  if (!lk.owns_lock() && wait) lock_drive(lk);
  if (lk.owns_lock()) {
    progress_once(false);
    return;
  }
  // The progress thread asleep in fi_cq_sread: woken once, it backs off (run) and leaves the
  // provider to us from our next poll on. Another thread driving: nothing to do.
  if (in_sread.load(std::memory_order_seq_cst) && !kicked.exchange(true, std::memory_order_relaxed)) {
    fi_cq_signal(cq);
    count(nic->counters, ctr::cdm::ofi_kicks);
  }
}

// How long an application thread sleeps in the provider per ofi_wait: an event that reaches
// its CQ another way (the daemon, a same-host peer) is seen within this.
constexpr uint64_t kWaitSliceNs = 1'000'000;

// Posts are held: the completion this thread waits for is likely one that releases them, so
// it sleeps in fi_cq_sread itself (1 ms: `max_ns` is met to the millisecond, as GNI's
// timeouts are), woken by the provider, dispatches and issues the released
// posts, where the progress thread would be woken for that and then wake this thread through
// the CQ's futex (two wake-ups per step of a held stream, not one).
bool OfiPort::wait_inline(uint64_t max_ns) {
  if (!waitable || !order->any_held() || stop.load(std::memory_order_relaxed)) return false;
  // polled_at at the end of the sleep: the progress thread keeps away until then (run) rather
  // than queue on drive_mu and be woken by each unlock.
  polled_at.store(monotonic_ns() + std::min(max_ns, kWaitSliceNs), std::memory_order_relaxed);
  std::unique_lock<std::mutex> lk(drive_mu, std::try_to_lock);
  if (!lk.owns_lock()) {
    // Another application thread sleeps in the provider: it dispatches our completions too
    // and wakes us through the CQ's futex. (Taking the lock from it would wake it, and it us
    // next time: two waiters waking each other without end.) Else the progress thread or a
    // poller has it: ours next.
    if (app_waiting.load(std::memory_order_relaxed)) return false;
    lock_drive(lk);
  }
  app_waiting.store(true, std::memory_order_relaxed);
  progress_once(true, true);
  msgq_ofi_tick(nic);  // as the progress thread's turn, which keeps away meanwhile
  app_waiting.store(false, std::memory_order_relaxed);
  lk.unlock();
  polled_at.store(monotonic_ns(), std::memory_order_relaxed);
  return true;
}

bool ofi_wait(Nic* n, uint64_t max_ns) {
  OfiPort* p = n->ofi;
  // Nothing held (the common case): a load, not the cancellation state's four calls.
  if (!p || !p->waitable || !p->order->any_held()) return false;
  int state, type, unused;  // as ofi_poll: no cancellation inside the provider nor holding drive_mu
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &type);
  const bool waited = p->wait_inline(max_ns);
  pthread_setcancelstate(state, &unused);
  if (type == PTHREAD_CANCEL_ASYNCHRONOUS) before_possible_unwind();
  pthread_setcanceltype(type, &unused);
  return waited;
}

void ofi_poll(Nic* n, bool wait) {
  OfiPort* p = n->ofi;
  if (!p) return;
  // Not cancelled inside the provider (its calls have cancellation points, and it holds
  // locks of its own there) nor holding drive_mu: a cancel that comes meanwhile is acted on
  // as we return, as deferring_cancel does (cancel_point.h). GNI_CqGetEvent is called by
  // threads with asynchronous cancellation (libfabric's gni provider).
  int state, type, unused;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &type);
  p->poll_inline(wait);
  pthread_setcancelstate(state, &unused);
  if (type == PTHREAD_CANCEL_ASYNCHRONOUS) before_possible_unwind();
  pthread_setcanceltype(type, &unused);  // may unwind from here: a cancel came meanwhile
}

OfiOrder* ofi_order(Nic* n) { return n->ofi ? n->ofi->order.get() : nullptr; }

void ofi_idle(Nic* n) {
  OfiPort* p = n->ofi;
  if (!p || !p->polled_at.load(std::memory_order_relaxed)) return;
  p->polled_at.store(0, std::memory_order_seq_cst);
  if (p->backoff.exchange(0, std::memory_order_seq_cst)) abi::futex_wake_all(&p->backoff);
}

bool OfiPort::resolve(uint32_t node, uint32_t route, fi_addr_t& out) {
  const uint64_t k = (uint64_t{node} << 32) | route;
  uint64_t now = 0;  // read only for a peer without an address
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = peers.find(k);
    if (it != peers.end() && (it->second.ok || (now = monotonic_ns()) < it->second.retry_at)) {
      out = it->second.addr;
      return it->second.ok;
    }
  }
  if (!now) now = monotonic_ns();
  abi::ctl::OfiLookup req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kOfiLookup);
  req.node = node;
  req.route = route;
  abi::ctl::OfiLookupReply rep{};
  OfiPeer p;
  p.retry_at = now + 1000000000ull;  // a peer without an address: asked again after a second
  if (nic->conn.call(req, rep) && rep.r.rc == GNI_RC_SUCCESS && rep.addr_len > 0 &&
      rep.addr_len <= abi::ctl::kOfiAddrMax) {
    fi_addr_t a = FI_ADDR_UNSPEC;
    if (fi_av_insert(av, rep.addr, 1, &a, 0, nullptr) == 1) {
      p.ok = true;
      p.addr = a;
    }
  }
  std::lock_guard<std::mutex> lk(mu);
  if (p.ok) av_raw[p.addr].assign(reinterpret_cast<const char*>(rep.addr), rep.addr_len);
  peers[k] = p;
  out = p.addr;
  return p.ok;
}

// Does the target CDM `peer` still live? Asked as its address is (OfiLookup: our daemon asks
// the target's, which answers only for a live CDM of our credential).
PeerAnswer OfiPort::ask_peer(uint64_t peer) {
  abi::ctl::OfiLookup req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kOfiLookup);
  req.node = static_cast<uint32_t>(peer >> 32);
  req.route = static_cast<uint32_t>(peer);
  abi::ctl::OfiLookupReply rep{};
  PeerAnswer a;
  if (!nic->conn.call(req, rep)) return a;  // our daemon is gone: unknown
  if (rep.r.rc == GNI_RC_NO_MATCH) {
    a.state = PeerAnswer::kGone;
  } else if (rep.r.rc == GNI_RC_SUCCESS && rep.addr_len > 0 && rep.addr_len <= abi::ctl::kOfiAddrMax) {
    a.state = PeerAnswer::kLives;
    a.addr.assign(reinterpret_cast<const char*>(rep.addr), rep.addr_len);
  }
  return a;  // else the target's daemon did not answer: unknown
}

// The verdict on the posts that failed towards `peer`: PEER_GONE for those whose endpoint is
// not the one living there now (it died; a CDM restarted under the route is another one),
// TRANSIENT for the rest. A peer gone is forgotten, so the next post looks it up afresh, and
// the messages still waiting for its reply complete now rather than at their timeout.
void OfiPort::judge(uint64_t peer, const PeerAnswer& a, std::vector<void*>& ops) {
  if (a.state == PeerAnswer::kDropped) {
    for (void* v : ops) {
      unlink(static_cast<OfiOp*>(v));
      delete static_cast<OfiOp*>(v);
      in_flight.fetch_sub(1, std::memory_order_release);
    }
    return;
  }
  std::vector<fi_addr_t> dead;  // the peer's AV entries that name no live CDM
  {
    std::lock_guard<std::mutex> lk(mu);
    auto gone = [&](fi_addr_t d) {
      auto it = av_raw.find(d);
      return a.state == PeerAnswer::kGone || (a.state == PeerAnswer::kLives && it != av_raw.end() && it->second != a.addr);
    };
    for (void* v : ops)
      if (gone(static_cast<OfiOp*>(v)->dest)) dead.push_back(static_cast<OfiOp*>(v)->dest);
    if (auto it = peers.find(peer); it != peers.end() && it->second.ok &&
                                    (a.state != PeerAnswer::kLives || gone(it->second.addr))) {
      dead.push_back(it->second.addr);
      peers.erase(it);  // looked up afresh by the next post
    }
  }
  auto is_dead = [&](fi_addr_t d) { return std::find(dead.begin(), dead.end(), d) != dead.end(); };
  // Posts held for a dead peer fail as those in flight, first: completing those would issue them.
  std::sort(dead.begin(), dead.end());
  dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
  for (fi_addr_t d : dead) order->fail(d, cqe::kErrPeerGone);
  for (void* v : ops) {
    auto* op = static_cast<OfiOp*>(v);
    complete(op, is_dead(op->dest) ? cqe::kErrPeerGone : cqe::kErrTransient);
  }
  if (dead.empty()) return;
  std::vector<OfiOp*> waiting;  // messages to it whose replies will not come
  {
    std::lock_guard<std::mutex> lk(pmu);
    for (size_t slot = 0; slot < pending.size(); ++slot) {
      Pending& w = pending[slot];
      if (!w.id || w.op->peer != peer || !is_dead(w.op->dest)) continue;
      waiting.push_back(w.op);
      w = {};
      free_slots.push_back(static_cast<uint32_t>(slot));
    }
  }
  for (OfiOp* op : waiting) {
    op->judged = true;
    complete_part(op, cqe::kErrPeerGone);
  }
}

void OfiPort::teardown() {
  if (progress.joinable()) {
    stop.store(true, std::memory_order_release);
    polled_at.store(0, std::memory_order_seq_cst);
    backoff.store(0, std::memory_order_seq_cst);
    abi::futex_wake_all(&backoff);  // a progress thread keeping away from a poller
    progress.join();
  }
  if (check) check->stop();  // posts still waiting for a verdict: dropped without events
  std::lock_guard<std::mutex> lk(drive_mu);  // an application thread still driving it
  if (order) order->fail(OfiOrder::kAllPeers, 0);  // held posts: dropped without events, as those in flight
  for (auto& [slot, m] : mrs) fi_close(&m.mr->fid);
  mrs.clear();
  for (auto& r : recvs)
    if (r->mr) fi_close(&r->mr->fid), r->mr = nullptr;
  if (pool && pool->mr) fi_close(&pool->mr->fid), pool->mr = nullptr;
  for (auto& [d, e] : fresh) fi_close(&e->fid);
  for (fid_ep* e : retired) fi_close(&e->fid);
  fresh.clear(), retired.clear();
  if (ep) fi_close(&ep->fid);
  if (av) fi_close(&av->fid);
  if (cq) fi_close(&cq->fid);
  // Posts whose events a stand-in gave (expire_posts: udp;ofi_rxd never completed them) and
  // that the provider still held: it has let go of them with its endpoint and queue.
  std::vector<OfiOp*> reported;
  {
    std::lock_guard<std::mutex> lk2(live_mu);
    for (OfiOp* op = live; op; op = op->live_next)
      if (op->reported) reported.push_back(op);
  }
  for (OfiOp* op : reported) {
    unlink(op);
    delete op;
  }
  if (domain) fi_close(&domain->fid);
  if (fabric) fi_close(&fabric->fid);
  if (info) ofi_lib().freeinfo(info);
  ep = nullptr, av = nullptr, cq = nullptr, domain = nullptr, fabric = nullptr, info = nullptr;
}

void ofi_open(Nic* n, const abi::ctl::AttachReply& rep) {
  if (rep.fabric_data != abi::ctl::kFabricDataOfi) return;
  std::string prov(rep.ofi_provider, strnlen(rep.ofi_provider, sizeof rep.ofi_provider));
  if (const char* e = std::getenv("FI_PROVIDER"); e && *e) prov = e;
  const OfiLib& lib = ofi_lib();
  if (!lib.error.empty()) return say(lib.error.c_str(), 0);
  // client_ofi_mr_mode (tests): the modes to act as if the provider demanded them. Parsed
  // strictly: a word we do not know is said, and the CDM keeps the daemons' path.
  bool want_key = false, want_local = false;
  const auto& mode_param = nicemu::params::param("client_ofi_mr_mode");
  if (const char* e = std::getenv(mode_param.env.data()); e && *e) {
    std::string_view v(e);
    for (;;) {
      const size_t c = v.find(',');
      const std::string_view w = v.substr(0, c);
      if (w == "prov_key") {
        want_key = true;
      } else if (w == "local") {
        want_local = true;
      } else {
        const std::string why = std::string(mode_param.env) + "=" + e + ": unknown mode \"" + std::string(w) +
                                "\" (known: prov_key, local, comma-separated)";
        return say(why.c_str(), 0);
      }
      if (c == std::string_view::npos) break;
      v.remove_prefix(c + 1);
    }
  }
  auto p = std::make_unique<OfiPort>();
  p->nic = n;
  // 20 ms: the posts in flight to a peer that died fail together, and its daemon has seen
  // the death (its pidfd) by then, not only the connection's reset.
  p->check = std::make_unique<PeerCheck>([q = p.get()](uint64_t peer) { return q->ask_peer(peer); },
                                         [q = p.get()](uint64_t peer, const PeerAnswer& a, std::vector<void*>& ops) {
                                           q->judge(peer, a, ops);
                                         },
                                         std::chrono::milliseconds(20));
  // What we would like beyond RMA, the most first: messages (AMOs, GETs' remote events and
  // CQ writes, executed by the target's progress thread) and ordered writes (sync flags); a
  // provider without them still moves PUTs and GETs. AMOs are never the provider's atomics:
  // those would not be atomic with the AMO lock the other paths take, and with tcp;ofi_rxm
  // they were no faster than messages (docs/notes/2026-12-07-ofi-amo-messages.md).
  struct Wish {
    uint64_t caps, order;
  };
  constexpr uint64_t kMsg = FI_MSG | FI_SEND | FI_RECV;
  // The order bits the ordering model needs within RMA (ofi_order.h: where one is missing,
  // posts are held instead), then fewer.
  constexpr uint64_t kOrder = FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_WAW | FI_ORDER_RAR | FI_ORDER_SAS;
  constexpr uint64_t kOrderNoWar = kOrder & ~FI_ORDER_WAR;
  static constexpr Wish kWishes[] = {{kMsg, kOrder}, {kMsg, kOrderNoWar}, {kMsg, FI_ORDER_WAW}, {kMsg, 0},
                                     {0, kOrder},    {0, kOrderNoWar},    {0, FI_ORDER_WAW},    {0, 0}};
  int rc = -FI_ENODATA;
  for (const auto& w : kWishes) {
    fi_info* hints = lib.dupinfo(nullptr);  // what fi_allocinfo() does
    if (!hints) return say("fi_dupinfo", 0);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | w.caps;
    // The memory modes this code handles: addresses as VAs or offsets, registrations bound
    // to the endpoint, the provider's keys (asked of the target), local descriptors
    // (docs/ofi-providers.md).
    hints->domain_attr->mr_mode =
        FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_LOCAL;
    // Every operation's context is an fi_context2 the provider may use (OfiCtx, OfiSendCtx).
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->threading = FI_THREAD_SAFE;  // posting and polling threads, the progress thread
    // A local completion means the data is at the target (GNI's global event): delivery complete.
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->tx_attr->msg_order = w.order;
    if (!prov.empty()) hints->fabric_attr->prov_name = strdup(prov.c_str());
    rc = lib.getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &p->info);
    lib.freeinfo(hints);
    if (rc == 0 && p->info) break;
    p->info = nullptr;
  }
  if (rc || !p->info) return say(("no provider \"" + prov + "\" with RMA").c_str(), rc);
  fi_info* i = p->info;
  // libfabric's gni provider runs on libugni: its domain would attach a CDM of ours, which
  // opens a port again (docs/clients/libfabric.md, "Beside the ofi fabric").
  if (const char* name = i->fabric_attr->prov_name; name && std::strstr(name, "gni")) {
    const std::string why = std::string("provider \"") + name + "\" runs on libugni itself";
    p->teardown();
    return say(why.c_str(), 0);
  }
  p->virt_addr = i->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
  p->prov_key = (i->domain_attr->mr_mode & FI_MR_PROV_KEY) || want_key;
  p->emulated_key = want_key && !(i->domain_attr->mr_mode & FI_MR_PROV_KEY);
  p->mr_local = (i->domain_attr->mr_mode & FI_MR_LOCAL) || want_local;
  {
    std::random_device rd;  // keys of ours a peer cannot compute (and unique per process)
    p->key_seed = (uint64_t{rd()} << 32) ^ rd() ^ monotonic_ns();
  }
  p->mr_endpoint = i->domain_attr->mr_mode & FI_MR_ENDPOINT;
  p->cq_data = i->domain_attr->cq_data_size >= 8;
  p->waw = (i->tx_attr->msg_order & FI_ORDER_WAW) && i->ep_attr->max_order_waw_size >= 8;
  p->msgs = (i->caps & FI_MSG) && i->ep_attr->max_msg_size >= msg::kMaxMessage;
  // A peer learns a provider key by asking (kKey): without messages there is no way.
  if (p->prov_key && !p->msgs) {
    p->teardown();
    return say("the provider's keys (FI_MR_PROV_KEY) need FI_MSG to be asked for, which it does not offer", 0);
  }
  {
    // An order bit counts where it holds for any post (its max_order size covers max_msg_size).
    const uint64_t o = i->tx_attr->msg_order, most = i->ep_attr->max_msg_size;
    OfiOrderCaps c;
    c.raw = (o & FI_ORDER_RAW) && i->ep_attr->max_order_raw_size >= most;
    c.war = (o & FI_ORDER_WAR) && i->ep_attr->max_order_war_size >= most;
    c.waw = (o & FI_ORDER_WAW) && i->ep_attr->max_order_waw_size >= most;
    c.rar = (o & FI_ORDER_RAR) != 0;
    c.sas = (o & FI_ORDER_SAS) != 0;
    OfiOrderHooks hooks;
    hooks.owner = p.get();
    hooks.issue = [](void* o, void* item, const OfiOrderTicket& t) { return static_cast<OfiPort*>(o)->issue_held(item, t); };
    hooks.drop = [](void* o, void* item, uint64_t st) { static_cast<OfiPort*>(o)->drop_held(item, st); };
    p->order = std::make_unique<OfiOrder>(c, hooks, kMaxHeld);
  }
  if (i->domain_attr->mr_key_size < 8) p->key_mask = (uint64_t{1} << (8 * i->domain_attr->mr_key_size)) - 1;
  p->max_msg = i->ep_attr->max_msg_size;
  p->post_timeout = i->fabric_attr->prov_name && std::strstr(i->fabric_attr->prov_name, "ofi_rxd");
  p->post_timeout_ns = nicemu::params::env_uint(nicemu::params::param("client_ofi_post_timeout_ms")) * 1'000'000ull;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;  // the remote CQ data of peers' writes
  cq_attr.wait_obj = FI_WAIT_UNSPEC;
  if ((rc = lib.fabric(i->fabric_attr, &p->fabric, nullptr))) return p->teardown(), say("fi_fabric", rc);
  if ((rc = fi_domain(p->fabric, i, &p->domain, nullptr))) return p->teardown(), say("fi_domain", rc);
  if ((rc = fi_av_open(p->domain, &av_attr, &p->av, nullptr))) return p->teardown(), say("fi_av_open", rc);
  // A CQ with a wait object where fi_cq_sread is known to see completions: with libfabric
  // 1.13.1's tcp;ofi_rxm (the one the gni provider's processes load) completions waited for
  // there came only at its timeout, so before 1.17 the progress thread polls
  // (docs/clients/libfabric.md).
  p->waitable = lib.version() >= FI_VERSION(1, 17) && fi_cq_open(p->domain, &cq_attr, &p->cq, nullptr) == 0;
  if (!p->waitable) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    if ((rc = fi_cq_open(p->domain, &cq_attr, &p->cq, nullptr))) return p->teardown(), say("fi_cq_open", rc);
  }
  if ((rc = fi_endpoint(p->domain, i, &p->ep, nullptr))) return p->teardown(), say("fi_endpoint", rc);
  if ((rc = fi_ep_bind(p->ep, &p->av->fid, 0))) return p->teardown(), say("fi_ep_bind(av)", rc);
  if ((rc = fi_ep_bind(p->ep, &p->cq->fid, FI_TRANSMIT | FI_RECV))) return p->teardown(), say("fi_ep_bind(cq)", rc);
  if ((rc = fi_enable(p->ep))) return p->teardown(), say("fi_enable", rc);
  abi::ctl::OfiPublish pub{};
  pub.h.op = static_cast<uint16_t>(abi::ctl::Op::kOfiPublish);
  size_t len = sizeof pub.addr;
  if ((rc = fi_getname(&p->ep->fid, pub.addr, &len)) || len == 0 || len > sizeof pub.addr)
    return p->teardown(), say("fi_getname", rc);
  pub.addr_len = static_cast<uint32_t>(len);
  std::memcpy(p->self_addr, pub.addr, len);
  p->self_len = pub.addr_len;
  if (p->mr_local) {
    // The pool of registered send buffers (OfiPool), one registration for all of them.
    auto pool = std::make_unique<OfiPool>();
    pool->mem = std::make_unique<uint8_t[]>(OfiPool::kSlot * OfiPool::kSlots);
    if ((rc = p->reg(pool->mem.get(), OfiPool::kSlot * OfiPool::kSlots, FI_SEND | FI_WRITE, p->fresh_key(), &pool->mr)))
      return p->teardown(), say("fi_mr_reg of the send buffers (FI_MR_LOCAL)", rc);
    pool->desc = fi_mr_desc(pool->mr);
    for (uint32_t s = OfiPool::kSlots; s-- > 0;) pool->free.push_back(s);
    p->pool = std::move(pool);
  }
  if (p->msgs) {
    // Peers' requests and replies: a few in flight per peer at most (each waits for its reply).
    for (int k = 0; k < 64 && p->msgs; ++k) {
      auto r = std::make_unique<OfiRecv>();
      r->c.kind = CtxKind::kRecv;
      if (p->mr_local) {
        if ((rc = p->reg(r->buf, sizeof r->buf, FI_RECV, p->fresh_key(), &r->mr)))
          return p->teardown(), say("fi_mr_reg of a receive buffer (FI_MR_LOCAL)", rc);
        r->desc = fi_mr_desc(r->mr);
      }
      if (fi_recv(p->ep, r->buf, sizeof r->buf, r->desc, FI_ADDR_UNSPEC, &r->c.ctx) == 0) {
        p->recvs.push_back(std::move(r));
      } else {
        if (r->mr) fi_close(&r->mr->fid);
        if (k == 0) p->msgs = false;  // no receive at all: AMOs and GETs' events go through the daemons
      }
    }
    if (p->prov_key && !p->msgs)
      return p->teardown(), say("no receive buffer for the answers that provider keys (FI_MR_PROV_KEY) need", 0);
  }
  p->progress = std::thread([q = p.get()] { q->run(); });
  abi::ctl::Reply r{};
  if (!n->conn.call(pub, r) || r.rc != GNI_RC_SUCCESS) return p->teardown(), say("publishing the address", 0);
  n->ofi = p.release();
}

bool ofi_nic_down(Nic* n) {
  OfiPort* p = n->ofi;
  if (!p) return false;
  p->down.store(true, std::memory_order_relaxed);
  // What each post's events need, copied under the lock: a post reported here may complete
  // (and be freed) on another thread as soon as it is released.
  struct Report {
    OfiChain* chain;
    uint32_t chain_index;
    Cq* cq;
    uint16_t cq_mode;
    bool bte;
    uint32_t local_event;
    int32_t tid;
  };
  std::vector<Report> out;
  {
    std::lock_guard<std::mutex> lk(p->live_mu);
    if (p->down_reported) return false;
    p->down_reported = true;
    for (OfiOp* op = p->live; op; op = op->live_next) {
      if (op->reported) continue;
      op->reported = true;
      out.push_back({op->chain, op->chain_index, op->cq, op->cq_mode, op->bte, op->local_event, op->tid});
    }
  }
  for (const Report& r : out) {
    count(n->counters, ctr::cdm::ofi_errors);
    if (r.chain)
      r.chain->done(r.chain_index, cqe::kErrNicDown);
    else if (r.bte)
      rdma_local_events(r.cq, r.cq_mode, r.local_event, r.tid, cqe::kErrNicDown);
    else
      complete_fma(r.cq, r.cq_mode, r.local_event, cqe::kErrNicDown, r.tid);
  }
  // Held posts are on the live list too (reported above, freed here); held SMSG messages
  // fail NIC_DOWN with their channels.
  const uint32_t held = p->order->fail(OfiOrder::kAllPeers, cqe::kErrNicDown);
  return !out.empty() || held;
}

void ofi_close(Nic* n) {
  OfiPort* p = n->ofi;
  if (!p) return;
  msgq_ofi_quiesce(n);  // its verdicts ask through the port
  n->ofi = nullptr;
  // Posts in flight get a second to finish; what is left is dropped with the endpoint.
  for (int i = 0; i < 1000 && p->in_flight.load(std::memory_order_acquire); ++i) {
    timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  p->teardown();
  delete p;
  smsg_ofi_forget(n);  // its channels: no thread of the port runs any more
  msgq_ofi_forget(n);
}

void ofi_register(Nic* n, const gni_mem_handle_t& h, bool read_only) {
  OfiPort* p = n->ofi;
  if (!p || p->nic_is_down()) return;  // a target no daemon serves: peers' RMA must not land
  auto f = abi::mdh::decode(h.qword1, h.qword2);
  if (!f || (f->flags & abi::mdh::kFlagVmdh)) return;
  // The handle's pages: what a peer can compute from the handle alone.
  uint64_t access = FI_REMOTE_READ | (read_only ? 0 : FI_REMOTE_WRITE);
  // FI_MR_LOCAL: our posts' buffers too (sources of PUTs and sends; GETs' destinations).
  if (p->mr_local) access |= FI_WRITE | FI_SEND | (read_only ? 0 : FI_READ | FI_RECV);
  // Provider keys: the provider's (emulated: a random one), told to peers that ask.
  const uint64_t want = p->prov_key ? p->fresh_key() : p->key_of(h);
  fid_mr* mr = nullptr;
  int rc = p->reg(reinterpret_cast<void*>(f->va), f->npages << abi::mdh::kPageShift, access, want, &mr);
  const uint64_t key = rc == 0 && p->prov_key ? fi_mr_key(mr) : want;
  if (rc == 0 && key == FI_KEY_NOTAVAIL) {  // a raw key (FI_MR_RAW), which this port does not handle
    fi_close(&mr->fid);
    rc = -FI_ENOKEY;
  }
  if (rc) {
    // Peers' posts to it complete with a protection error; said, not failed here.
    std::fprintf(stderr, "libugni(nicemu): ofi fabric: fi_mr_reg: %s\n", ofi_strerror(-rc));
    return;
  }
  const OfiPort::Mr m{mr, h, key, fi_mr_desc(mr)};
  std::lock_guard<std::mutex> lk(p->mu);
  if (auto [it, fresh] = p->mrs.emplace(f->slot, m); !fresh) {
    fi_close(&it->second.mr->fid);  // a registration of the slot we missed the end of
    it->second = m;
  }
}

void ofi_deregister(Nic* n, const gni_mem_handle_t& h) {
  OfiPort* p = n->ofi;
  if (!p) return;
  auto f = abi::mdh::decode(h.qword1, h.qword2);
  if (!f) return;
  fid_mr* mr = nullptr;
  {
    std::lock_guard<std::mutex> lk(p->mu);
    auto it = p->mrs.find(f->slot);
    if (it == p->mrs.end()) return;
    mr = it->second.mr;
    p->mrs.erase(it);
  }
  fi_close(&mr->fid);
}

bool ofi_msgs(Nic* n, size_t bytes) {
  OfiPort* p = n->ofi;
  return p && p->msgs && bytes <= p->max_msg && bytes <= sizeof(OfiRecv::buf);
}

bool ofi_peer(Nic* n, uint32_t node, uint32_t route, uint64_t& addr) {
  fi_addr_t a = FI_ADDR_UNSPEC;
  if (!n->ofi || !n->ofi->resolve(node, route, a)) return false;
  addr = a;
  return true;
}

void ofi_forget_peer(Nic* n, uint32_t node, uint32_t route) {
  if (!n->ofi) return;
  std::lock_guard<std::mutex> lk(n->ofi->mu);
  n->ofi->peers.erase((uint64_t{node} << 32) | route);
}

int ofi_ask_route(Nic* n, uint32_t node, uint32_t route, std::string& addr) {
  OfiPort* p = n->ofi;
  if (!p) return -1;
  const PeerAnswer a = p->ask_peer((uint64_t{node} << 32) | route);
  addr = a.addr;
  return a.state == PeerAnswer::kLives ? 1 : a.state == PeerAnswer::kGone ? 0 : -1;
}

std::string ofi_peer_name(Nic* n, uint64_t dest) {
  OfiPort* p = n->ofi;
  if (!p) return {};
  std::lock_guard<std::mutex> lk(p->mu);
  auto it = p->av_raw.find(static_cast<fi_addr_t>(dest));
  return it == p->av_raw.end() ? std::string() : it->second;
}

bool ofi_insert(Nic* n, const uint8_t* name, uint32_t len, uint64_t& addr) {
  fi_addr_t a = FI_ADDR_UNSPEC;
  if (!n->ofi || len == 0 || len > abi::ctl::kOfiAddrMax || fi_av_insert(n->ofi->av, name, 1, &a, 0, nullptr) != 1)
    return false;
  addr = a;
  return true;
}

uint32_t ofi_self_name(Nic* n, uint8_t* out) {
  if (!n->ofi) return 0;
  std::memcpy(out, n->ofi->self_addr, n->ofi->self_len);
  return n->ofi->self_len;
}

uint64_t ofi_send(Nic* n, uint64_t dest, const void* buf, size_t len, OfiSendCtx* c, bool patient) {
  OfiPort* p = n->ofi;
  if (!p) return cqe::kErrTransient;
  c->kind = static_cast<uint8_t>(CtxKind::kSmsg);
  void* desc = nullptr;
  if (p->mr_local) {
    // The frame's copy in a pool slot (or the frame registered), given back at completion.
    Lent l;
    buf = p->lend(l, buf, len, FI_SEND, true);
    if (!p->local_ok(l)) return cqe::kErrTransient;  // counted, said once
    desc = l.desc;
    c->lent_mr = std::exchange(l.own, nullptr);
    c->lent_pool = std::exchange(l.pool, nullptr);
    c->lent_slot = l.slot;
  }
  p->in_flight.fetch_add(1, std::memory_order_relaxed);
  uint64_t give_up = 0;
  for (int tries = 0;; ++tries) {
    ssize_t rc = fi_send(p->ep_to(dest), buf, len, desc, dest, c->provider);
    if (rc == 0) return cqe::kOk;
    if (rc == -FI_EAGAIN && patient && !give_up) give_up = monotonic_ns() + 2000000000ull;
    if (rc != -FI_EAGAIN || (patient ? monotonic_ns() > give_up : tries >= 16)) {
      p->give_back(c);
      p->in_flight.fetch_sub(1, std::memory_order_release);
      return rc == -FI_EAGAIN ? cqe::kErrTransient : status_of_error(static_cast<int>(-rc));
    }
    // Room comes as the provider progresses: an application thread drives it (the progress
    // thread may keep away from a poller); the driving thread itself must not re-enter.
    if (patient) ofi_poll(n);
    std::this_thread::yield();
  }
}

namespace {

// ofi_post, a chain's member (chain: its events go there) or only the question whether it
// would be taken (dry: nothing posted, nothing allocated).
OfiTaken post_impl(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine, int32_t tid,
               OfiChain* chain, uint32_t chain_index, bool dry) {
  Nic* n = ep->nic;
  OfiPort* p = n->ofi;
  if (!p || n->nic_down.load(std::memory_order_relaxed)) return OfiTaken::kNo;
  // PUT and GET as RMA, remote events of PUTs where the provider carries 8 bytes of CQ
  // data; AMOs, CQ writes and GETs' remote events as messages the target's progress thread
  // executes (FI_MSG). vMDH handles (no provider registration) and zero lengths keep the
  // daemons' path.
  const bool amo = kind == rop::kAmo;
  const bool cqw = kind == rop::kCqWrite;
  const bool sync = post_type(d) == GNI_POST_FMA_PUT_W_SYNCFLAG;
  const bool event = d->cq_mode & GNI_CQMODE_REMOTE_EVENT;
  if (kind != rop::kPut && kind != rop::kGet && !((amo || cqw) && p->msgs)) return OfiTaken::kNo;
  if (event && kind == rop::kPut && !p->cq_data) return OfiTaken::kNo;
  if (event && kind == rop::kGet && !p->msgs) return OfiTaken::kNo;  // a read carries no CQ data: a message does
  if (!amo && !cqw && (d->length == 0 || d->length > p->max_msg)) return OfiTaken::kNo;
  std::optional<amo::Command> cmd;
  if (amo && !(cmd = amo::decode(amo_command(d->amo_cmd)))) return OfiTaken::kNo;  // checked when posted (check_fma)
  if (!ep->other_host()) return OfiTaken::kNo;  // same host: a target we may not reach ourselves
  const gni_mem_handle_t& rh = d->remote_mem_hndl;
  auto f = abi::mdh::decode(rh.qword1, rh.qword2);
  if (!f || (f->flags & abi::mdh::kFlagVmdh)) return OfiTaken::kNo;
  const bool get = kind == rop::kGet;
  fi_addr_t dest;
  if (!p->resolve(ep->remote_addr, abi::mdh::route_of(rh.qword1, rh.qword2), dest)) return OfiTaken::kNo;
  const uint64_t length = amo ? cmd->size : cqw ? 0 : d->length;
  // The local side: an FMA PUT reads its source by VA (registered or not); GETs, RDMA and
  // fetching AMOs go through our own registration, which must cover the transfer (one
  // piece: a multi-segment local handle names offsets, and goes the daemons' way).
  uint64_t local = d->local_addr;
  uint64_t local_error = cqe::kOk;
  if (get || engine == rop::kBte || (amo && cmd->fetching)) {
    abi::Extents pieces;
    if (translate_access(*n->self, d->local_mem_hndl, d->local_addr, length, false, nullptr, pieces))
      local_error = cqe::kErrLocalProtection;
    else if (pieces.size() != 1)
      return OfiTaken::kNo;
    else
      local = pieces[0].va;
  }
  if (dry) return OfiTaken::kYes;

  auto* op = new OfiOp;
  p->link(op);
  op->chain = chain;
  op->chain_index = chain_index;
  op->peer = (uint64_t{ep->remote_addr} << 32) | abi::mdh::route_of(rh.qword1, rh.qword2);
  op->cq = cq;
  op->cq_mode = local_events(d);
  op->bte = engine == rop::kBte;
  op->local_event = ep->local_event;
  op->tid = tid;
  op->dest = dest;
  // A post the target executes (an AMO, a CQ write) or finishes (a GET's remote event):
  // the request, with our credential and where to answer.
  const bool by_msg = cqw || amo || (get && event);
  if (by_msg) {
    msg::Request& q = op->req;
    op->msg_kind = cqw ? msg::kCqWrite : amo ? msg::kAmo : msg::kEvent;
    q.h = msg::header(static_cast<msg::Type>(op->msg_kind), 0, sizeof q);
    q.ptag = n->cdm->ptag;
    q.cookie = n->cdm->cookie;
    q.engine = op->bte ? msg::kBte : msg::kFma;
    q.flags = amo && event ? msg::kFlagRemoteEvent : 0;
    q.amo_cmd = amo ? amo_command(d->amo_cmd) : 0;
    q.remote_event = ep->remote_event;
    q.qword1 = rh.qword1;
    q.qword2 = rh.qword2;
    q.addr = d->remote_addr;
    q.length = d->length;
    q.operand1 = cqw ? d->cqwrite_value : d->first_operand;
    q.operand2 = d->second_operand;
    q.reply_len = p->self_len;
    std::memcpy(q.reply_addr, p->self_addr, p->self_len);
  }
  if (local_error) {
    p->in_flight.fetch_add(1, std::memory_order_relaxed);
    p->complete(op, local_error);
    return OfiTaken::kYes;
  }
  // The provider would refuse it too, as "protection"; a message's target checks it itself.
  if (!get && !by_msg && (f->flags & abi::mdh::kFlagReadOnly)) {
    p->in_flight.fetch_add(1, std::memory_order_relaxed);
    p->complete(op, cqe::kErrReadOnly);
    return OfiTaken::kYes;
  }
  const uint64_t base = p->virt_addr ? 0 : f->va;
  op->how = by_msg && !get ? kHowMsg : get ? kHowRead : kHowWrite;
  op->local = local;
  op->length = d->length;
  op->raddr = d->remote_addr - base;
  if (!p->prov_key) op->key = p->key_of(rh);
  op->data = event ? cq_data(op->bte, f->slot, ep->remote_event) : 0;
  op->data_event = event && !sync && !get;
  op->event_after = get && event;
  if (amo && cmd->fetching) {
    op->fetch_va = local;
    op->fetch_size = cmd->size;
  }
  if (sync) {
    op->sync = true;
    op->flag = d->sync_flag_value;
    op->flag_event = event;
    op->flag_addr = d->sync_flag_addr - base;
  }
  // FI_MR_LOCAL: the GNI registration the post names covers its local buffer (a GET's
  // destination, an RDMA PUT's source; an FMA PUT's source if it names one), else the port
  // lends one at issue (prepare_local).
  if (p->mr_local && op->how != kHowMsg) p->gni_desc(op->lent[0], d->local_mem_hndl, local, d->length);
  p->in_flight.fetch_add(1, std::memory_order_relaxed);
  count(n->counters, ctr::cdm::ofi_ops);
  count(n->counters, ctr::cdm::ofi_bytes, length);
  // Provider keys: an RMA's key is the target's answer, cached or asked now (the post held
  // until it comes, as the posts to that peer behind it).
  if (p->prov_key && op->how != kHowMsg) {
    op->rq1 = rh.qword1, op->rq2 = rh.qword2;
    p->key_for(op);
  }
  // Issued now if nothing it may not pass is in flight to its peer (ofi_order.h), else held
  // until that took effect: the call returns either way. A GET with a remote event counts
  // as a read: its data is what takes effect first.
  const OfiPath path = op->how == kHowMsg ? OfiPath::kMsg : get ? OfiPath::kRead : OfiPath::kWrite;
  const ordering::Class cls = ordering::class_of(forced_ordering(n), d->dlvr_mode, 0);
  // Waiting for its key: held (a relaxed post too, which hold would let go at once), at its
  // FIFO's head until the answer.
  const bool wait_key = op->key_wait.load(std::memory_order_acquire) != 0;
  if (wait_key || !p->order->enter(dest, path, cls, op->order)) {
    const ordering::Class hold_cls = wait_key && cls == ordering::kRelaxed ? ordering::kDefault : cls;
    // A chain's members are bounded by their chain (one transaction id): not capped.
    switch (p->order->hold(dest, path, hold_cls, op, !chain, op->order)) {
      case OfiAdmit::kGo:
        break;
      case OfiAdmit::kHeld:
        return OfiTaken::kYes;  // op may be issued, even gone, already
      case OfiAdmit::kFull:
        if (p->prov_key) p->unwait(op);
        p->unlink(op);
        delete op;
        p->in_flight.fetch_sub(1, std::memory_order_release);
        return OfiTaken::kFull;
    }
  }
  p->issue(op, true);
  return OfiTaken::kYes;
}

}  // namespace

OfiTaken ofi_post(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine, int32_t tid) {
  return post_impl(ep, cq, d, kind, engine, tid, nullptr, 0, false);
}

bool ofi_chain_takes(Ep* ep, const gni_post_descriptor_t* m, uint16_t kind) {
  Nic* n = ep->nic;
  // Faults act on chains through the daemons (their channel applies packet rules and link
  // windows; transaction rules there too), as NIC down does.
  if (!n->ofi || n->fault_page->active.load(std::memory_order_relaxed)) return false;
  if (n->self->state() == abi::kRegionNicDown) return false;
  return post_impl(ep, nullptr, m, kind, rop::kFma, -1, nullptr, 0, true) == OfiTaken::kYes;
}

OfiChain* ofi_chain_open(Nic*, Cq* cq, const gni_post_descriptor_t* first, uint32_t local_event, int32_t tid) {
  auto* c = new OfiChain;
  c->cq = cq;
  c->cq_mode = local_events(first);
  c->local_event = local_event;
  c->tid = tid;
  return c;
}

void ofi_chain_post(OfiChain* c, Ep* ep, const gni_post_descriptor_t* m, uint16_t kind, uint32_t index) {
  c->left.fetch_add(1, std::memory_order_relaxed);
  // Its peer forgotten since ofi_chain_takes (it died meanwhile): not taken, failed here.
  if (post_impl(ep, nullptr, m, kind, rop::kFma, -1, c, index, false) != OfiTaken::kYes) c->done(index, cqe::kErrTransient);
}

void ofi_chain_close(OfiChain* c, uint32_t fail_index, uint64_t fail_status) {
  c->done(fail_index, fail_status);  // the poster's hold, with the same-host members' verdict
}

}  // namespace nicemu::ugni

#endif
