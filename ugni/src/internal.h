// libugni internals: the objects behind the opaque gni_*_handle_t pointers. The library is
// the processor of design decision 1: same-host FMA and SMSG run here, directly on shared
// memory (CQ rings, mailboxes) and on peers' memory (cross-memory attach), validated
// against the target's daemon-written registration table.
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gni_pub.h"
#include "nicemu/abi/bte_ring.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/cq_ring.h"
#include "nicemu/abi/fault_layout.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/dgram_ring.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/relay_ring.h"
#include "nicemu/abi/shm_layout.h"
#include "nicemu/ctl/ctl_client.h"
#include "counters.h"
#include "nicemu/abi/smsg_channel.h"

static_assert(int{GNI_RC_SUCCESS} == int{nicemu::abi::gni::kSuccess} &&
              int{GNI_RC_ERROR_NOMEM} == int{nicemu::abi::gni::kErrorNomem});
static_assert(int{GNI_RC_ILLEGAL_OP} == int{nicemu::abi::gni::kIllegalOp} &&
              int{GNI_RC_NO_MATCH} == int{nicemu::abi::gni::kNoMatch});
static_assert(GNI_MEM_READ_ONLY == nicemu::abi::gni::kMemReadOnly);
static_assert(GNI_DEVICE_ARIES == nicemu::abi::gni::kDeviceAries);
static_assert(GNI_CQ_EVENT_TYPE_SMSG == nicemu::abi::cqe::kTypeSmsg);

namespace nicemu::ugni {

// The SMSG mailbox protocol (abi/smsg_channel.h); its functions are found by argument.
using abi::MailboxView;
using abi::SendResult;

// The device_id that means "the nearest device" (GNI_CdmAttach, Cray's header).
inline constexpr uint32_t kNearestDevice = 0xFFFFFFFFu;

inline constexpr uint32_t kCdmMagic = 0x43444d31, kNicMagic = 0x4e494331, kEpMagic = 0x45503031,
                          kCqMagic = 0x43513031, kCeMagic = 0x43453031;

// A CDM region mapped into this process: our own, or a peer's (same host). The read-only
// section is mapped PROT_READ, the heap read-write.
struct Region {
  char* base = nullptr;
  uint64_t size = 0;
  pid_t pid = 0;
  uint64_t attach_id = 0;
  uint32_t nic_addr = 0;
  uint32_t inst_id = 0;
  // The kernel refuses this process cross-memory attach to the owner (another user, Yama
  // ptrace_scope 2/3, a seccomp filter): FMA and AMOs on it go through our daemon, RDMA
  // through its BTE engine (Nic::resolve decides once per peer; docs/decisions.md).
  // Written before the region is shared, read-only after.
  bool xmem_refused = false;

  // Maps a region from its three memfds (abi/region_map.h: read-only section, MDD table,
  // heap); closes them. Refuses a region whose read-only section or MDD table is not sealed
  // against writers.
  static std::shared_ptr<Region> map(int (&fds)[3], uint64_t size, uint64_t ro_size);
  ~Region();

  const abi::RegionHeader* header() const { return reinterpret_cast<const abi::RegionHeader*>(base); }
  uint32_t state() const { return abi::region_state(*header()); }
  bool alive() const { return state() == abi::kRegionAlive; }
  // Copies registration `slot` out under its seqlock; false if it kept changing.
  bool read_reg(uint32_t slot, abi::RegEntry& out) const;
  // A ring view of CQ `slot`, bounds-checked against the region; invalid view if not live.
  abi::CqRingView cq_view(uint32_t slot) const;
  bool in_heap(uint64_t offset, uint64_t bytes) const {
    return offset >= abi::kRoSize && bytes <= size && offset <= size - bytes;
  }
};

// The page every Nic points at until it maps its daemon's (fault_engine.cpp).
const abi::fault::Page* fault_off_page();

struct Cdm;
struct Nic;
class MddTable;
struct Cq;
struct Ep;

struct Cdm {
  uint32_t magic = kCdmMagic;
  uint32_t inst_id = 0;
  uint8_t ptag = 0;
  uint32_t cookie = 0;
  uint32_t modes = 0;
  Nic* nic = nullptr;
};

// A posted descriptor waiting for GNI_GetCompleted.
struct Inflight {
  gni_post_descriptor_t* desc = nullptr;
  uint16_t remaining = 0;  // events still to be consumed (2 with DUAL_EVENTS)
  uint16_t modes = 0;      // GNI_CQMODE_LOCAL/GLOBAL_EVENT bits whose event is not consumed yet
  // Set while our daemon holds the post (Nic::to_daemon): if the daemon dies, the library
  // completes it with an error in `cq` (Nic::orphan_event).
  bool daemon = false;
  bool bte = false;
  uint32_t local_event = 0;
  Cq* cq = nullptr;
};

// The CDM's BTE submission ring (bte_requester.cpp), mapped on the first GNI_PostRdma.
struct BteQueue {
  std::mutex mu;                    // serialises opening
  std::atomic<bool> open{false};
  abi::BteRingView view;
  int doorbell = -1;                // eventfd the daemon's BTE dispatcher sleeps on
  std::atomic<uint32_t> next_ep_id{1};
  ~BteQueue() {
    if (doorbell >= 0) ::close(doorbell);
  }
};

// The CDM's finished datagrams (datagram.cpp): the daemon's completion ring, mapped on the
// first post, and what was taken off it but not yet consumed by a test or wait.
struct DgramFinished {
  uint64_t ep = 0;
  uint64_t id = 0;
  bool has_id = false;
  uint32_t state = 0;
  uint32_t peer_addr = 0, peer_inst = 0;
  uint16_t len = 0;
  uint8_t data[abi::ctl::kDgramMaxSize];
};
struct DgramState {
  std::mutex mu;                               // serialises everything below and the EPs' dgram_*
  abi::DgramRingView ring;                     // invalid until the first post
  uint64_t next_seq = 0;
  uint32_t post_limit = 0;                     // per-process outstanding posts; 0 = none
  std::map<uint64_t, DgramFinished> finished;  // lib_seq -> finished post, in posting order
};

struct CePosts;  // ce.cpp
struct OfiPort;  // ofi_port.cpp
struct SmsgOfi;    // smsg_ofi.cpp: SMSG channels over the ofi fabric
struct MsgqOfi;    // msgq_ofi.cpp: MSGQ streams over the ofi fabric
struct SmsgOfiTx;
struct SmsgOfiRx;

struct Nic {
  uint32_t magic = kNicMagic;
  Cdm* cdm = nullptr;
  uint32_t nic_addr = 0;
  uint32_t device_type = GNI_DEVICE_ARIES;
  std::string rundir;
  nicemu::ctl::Connection conn;            // the attach connection: its closure detaches us
  std::shared_ptr<Region> self;    // our own region
  uint32_t mem_domain = 0;         // the MDH of our registrations (mem_handle.h)
  std::shared_ptr<MddTable> mdd;  // the process's MDD table of our credential (mdd_table.h)
  std::atomic<bool> nic_down{false};
  uint32_t empty_polls = 0;        // paces liveness checks of the daemon
  // The attach socket hung up: no thread of the daemon runs any more, so nothing it held
  // will be completed by it (daemon_gone).
  std::atomic<bool> daemon_exited{false};
  // The ofi fabric's endpoint of this CDM (ofi_port.h); null: posts to other hosts go to
  // the daemon.
  OfiPort* ofi = nullptr;
  std::atomic<SmsgOfi*> smsg_ofi{nullptr};  // made at the first SMSG channel over it (smsg_ofi.h)
  std::atomic<MsgqOfi*> msgq_ofi{nullptr};  // made at the first MSGQ frame over it (msgq_ofi.h)

  std::mutex inflight_mu;
  std::vector<Inflight> inflight;  // indexed by CQE tid
  std::vector<uint16_t> free_tids;
  // Once the daemon is gone, the error events of the posts it held, per CQ (under
  // inflight_mu); handed out when that CQ's ring is drained (orphan_event).
  std::map<Cq*, std::vector<uint64_t>> orphans;
  bool orphans_built = false;  // under inflight_mu

  std::mutex peers_mu;
  std::map<std::pair<uint32_t, uint32_t>, std::shared_ptr<Region>> peers;  // (addr, domain) -> region
  std::map<uint32_t, std::unique_ptr<nicemu::ctl::Connection>> daemons;           // other nodes' daemons
  // NIC addresses with no daemon on this host, and until when (CLOCK_MONOTONIC ns) that is
  // believed without trying to connect again: posts to another host's node fail fast.
  std::map<uint32_t, uint64_t> no_daemon_until;
  // Whether a NIC address lives on another host (no daemon socket here), and until when
  // that answer stands (CLOCK_MONOTONIC ns). Under peers_mu.
  std::map<uint32_t, std::pair<bool, uint64_t>> other_host_cache;
  // Probes whether cross-memory attach reaches a new peer's owner; sets Region::xmem_refused,
  // counts it and says it once per process on stderr.
  void note_reach(Region& r);
  bool on_other_host(uint32_t addr);
  // Chains with members on other hosts, numbered for the daemon (RemotePost::chain_id).
  std::atomic<uint64_t> next_chain_id{1};

  std::atomic<uint32_t> stats[GNI_NUM_STATS] = {};  // GNI_GetNicStat; add with stat_add()
  abi::counters::CdmCounterBlock* counters = unbound_counter_block();  // in `self` once attached
  uint16_t smsg_max_retrans = FMA_SMSG_MAX_RETRANS_DEFAULT;
  uint16_t smsg_dlvr_mode = GNI_DLVMODE_PERFORMANCE;  // stored; same-host SMSG is in order anyway
  uint32_t mdd_resources = 0;      // GNI_SetMddResources: the vMDH block size (mem.cpp)
  std::atomic<uint32_t> live_cqs{0};
  std::atomic<uint32_t> live_regs{0};
  BteQueue bte;
  // The relay ring (abi/relay_ring.h) every SMSG send to another host goes through; set by
  // the first relay open. relay_mu serialises producers.
  std::mutex relay_mu;
  abi::RelayRingCtl* relay_ring = nullptr;
  // RemotePosts sent to our daemon (ctl::SmsgRelaySend::posts_before): a relayed message
  // names how many came before it, and the daemon keeps it behind them.
  std::atomic<uint32_t> remote_posts_sent{0};
  DgramState dgram;
  std::atomic<uint64_t> ep_serial{0};
  // Fault injection (fault_engine.h): the daemon's fault page, mapped at attach (an all-off
  // page before), and how many of our transactions the reorder engine holds. Hot paths
  // test both with one branch; the rest lives in fault_engine.cpp.
  const abi::fault::Page* fault_page = fault_off_page();
  std::atomic<uint32_t> fault_held{0};
  struct FaultState* fault_state = nullptr;  // guarded by the engine's lock
  std::atomic<CePosts*> ce_posts{nullptr};  // ce.cpp: made on the first CE post

  // Returns the region of memory domain `domain` (the MDH of a handle it issued) at NIC
  // address `addr`, in our protection domain, looking it up at its daemon if not mapped yet
  // or if the mapped one is dead. nullptr with `status` set on failure.
  // `domain`: a route (mem_handle.h), a memory domain or a vMDH index | kVmdhRoute.
  std::shared_ptr<Region> resolve(uint32_t addr, uint32_t domain, uint64_t& status);
  // Checks (cheaply, every so often) that the daemon is still there.
  bool daemon_alive();
  int32_t alloc_tid(gni_post_descriptor_t* d, uint16_t modes);  // modes: the local events asked for
  // Before a post with local events (`tid` >= 0) goes to our daemon, which will complete it
  // in `cq`: remembered so that the library fails it if the daemon dies (finding F3);
  // `handed` false takes it back (the daemon never got it; the caller completes it).
  void to_daemon(int32_t tid, Cq* cq, uint32_t local_event, bool bte, bool handed = true);
  // Whether the daemon process is gone for good (its attach socket hung up); one poll()
  // until it is.
  bool daemon_gone();
  // With the NIC down and `cq` drained: the next error event of a post our dead daemon
  // held, false when there is none (left).
  bool orphan_event(Cq* cq, uint64_t& entry);
  // GNI_CqDestroy: no event goes to `cq` any more.
  void forget_cq(Cq* cq);
};

struct Cq {
  uint32_t magic = kCqMagic;
  Nic* nic = nullptr;
  uint32_t slot = 0;
  gni_cq_mode_t mode = 0;
  abi::CqRingView ring;
  void (*handler)(gni_cq_entry_t*, void*) = nullptr;
  void* context = nullptr;
  std::atomic<uint32_t> users{0};  // EPs using it as src CQ
  std::atomic<uint32_t> interrupt_mask{0};  // GNI_CqInterruptMask count; vector waits refuse while > 0
};

// A CQ of a (usually other) region that one producer pushes to again and again: an SMSG
// channel's receiver CQ. Deriving the view means reading the daemon's descriptor and
// bounds-checking it against the region (a third of an SMSG send's instructions); the
// cache keeps the view with the descriptor fields it came from, and a push re-reads only
// those (one line the daemon writes only when the CQ is created or destroyed), so a CQ
// destroyed, or re-created elsewhere, is noticed as before. `head_seen` is the producer's
// private copy of the ring's head (CqRingView::push).
struct CqTarget {
  abi::CqRingView view;
  const char* base = nullptr;  // the region the view points into
  uint32_t capacity = 0;
  uint64_t ctl_offset = 0;
  uint64_t entries_offset = 0;
  uint64_t head_seen = 0;

  static const abi::CqDesc* desc(const Region& r, uint32_t slot) {
    return reinterpret_cast<const abi::CqDesc*>(r.base + abi::kCqTableOffset) + slot;
  }
  bool still_valid(const Region& r, uint32_t slot) const {
    if (!view.valid() || r.base != base || slot >= abi::kCqSlots) return false;
    const abi::CqDesc* d = desc(r, slot);
    return d->state.load(std::memory_order_acquire) == abi::kCqLive && d->capacity == capacity &&
           d->ctl_offset == ctl_offset && d->entries_offset == entries_offset;
  }
  void keep(const Region& r, uint32_t slot, const abi::CqRingView& v) {
    const abi::CqDesc* d = desc(r, slot);
    if (v.ctl != view.ctl) head_seen = 0;
    view = v;
    base = r.base;
    capacity = uint32_t(v.mask + 1);
    ctl_offset = d->ctl_offset;
    entries_offset = d->entries_offset;
  }
};

// One direction of an SMSG channel, i.e. one mailbox (layout in shm_layout.h).
struct Mailbox {
  std::shared_ptr<Region> region;  // receiver's region (ours for the receive side)
  MailboxView view;
  uint32_t dst_cq = abi::kNoCq;    // receiver's CQ for remote SMSG events
  CqTarget dst_cache;              // its checked view (push_remote_event)
  // Across hosts (smsg_relay.h): no mailbox mapped (`region` null, view without ctl); the
  // daemon relays, and this block in our own heap says credits and failure.
  abi::SmsgRelayCtl* relay = nullptr;
  uint32_t relay_id = 0;
  // Across hosts over the ofi fabric (smsg_ofi.h): no mailbox mapped; the channel's state.
  SmsgOfiTx* ofi = nullptr;
  bool valid() const { return view.ctl != nullptr || relay != nullptr || ofi != nullptr; }
};

struct Ep {
  uint32_t magic = kEpMagic;
  Nic* nic = nullptr;
  Cq* src_cq = nullptr;
  bool bound = false;
  uint32_t remote_addr = 0;
  uint32_t remote_id = 0;
  uint32_t local_event = 0;
  uint32_t remote_event = 0;
  std::shared_ptr<Region> peer;   // the last target region (target_of), resolved lazily
  uint32_t peer_domain = 0;       // its memory domain
  // Whether remote_addr lives on another host: -1 not known yet, else 0/1. Decided once per
  // binding (other_host()), so posts and MSGQ sends do not ask the NIC each time.
  std::atomic<int8_t> host_route{-1};
  bool other_host();
  Mailbox tx;                     // peer's mailbox we send into
  Mailbox rx;                     // our mailbox the peer sends into
  bool rx_holding = false;        // a message returned by GetNext awaits SmsgRelease
  // A send of ours on this EP failed (receiver gone, channel lost, NIC down): from then on an
  // empty mailbox reads as a broken connection (smsg.cpp, get_next).
  std::atomic<bool> tx_failed{false};
  uint32_t rx_noted = ~0u;        // the MboxCtl::note_at this EP last sent a note for
  SmsgOfiRx* ofi_rx = nullptr;    // our mailbox's sender over the ofi fabric, once seen (smsg_ofi.h)
  uint32_t bte_id = 0;            // ordering domain of its RDMA posts (0 = none yet)
  uint64_t dgram_key = 0;         // names this EP's datagrams at the daemon (never reused)
  // The datagram outstanding on this EP (posted, not consumed), under nic->dgram.mu.
  uint64_t dgram_seq = 0;         // its lib_seq; 0 = none
  bool dgram_has_id = false;
  uint64_t dgram_id = 0;
  void* dgram_out = nullptr;      // out_buf of the datagram posted on this EP
  uint16_t dgram_buf_size = 0;
  uint32_t smsg_held = 0;         // messages accepted but held by the reorder engine (its lock)
  uint32_t smsg_next = 0;         // next SMSG sequence number while some are held (its lock)
  // GNI_EpSetCeAttr: the tree edge this EP stands for (ce.cpp); ce_child_type 0 = none.
  uint32_t ce_id = 0;
  uint32_t ce_child_id = 0;
  uint32_t ce_child_type = 0;
};

// The region a memory operation on `ep` naming `remote` targets: the NIC reaches memory by
// (NIC address, route of the handle: its memory domain, or its vMDH index), whatever id the
// EP was bound with. Cached in ep->peer; nullptr with `status` set when there is none on
// this host.
inline Region* target_of(Ep* ep, const gni_mem_handle_t& remote, uint64_t& status) {
  const uint32_t domain = abi::mdh::route_of(remote.qword1, remote.qword2);
  if (!ep->peer || ep->peer_domain != domain || !ep->peer->alive()) [[unlikely]] {
    ep->peer = ep->nic->resolve(ep->remote_addr, domain, status);
    ep->peer_domain = domain;
  }
  return ep->peer.get();
}

// Whether a post on `ep` goes to our daemon (its target is on another host): a peer already
// resolved is on this host.
inline bool posts_through_daemon(Ep* ep) { return !ep->peer && ep->other_host(); }

// The same for an FMA or AMO naming `remote`: also when its target is a same-host process
// this one may not reach by cross-memory attach. A resolved peer answers with a flag of its
// mapping (no system call on the path that works); the first post of an EP resolves it.
bool first_route_through_daemon(Ep* ep, const gni_mem_handle_t& remote);
inline bool fma_through_daemon(Ep* ep, const gni_mem_handle_t& remote) {
  if (const Region* p = ep->peer.get();
      p && ep->peer_domain == abi::mdh::route_of(remote.qword1, remote.qword2)) [[likely]]
    return p->xmem_refused;
  return first_route_through_daemon(ep, remote);
}

// Posts for a NIC address of another host (remote_post.cpp): handed to our daemon, which
// carries them over the fabric; their events arrive in `cq` later. `kind`/`engine` are
// abi::remote values. Always GNI_RC_SUCCESS once the post is accepted (errors are events).
gni_return_t post_remote(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine,
                         int32_t tid);

// GNI_PostFma of type GNI_POST_CE (ce.cpp): the operand goes to our daemon's collective
// engine; the result and the post's events come when the whole tree has contributed.
gni_return_t post_ce(Ep* ep, gni_post_descriptor_t* d);
// A bound EP with leaf CE attributes tells our daemon which channel it feeds (CeMember).
void ce_announce_leaf(Ep* ep);
// Drops the CDM's mapping of its job's CE post page (GNI_CdmDestroy).
void ce_forget_nic(Nic* n);

// A member of a chained post whose target is on another host (ct_requester.cpp): the
// daemon posts the chain's one event (abi/remote_ops.h, RemotePost::chain_id).
struct RemoteChainMember {
  uint64_t id;
  uint32_t members, index, fail_index, fail_status;
  uint32_t local_event;  // the first EP's, which the chain's event carries
};
// Sends one post to our daemon as post_remote does; false (nothing sent, no event) when
// the daemon is gone.
bool send_remote_post(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine, int32_t tid,
                      const RemoteChainMember* chain);

// Process-wide helpers.
std::string daemon_socket();                       // the socket of this process's node
bool daemon_hello(abi::ctl::HelloReply& out);      // cached HELLO to that daemon
uint32_t spin_ns();                                // spin budget before blocking (then abi::spin_step)

// Dequeues one entry of `cq` as GNI_CqGetEvent does (overrun first, the handler, NIC-down
// detection); shared by the single-CQ and the vector waits (cq.cpp).
gni_return_t take_event(Cq* cq, gni_cq_entry_t* event_data);

// A handle is a pointer to one of our objects; its magic tells a live object of that type
// from a stale, destroyed or foreign one (nullptr then).
template <class T, uint32_t Magic, class Handle>
T* from_handle(Handle h) {
  auto* p = reinterpret_cast<T*>(h);
  return p && p->magic == Magic ? p : nullptr;
}
inline Nic* as_nic(gni_nic_handle_t h) { return from_handle<Nic, kNicMagic>(h); }
inline Cdm* as_cdm(gni_cdm_handle_t h) { return from_handle<Cdm, kCdmMagic>(h); }
inline Ep* as_ep(gni_ep_handle_t h) { return from_handle<Ep, kEpMagic>(h); }
inline Cq* as_cq(gni_cq_handle_t h) { return from_handle<Cq, kCqMagic>(h); }

// One request to our daemon whose reply starts with an abi::ctl::Reply: the reply's rc, or
// `gone` when the daemon does not answer.
template <class Req, class Rep>
gni_return_t daemon_call(Nic* n, Req& req, Rep& rep, gni_return_t gone = GNI_RC_ERROR_RESOURCE) {
  if (!n->conn.call(req, rep)) return gone;
  return static_cast<gni_return_t>(rep.r.rc);
}

// The transfer a post descriptor names: both addresses with their memory handles, and the
// length; into a requester's operation (FmaOp, RdmaOp) ...
template <class Op>
void copy_transfer(Op& op, const gni_post_descriptor_t* d) {
  op.local_addr = d->local_addr;
  op.local_mem_hndl = d->local_mem_hndl;
  op.remote_addr = d->remote_addr;
  op.remote_mem_hndl = d->remote_mem_hndl;
  op.length = d->length;
}
// ... or, with the handles as their two qwords and the peer, into a request to our daemon
// (the BTE ring's request, a remote post).
template <class Msg>
void copy_transfer_to_daemon(Msg& m, const Ep* ep, const gni_post_descriptor_t* d) {
  m.remote_nic = ep->remote_addr;
  m.local_addr = d->local_addr;
  m.local_qword1 = d->local_mem_hndl.qword1;
  m.local_qword2 = d->local_mem_hndl.qword2;
  m.remote_addr = d->remote_addr;
  m.remote_qword1 = d->remote_mem_hndl.qword1;
  m.remote_qword2 = d->remote_mem_hndl.qword2;
  m.length = d->length;
}

// What every post (FMA, BTE, CE, CQ write, chained) checks and does before it runs.
// The EP it goes through: live and bound, with a descriptor; nullptr otherwise.
inline Ep* posting_ep(gni_ep_handle_t h, const gni_post_descriptor_t* d) {
  Ep* ep = as_ep(h);
  return ep && d && ep->bound ? ep : nullptr;
}
// The local events it asks for: GNI_CQMODE_LOCAL_EVENT and/or GNI_CQMODE_GLOBAL_EVENT.
inline uint16_t local_events(const gni_post_descriptor_t* d) {
  return d->cq_mode & (GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_GLOBAL_EVENT);
}
// Inline: they run on every FMA, BTE and CQ-write post (no call on the post path).
// The CQ that takes a post's local events: the descriptor's src_cq_hndl if set (§12.2),
// else the EP's; false for a handle that is not a live CQ of the EP's NIC.
inline bool post_cq(const Ep* ep, const gni_post_descriptor_t* d, Cq*& cq) {
  cq = ep->src_cq;
  if (!d->src_cq_hndl) return true;
  cq = as_cq(d->src_cq_hndl);
  return cq && cq->nic == ep->nic;
}
// The local events it asks for must be allowed by the CDM's modes and have a CQ to go to.
inline gni_return_t check_events(const Ep* ep, const Cq* cq, const gni_post_descriptor_t* d) {
  const uint16_t local = local_events(d);
  if (local == GNI_CQMODE_DUAL_EVENTS && !(ep->nic->cdm->modes & GNI_CDM_MODE_DUAL_EVENTS))
    return GNI_RC_INVALID_PARAM;
  if (local && !cq) return GNI_RC_INVALID_PARAM;
  return GNI_RC_SUCCESS;
}
// Takes the tid its local events carry (-1: none asked for) and clears the descriptor's
// completion state; false when every tid is in flight.
inline bool start_post(Nic* n, gni_post_descriptor_t* d, int32_t& tid) {
  const uint16_t local = local_events(d);
  tid = -1;
  if (local) {
    tid = n->alloc_tid(d, local);
    if (tid < 0) return false;
  }
  d->status = 0;
  d->cq_mode_complete = 0;
  return true;
}

// A tid start_post took for a post that was then not posted (tid < 0: none).
inline void release_tid(Nic* n, int32_t tid) {
  if (tid < 0) return;
  std::lock_guard<std::mutex> lk(n->inflight_mu);
  n->inflight[static_cast<size_t>(tid)].desc = nullptr;
  n->free_tids.push_back(static_cast<uint16_t>(tid));
}

// Cross-memory access to another process (or memcpy for our own pid). Returns a CQE status.
uint64_t xmem_write(pid_t pid, uint64_t remote, const void* local, uint64_t len);
uint64_t xmem_read(pid_t pid, uint64_t remote, void* local, uint64_t len);

// Validates an access of [addr, addr+len) through handle `h` against `r`'s table.
// Returns a CQE status (0 = allowed) and the entry's dst CQ.
uint64_t validate_access(const Region& r, const gni_mem_handle_t& h, uint64_t addr, uint64_t len, bool write,
                         uint32_t* dst_cq);
// validate_access, and where the bytes are in the owner's address space: [addr, addr+len)
// itself for a plain registration, the segments' pieces for a multi-segment one (whose
// addresses are offsets).
uint64_t translate_access(const Region& r, const gni_mem_handle_t& h, uint64_t addr, uint64_t len, bool write,
                          uint32_t* dst_cq, abi::Extents& out);

// Cross-memory access over pieces: `remote` in `pid` from/to a contiguous local buffer,
// and `remote` into our own pieces `local` (same total length). CQE statuses.
uint64_t xmem_write_pieces(pid_t pid, const abi::Extents& remote, const void* local);
uint64_t xmem_read_pieces(pid_t pid, const abi::Extents& remote, void* local);
uint64_t xmem_read_scatter(pid_t pid, const abi::Extents& remote, const abi::Extents& local);
uint64_t xmem_write_gather(pid_t pid, const abi::Extents& remote, const abi::Extents& local);
// Copies a contiguous buffer into our own pieces.
void scatter_local(const abi::Extents& local, const void* src);

// Pushes a CQE into CQ `slot` of a peer's region. The view is rebuilt from the read-only
// descriptor every time, so a CQ destroyed meanwhile is skipped, never written.
// GNI_GetNicStat counters: a plain load and store, as count() (counters.h) and for the
// same reason: no locked instruction on the send paths.
inline void stat_add(Nic* n, gni_statistic_t stat, uint32_t k = 1) {
  n->stats[stat].store(n->stats[stat].load(std::memory_order_relaxed) + k, std::memory_order_relaxed);
}

// An event into CQ `slot` of region `r` (the daemon's descriptor says where its ring is;
// a dead or invalid CQ takes nothing). `cache`, for one producer pushing to the same CQ
// again and again, keeps the checked view (CqTarget).
inline void push_remote_event(const Region& r, uint32_t slot, uint64_t entry, CqTarget* cache = nullptr) {
  if (cache && cache->still_valid(r, slot)) {
    cache->view.push(entry, &cache->head_seen);
    return;
  }
  abi::CqRingView v = r.cq_view(slot);
  if (!v.valid()) return;
  if (!cache) {
    v.push(entry);
    return;
  }
  cache->keep(r, slot, v);
  v.push(entry, &cache->head_seen);
}

// Cancels the datagram pending on `ep`, if any (GNI_EpDestroy).
void cancel_datagram_of(Ep* ep);

// Our pid, kept current across fork (getpid() is a system call on every FMA otherwise).
pid_t self_pid();

}  // namespace nicemu::ugni
