// MSGQ (fact sheet §15): per-node shared message queues of at most GNI_MSGQ_MSG_SZ_MAX
// bytes. Each node has one segment per protection domain (nicemu/abi/msgq_layout.h) with a
// receive ring per connected remote node, shared by all its local instances; a sender
// writes straight into the ring of its node in the destination node's segment, a receiver
// takes the entries addressed to it from all rings of its own segment. The daemons only
// create segments and keep their tables; no daemon is on the message path.
//
// Connection data flow, as on a Cray: GNI_MsgqGetConnAttrs(pe = B) on node A opens A's ring
// for messages from B and describes it; the attributes travel out of band to B, whose
// GNI_MsgqConnect(pe = A, attrs) lets every instance of B send to the instances of A.
//
// Callback contract (a project decision; Cray's examples return 1): rcv_cb gets the
// sender's inst_id and NIC address, a pointer to header and message (contiguous, valid only
// during the call) and the tag. A non-zero return lets GNI_MsgqProgress go on delivering;
// 0 ends the call after that message (it counts as delivered; later messages stay queued,
// and the call answers NOT_DONE).
//
// GNI_MsgqProgress answers as Cray's gni_pub.h defines it: GNI_RC_SUCCESS "all messages
// were processed", GNI_RC_NOT_DONE "messages could still be available for processing". So
// an empty queue is SUCCESS (polled, or once a blocking call's timeout ran out: the header
// lists no TIMEOUT for this call), and NOT_DONE means "call again": a callback stopped the
// call, a ring gave its bound of messages in one pass, or a ring scan gave up while the ring
// kept moving (RingView::Take::kBusy). Programs loop `while (GNI_MsgqProgress(..) ==
// GNI_RC_NOT_DONE)` to drain the queue; that loop ends once nothing is left for them.
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "internal.h"
#include "msgq_ofi.h"
#include "ofi_port.h"
#include "nicemu/abi/futex.h"
#include "nicemu/abi/msgq_layout.h"
#include "nicemu/abi/msgq_ring.h"
#include "nicemu/abi/region_map.h"
#include "nicemu/abi/remote_ops.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace cqe = nicemu::abi::cqe;
namespace mq = nicemu::abi::msgq;

static_assert(GNI_MSGQ_MSG_SZ_MAX == mq::kMaxMsgSize && GNI_MSGQ_NODE_INSTS_MAX == mq::kMaxLocalInsts);
static_assert(abi::remote::kMsgqMaxPayload == mq::kMaxMsgSize);
static_assert(GNI_MSGQ_MODE_BLOCKING == mq::kModeBlocking && GNI_CQ_EVENT_TYPE_MSGQ == cqe::kTypeMsgq);

namespace {

constexpr uint32_t kMsgqMagic = 0x4d534731;
// Room for the largest payload a slot can hold (see mq::slot_size).
constexpr uint32_t kPayloadBuffer = mq::slot_size(mq::kMaxMsgSize) - sizeof(mq::Slot);

// A node's segment mapped into this process: read-only section PROT_READ, the rest RW.
struct Segment {
  mq::SegmentView view;
  uint64_t id = 0;
  uint32_t nic_addr = 0;

  ~Segment() {
    if (view.base) munmap(view.base, view.lay.total_size);
  }
  bool alive() const { return view.header()->state.load(std::memory_order_acquire) == mq::kSegmentAlive; }
  mq::RingView ring(uint32_t i) const { return mq::RingView::at(view.ring(i), view.attrs.smsg_q_sz, view.lay.slot_size); }

  // Maps a segment the daemon passed as two memfds (tables, sealed; rings), and closes
  // them. Its attributes come from the daemon-written header (nodes may differ in
  // nloc_insts and num_msgq_eps); the layout is recomputed from them and must match the
  // header and the size. nullptr if anything is off.
  static std::shared_ptr<Segment> map(int (&fds)[2], uint64_t size) {
    auto s = map_fds(fds, size);
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
    return s;
  }
  static std::shared_ptr<Segment> map_fds(const int (&fds)[2], uint64_t size) {
    if (size < mq::kPageSize || size > mq::kMaxSegmentBytes || fds[0] < 0 || fds[1] < 0) return nullptr;
    if (!abi::ro_sealed(fds[0])) return nullptr;  // tables a member could rewrite: refused
    // The header first (read, not mapped: the tables' size follows from it).
    alignas(mq::SegmentHeader) unsigned char raw[sizeof(mq::SegmentHeader)];
    if (pread(fds[0], raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) return nullptr;
    const auto* h = reinterpret_cast<const mq::SegmentHeader*>(raw);
    if (h->magic != mq::kSegmentMagic || h->version != mq::kVersion || h->total_size != size) return nullptr;
    mq::Attrs a = h->attrs;
    if (!mq::attrs_valid(a)) return nullptr;
    mq::Layout lay = mq::segment_layout(a);
    if (lay.total_size != size || lay.ro_size != h->ro_size) return nullptr;
    char* base = abi::map_split(fds[0], fds[1], lay.ro_size, size);
    if (!base) return nullptr;
    auto s = std::make_shared<Segment>();
    s->view.base = base;
    s->view.lay = lay;
    s->view.attrs = a;
    s->id = h->segment_id;
    s->nic_addr = h->nic_addr;
    return s;
  }

  int find_member(uint32_t inst, uint32_t& gen) const {
    for (uint32_t i = 0; i < view.attrs.nloc_insts; ++i) {
      uint32_t id, g;
      if (view.read_member(i, id, g) && id == inst) {
        gen = g;
        return int(i);
      }
    }
    return -1;
  }
  int find_rx(uint32_t pe, uint32_t& gen) const {
    for (uint32_t i = 0; i < view.attrs.num_msgq_eps; ++i) {
      uint32_t rpe, g;
      if (view.read_rx(i, rpe, g) && rpe == pe) {
        gen = g;
        return int(i);
      }
    }
    return -1;
  }
  int find_tx(uint32_t pe, uint32_t& gen) const {
    for (uint32_t i = 0; i < view.attrs.num_msgq_eps; ++i) {
      uint32_t rpe, g;
      if (view.read_tx(i, rpe, g) && rpe == pe) {
        gen = g;
        return int(i);
      }
    }
    return -1;
  }
};

// What a sender knows about a destination node. Indices are hints: each use re-reads the
// read-only entry and checks it still names the same thing (pe/inst and generation).
struct RemoteNode {
  std::shared_ptr<Segment> seg;
  uint32_t rx = 0, rx_gen = 0;  // the ring for our node in its segment
  bool rx_known = false;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> members;  // inst -> (index, gen)
};

struct Msgq {
  uint32_t magic = kMsgqMagic;
  Nic* nic = nullptr;
  gni_msgq_rcv_cb_func* rcv_cb = nullptr;
  void* cb_data = nullptr;
  Cq* snd_cq = nullptr;
  mq::Attrs attrs{};
  std::shared_ptr<Segment> self;
  uint32_t member = 0, member_gen = 0;
  uint32_t next_ring = 0;                  // first ring of the next progress pass (fairness)
  std::recursive_mutex progress_mu;        // recursive: a callback may progress again
  std::mutex mu;                           // remotes and tx
  std::map<uint32_t, RemoteNode> remotes;  // by NIC address
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> tx;  // pe -> (TxConn index, gen)
  std::atomic<uint64_t> malformed{0};
};

Msgq* as_msgq(gni_msgq_handle_t h) { return from_handle<Msgq, kMsgqMagic>(h); }

// The segment each CDM joined (GNI_MsgqInit to GNI_MsgqRelease), for the port's thread
// storing messages that came over the ofi fabric (msgq_ofi.h) while the Msgq may go.
struct Joined {
  std::shared_ptr<Segment> seg;
  mq::Attrs attrs;
};
std::mutex joined_mu;
std::map<const Nic*, Joined> joined;

bool joined_of(const Nic* n, Joined& out) {
  std::lock_guard<std::mutex> lk(joined_mu);
  auto it = joined.find(n);
  if (it == joined.end()) return false;
  out = it->second;
  return true;
}

mq::Attrs to_attrs(const gni_msgq_attr_t& a) {
  return mq::Attrs{a.max_msg_sz, a.smsg_q_sz, a.rcv_pool_sz, a.num_msgq_eps, a.nloc_insts, a.modes, a.rcv_cq_sz, 0};
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// A writer that claimed a slot and never published it: is it gone? A zombie counts as gone.
// (A pid reused meanwhile keeps the slot blocked until that process exits too.)
bool process_gone(uint32_t pid) {
  if (pid == 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

bool member_live(const Msgq* q) {
  uint32_t inst, gen;
  return q->self->alive() && q->self->view.read_member(q->member, inst, gen) && gen == q->member_gen &&
         inst == q->nic->cdm->inst_id;
}

bool is_for(const Msgq* q, const mq::EntryHeader& e) {
  return e.dst_member == q->member && e.dst_gen == q->member_gen && e.dst_inst == q->nic->cdm->inst_id;
}

// Entries addressed to us still waiting in our node's rings.
bool pending_for_us(const Msgq* q) {
  const mq::SegmentView& v = q->self->view;
  for (uint32_t i = 0; i < v.attrs.num_msgq_eps; ++i) {
    uint32_t pe, g;
    if (v.read_rx(i, pe, g) && q->self->ring(i).any_published([&](const mq::EntryHeader& e) { return is_for(q, e); }))
      return true;
  }
  return false;
}

gni_return_t control(Nic* n, abi::ctl::Op op, uint32_t remote_pe, uint32_t remote_insts,
                     abi::ctl::MsgqConnReply& rep) {
  abi::ctl::MsgqConn req{};
  req.h.op = static_cast<uint16_t>(op);
  req.remote_pe = remote_pe;
  req.remote_insts = remote_insts;
  return daemon_call(n, req, rep, GNI_RC_INVALID_STATE);  // INVALID_STATE: the daemon is gone
}

// Maps the segment of node `pe` for our domain through that node's daemon.
gni_return_t lookup_segment(Msgq* q, uint32_t pe, std::shared_ptr<Segment>& out) {
  Nic* n = q->nic;
  abi::ctl::MsgqLookup req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMsgqLookup);
  req.nic_addr = pe;
  req.ptag = n->cdm->ptag;
  req.cookie = n->cdm->cookie;
  abi::ctl::MsgqLookupReply rep{};
  int fds[2] = {-1, -1};  // tables, rings
  {
    std::lock_guard<std::mutex> lk(n->peers_mu);
    auto& d = n->daemons[pe];
    if (!d || !d->connected()) {
      d = std::make_unique<nicemu::ctl::Connection>();
      if (!d->connect(nicemu::ctl::socket_path(n->rundir, pe))) {
        n->daemons.erase(pe);  // not on this host (other hosts come with the fabric) or down
        return GNI_RC_INVALID_STATE;
      }
    }
    if (!d->call(req, rep, fds, 2)) {
      n->daemons.erase(pe);
      return GNI_RC_INVALID_STATE;
    }
  }
  if (rep.r.rc != GNI_RC_SUCCESS || fds[1] < 0) {
    for (int fd : fds)
      if (fd >= 0) close(fd);
    return GNI_RC_INVALID_STATE;  // the node's queue is gone (or refused to us)
  }
  auto s = Segment::map(fds, rep.size);
  // The remote queue must carry messages of our size into rings of our depth.
  if (!s || s->id != rep.segment_id || s->nic_addr != pe || s->view.attrs.max_msg_sz != q->attrs.max_msg_sz ||
      s->view.attrs.smsg_q_sz != q->attrs.smsg_q_sz)
    return GNI_RC_INVALID_STATE;
  out = std::move(s);
  return GNI_RC_SUCCESS;
}

// Under q->mu: is `pe` connected for sending (GNI_MsgqConnect on this node)?
bool connected_locked(Msgq* q, uint32_t pe) {
  const mq::SegmentView& v = q->self->view;
  if (auto it = q->tx.find(pe); it != q->tx.end()) {
    uint32_t rpe, g;
    if (v.read_tx(it->second.first, rpe, g) && rpe == pe && g == it->second.second) return true;
    q->tx.erase(it);
  }
  uint32_t g;
  int i = q->self->find_tx(pe, g);
  if (i < 0) return false;
  q->tx[pe] = {uint32_t(i), g};
  return true;
}

// Under q->mu: the destination node's segment and our ring in it.
gni_return_t remote_locked(Msgq* q, uint32_t pe, RemoteNode*& out) {
  RemoteNode& rn = q->remotes[pe];
  if (rn.seg && !rn.seg->alive()) rn = RemoteNode{};  // a new segment may have replaced it
  if (!rn.seg) {
    if (pe == q->nic->nic_addr) {
      rn.seg = q->self;
    } else if (gni_return_t rc = lookup_segment(q, pe, rn.seg); rc != GNI_RC_SUCCESS) {
      q->remotes.erase(pe);
      return rc;
    }
  }
  if (!rn.seg->alive()) return GNI_RC_INVALID_STATE;
  const uint32_t self_pe = q->nic->nic_addr;
  uint32_t rpe, g;
  if (!rn.rx_known || !rn.seg->view.read_rx(rn.rx, rpe, g) || rpe != self_pe || g != rn.rx_gen) {
    int i = rn.seg->find_rx(self_pe, g);
    rn.rx_known = i >= 0;
    if (i < 0) return GNI_RC_NO_MATCH;  // the destination node holds no ring for us
    rn.rx = uint32_t(i);
    rn.rx_gen = g;
  }
  out = &rn;
  return GNI_RC_SUCCESS;
}

// Under q->mu: the destination instance's member slot in its node's segment.
bool destination_locked(RemoteNode& rn, uint32_t inst, uint32_t& member, uint32_t& gen) {
  if (auto it = rn.members.find(inst); it != rn.members.end()) {
    uint32_t id, g;
    if (rn.seg->view.read_member(it->second.first, id, g) && id == inst && g == it->second.second) {
      member = it->second.first;
      gen = g;
      return true;
    }
    rn.members.erase(it);
  }
  int i = rn.seg->find_member(inst, gen);
  if (i < 0) return false;
  member = uint32_t(i);
  rn.members[inst] = {member, gen};
  return true;
}

void wake(const Segment& s, uint32_t member) {
  mq::MemberRw* rw = s.view.member_rw(member);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (rw->waiters.load(std::memory_order_relaxed) != 0) {
    rw->futex.fetch_add(1, std::memory_order_release);
    abi::futex_wake_all(&rw->futex);
  }
}

// A node of another host: its segment cannot be mapped here, so our daemon carries the
// message (nicemu/abi/remote_ops.h) and posts the local completion when the target answered.
gni_return_t send_other_host(Msgq* q, Ep* ep, const void* hdr, uint32_t hdr_len, const void* msg, uint32_t msg_len,
                             uint32_t msg_id, uint8_t tag) {
  mq::TxCredit* cr;
  {
    std::lock_guard<std::mutex> lk(q->mu);
    if (!connected_locked(q, ep->remote_addr)) return GNI_RC_NO_MATCH;
    cr = q->self->view.tx_credit(q->tx[ep->remote_addr].first);
  }
  // One credit per message: at most the ring's depth in flight to that node, as on one host
  // (msgq_layout.h, TxCredit). Signed: a forged `returned` past `sent` must not wrap.
  const int64_t window = q->attrs.smsg_q_sz;
  // A member of that node died: its successor says first how many of the ring's slots are
  // still taken (msgq_ofi.h), so the credit below counts them.
  if (q->nic->ofi) msgq_ofi_settle(q->nic, ep->remote_addr, cr);
  uint64_t s = cr->sent.load(std::memory_order_acquire);
  do {
    if (static_cast<int64_t>(s - cr->returned.load(std::memory_order_acquire)) >= window) {
      if (q->nic->ofi) msgq_ofi_ask(q->nic, ep->remote_addr);  // credits freed at a member
      return GNI_RC_NOT_DONE;
    }
  } while (!cr->sent.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  // Rank to rank over the ofi fabric when a member of the target's segment can be reached.
  if (q->nic->ofi &&
      msgq_ofi_send(q->nic, cr, s + 1, ep->remote_addr, ep->remote_id, hdr, hdr_len, msg, msg_len, msg_id, tag,
                    q->snd_cq))
    return GNI_RC_SUCCESS;
  abi::remote::MsgqRemoteSend m{};
  m.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, static_cast<uint16_t>(abi::ctl::Op::kMsgqRemoteSend), 0,
                         sizeof m};
  m.dst_pe = ep->remote_addr;
  m.dst_inst = ep->remote_id;
  m.hdr_len = static_cast<uint16_t>(hdr_len);
  m.msg_len = static_cast<uint16_t>(msg_len);
  m.tag = tag;
  // The daemon posts the local completion once the target stored the message (or could not).
  m.snd_cq = q->snd_cq ? q->snd_cq->slot : abi::kNoCq;
  m.msg_id = msg_id;
  if (hdr_len) std::memcpy(m.payload, hdr, hdr_len);
  if (msg_len) std::memcpy(m.payload + hdr_len, msg, msg_len);
  if (!q->nic->conn.send(&m, sizeof m)) return GNI_RC_INVALID_STATE;
  stat_add(q->nic, GNI_STAT_FMA_LAUNCH_COUNT);
  return GNI_RC_SUCCESS;
}

gni_return_t send(Msgq* q, Ep* ep, const void* hdr, uint32_t hdr_len, const void* msg, uint32_t msg_len,
                  uint32_t msg_id, uint8_t tag) {
  if (!ep->bound || ep->nic != q->nic) return GNI_RC_INVALID_PARAM;
  if ((hdr_len && !hdr) || (msg_len && !msg)) return GNI_RC_INVALID_PARAM;
  if (uint64_t{hdr_len} + msg_len > q->attrs.max_msg_sz) return GNI_RC_SIZE_ERROR;
  if (!member_live(q) || q->nic->nic_down.load(std::memory_order_relaxed)) return GNI_RC_INVALID_STATE;
  const uint32_t pe = ep->remote_addr, inst = ep->remote_id;
  if (ep->other_host()) [[unlikely]]
    return send_other_host(q, ep, hdr, hdr_len, msg, msg_len, msg_id, tag);
  std::shared_ptr<Segment> seg;
  uint32_t ring_index, member, gen;
  {
    std::lock_guard<std::mutex> lk(q->mu);
    if (!connected_locked(q, pe)) return GNI_RC_NO_MATCH;
    RemoteNode* rn = nullptr;
    if (gni_return_t rc = remote_locked(q, pe, rn); rc != GNI_RC_SUCCESS) return rc;
    // A destination that never joined its node's queue, or left or died: nothing will
    // ever take the message.
    if (!destination_locked(*rn, inst, member, gen)) return GNI_RC_INVALID_STATE;
    seg = rn->seg;
    ring_index = rn->rx;
  }
  mq::RingView ring = seg->ring(ring_index);
  mq::EntryHeader e{};
  e.dst_inst = inst;
  e.dst_gen = gen;
  e.src_inst = q->nic->cdm->inst_id;
  e.src_pe = q->nic->nic_addr;
  e.dst_member = static_cast<uint16_t>(member);
  e.tag = tag;
  const uint32_t pid = static_cast<uint32_t>(self_pid());
  auto r = ring.push(e, hdr, hdr_len, msg, msg_len, pid);
  if (r == mq::RingView::Push::kFull) {
    // Make room if the ring only holds taken entries, entries of departed receivers, or a
    // slot of a writer that died mid-write; otherwise the receivers must progress first.
    ring.recycle([&](const mq::EntryHeader& x) { return seg->view.destination_live(x); }, process_gone);
    r = ring.push(e, hdr, hdr_len, msg, msg_len, pid);
  }
  if (r == mq::RingView::Push::kFull) return GNI_RC_NOT_DONE;
  if (r == mq::RingView::Push::kCorrupt) {
    std::fprintf(stderr, "libugni(nicemu): MSGQ ring for node %u in the segment of node %u is corrupt\n",
                 q->nic->nic_addr, pe);
    return GNI_RC_INVALID_STATE;
  }
  wake(*seg, member);
  // On the hardware a MSGQ message is an FMA PUT into the remote node's queue.
  stat_add(q->nic, GNI_STAT_FMA_LAUNCH_COUNT);
  if (q->snd_cq)
    q->snd_cq->ring.push(cqe::make(cqe::kSrcLocalResponse, cqe::kTypeMsgq, cqe::kOk, cqe::kInfoGlobal, 0, msg_id));
  return GNI_RC_SUCCESS;
}

struct Pass {
  uint32_t delivered = 0;
  bool stopped = false;  // the callback returned 0
  bool busy = false;     // a ring scan gave up while the ring kept moving: it may hold more for us
  bool bounded = false;  // a ring gave a pass's bound of messages: more may have come meanwhile
  // Cray's NOT_DONE: "messages could still be available for processing".
  bool more() const { return stopped || busy || bounded; }
};

// The answer for the pass that ends the call: SUCCESS when every message there was for us
// was processed (also when there was none), NOT_DONE when some may remain.
gni_return_t answer(const Pass& p) { return p.more() ? GNI_RC_NOT_DONE : GNI_RC_SUCCESS; }

// One pass over every receive ring of our node, taking what is addressed to us. Each ring
// gives at most twice its depth in one pass (it holds at most its depth at a time: more
// means senders kept refilling it while we took, and the call should return).
Pass deliver(Msgq* q) {
  Pass out;
  const mq::SegmentView& v = q->self->view;
  const uint32_t eps = v.attrs.num_msgq_eps;
  mq::MemberRw* rw = v.member_rw(q->member);
  auto mine = [q](const mq::EntryHeader& e) { return is_for(q, e); };
  auto live = [&v](const mq::EntryHeader& e) { return v.destination_live(e); };
  const uint32_t first = q->next_ring % eps;
  for (uint32_t k = 0; k < eps && !out.stopped; ++k) {
    const uint32_t i = (first + k) % eps;
    uint32_t pe, g;
    if (!v.read_rx(i, pe, g)) continue;
    mq::RingView ring = q->self->ring(i);
    alignas(8) char buf[kPayloadBuffer];
    mq::EntryHeader e;
    const uint32_t bound = 2 * v.attrs.smsg_q_sz;
    for (uint32_t n = 0;; ++n) {
      if (n == bound) {
        out.bounded = true;
        break;
      }
      const mq::RingView::Take r = ring.take(mine, e, buf);
      if (r != mq::RingView::Take::kTaken) {
        if (r == mq::RingView::Take::kBusy) out.busy = true;  // look again: never sleep on it
        break;
      }
      // Shared memory is untrusted: the length must fit our attributes, and the source must
      // be the node this ring belongs to (the sender's NIC address is the ring's, not the
      // entry's word).
      if (e.length > q->attrs.max_msg_sz || e.src_pe != pe) {
        q->malformed.fetch_add(1, std::memory_order_relaxed);
        rw->malformed.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      ++out.delivered;
      rw->delivered.fetch_add(1, std::memory_order_relaxed);
      if (q->rcv_cb(e.src_inst, pe, buf, e.tag, q->cb_data) == 0) {
        out.stopped = true;
        q->next_ring = i;  // what is left in this ring comes first next time
        break;
      }
    }
    ring.recycle(live, mq::claimer_unknown);
  }
  if (!out.stopped) q->next_ring = first + 1;
  return out;
}

}  // namespace

namespace nicemu::ugni {

uint64_t msgq_store_remote(Nic* n, uint32_t origin_pe, uint32_t src_inst, uint32_t dst_inst, uint8_t tag,
                           const uint8_t* payload, uint32_t hdr_len, uint32_t msg_len, MsgqRingPos& at) {
  Joined j;
  if (!joined_of(n, j) || !j.seg->alive()) return cqe::kErrPeerGone;  // no queue of ours here (any more)
  const Segment& seg = *j.seg;
  if (uint64_t{hdr_len} + msg_len > j.attrs.max_msg_sz || origin_pe == n->nic_addr) return cqe::kErrPeerGone;
  // As the target daemon's relay (MsgqSegment::deliver_remote): the ring this node opened
  // for the origin, and the destination's member slot.
  uint32_t ring_gen = 0, gen = 0;
  const int ring = seg.find_rx(origin_pe, ring_gen);
  const int member = seg.find_member(dst_inst, gen);
  if (ring < 0 || member < 0) return cqe::kErrPeerGone;
  mq::RingView r = seg.ring(uint32_t(ring));
  mq::EntryHeader e{};
  e.dst_inst = dst_inst;
  e.dst_gen = gen;
  e.src_inst = src_inst;
  e.src_pe = origin_pe;
  e.dst_member = static_cast<uint16_t>(member);
  e.tag = tag;
  const uint32_t pid = static_cast<uint32_t>(self_pid());
  uint64_t pos = 0;
  auto res = r.push(e, payload, hdr_len, payload + hdr_len, msg_len, pid, &pos);
  if (res == mq::RingView::Push::kFull) {
    r.recycle([&](const mq::EntryHeader& x) { return seg.view.destination_live(x); }, process_gone);
    res = r.push(e, payload, hdr_len, payload + hdr_len, msg_len, pid, &pos);
  }
  if (res == mq::RingView::Push::kFull) return cqe::kErrTransient;
  if (res == mq::RingView::Push::kCorrupt) return cqe::kErrPeerGone;
  at = MsgqRingPos{uint32_t(ring), ring_gen, pos};
  wake(seg, uint32_t(member));
  return cqe::kOk;
}

std::optional<uint64_t> msgq_ring_head(Nic* n, uint32_t ring, uint32_t gen) {
  Joined j;
  if (!joined_of(n, j) || !j.seg->alive()) return std::nullopt;
  uint32_t rpe, g;
  if (!j.seg->view.read_rx(ring, rpe, g) || g != gen) return std::nullopt;
  mq::RingView r = j.seg->ring(ring);
  r.recycle([&](const mq::EntryHeader& x) { return j.seg->view.destination_live(x); }, mq::claimer_unknown);
  return r.ctl->head.load(std::memory_order_acquire);
}

std::optional<MsgqRingSpan> msgq_ring_span(Nic* n, uint32_t origin_pe) {
  Joined j;
  if (!joined_of(n, j) || !j.seg->alive()) return std::nullopt;
  MsgqRingSpan sp;
  const int ring = j.seg->find_rx(origin_pe, sp.gen);
  if (ring < 0) return std::nullopt;
  sp.ring = uint32_t(ring);
  mq::RingView r = j.seg->ring(sp.ring);
  r.recycle([&](const mq::EntryHeader& x) { return j.seg->view.destination_live(x); }, mq::claimer_unknown);
  sp.head = r.ctl->head.load(std::memory_order_acquire);
  sp.tail = r.ctl->tail.load(std::memory_order_acquire);
  if (sp.tail < sp.head || sp.tail - sp.head > j.attrs.smsg_q_sz) return std::nullopt;  // torn or forged
  return sp;
}

}  // namespace nicemu::ugni

extern "C" {

gni_return_t GNI_MsgqSize(gni_msgq_attr_t* attrs, uint32_t* size) {
  if (!attrs || !size) return GNI_RC_INVALID_PARAM;
  mq::Attrs a = to_attrs(*attrs);
  if (!mq::attrs_valid(a)) return GNI_RC_INVALID_PARAM;
  *size = static_cast<uint32_t>(mq::segment_layout(a).total_size);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MsgqInit(gni_nic_handle_t nic_hndl, gni_msgq_rcv_cb_func* rcv_cb, void* cb_data,
                          gni_cq_handle_t snd_cq, gni_msgq_attr_t* attrs, gni_msgq_handle_t* msgq_hndl) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !attrs || !msgq_hndl) return GNI_RC_INVALID_PARAM;
  Cq* cq = nullptr;
  if (snd_cq) {
    cq = as_cq(snd_cq);
    if (!cq || cq->nic != n) return GNI_RC_INVALID_PARAM;
  }
  mq::Attrs a = to_attrs(*attrs);
  if (!mq::attrs_valid(a)) return GNI_RC_INVALID_PARAM;
  abi::ctl::MsgqJoin req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMsgqJoin);
  req.attrs = a;
  abi::ctl::MsgqJoinReply rep{};
  int fds[2] = {-1, -1};  // tables, rings
  if (!n->conn.call(req, rep, fds, 2)) return GNI_RC_INVALID_STATE;
  if (rep.r.rc != GNI_RC_SUCCESS || fds[1] < 0) {
    for (int fd : fds)
      if (fd >= 0) close(fd);
    return rep.r.rc != GNI_RC_SUCCESS ? static_cast<gni_return_t>(rep.r.rc) : GNI_RC_INVALID_STATE;
  }
  auto seg = Segment::map(fds, rep.size);
  auto q = std::make_unique<Msgq>();
  if (!seg || seg->id != rep.segment_id || seg->nic_addr != n->nic_addr || !(seg->view.attrs == a) ||
      rep.member >= a.nloc_insts) {
    abi::ctl::MsgqLeave leave{};
    leave.h.op = static_cast<uint16_t>(abi::ctl::Op::kMsgqLeave);
    abi::ctl::Reply lr{};
    n->conn.call(leave, lr);
    return GNI_RC_ERROR_NOMEM;
  }
  q->nic = n;
  q->rcv_cb = rcv_cb;  // may be NULL (a send-only instance, as Charm++ creates): Progress refuses
  q->cb_data = cb_data;
  q->snd_cq = cq;       // may be NULL: sends then report no local completion
  q->attrs = a;
  q->self = std::move(seg);
  q->member = rep.member;
  q->member_gen = rep.member_gen;
  {
    std::lock_guard<std::mutex> lk(joined_mu);
    joined[n] = Joined{q->self, a};
  }
  *msgq_hndl = reinterpret_cast<gni_msgq_handle_t>(q.release());
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MsgqRelease(gni_msgq_handle_t msgq_hndl) {
  Msgq* q = as_msgq(msgq_hndl);
  if (!q) return GNI_RC_INVALID_PARAM;
  // Loses nothing: messages that arrived for us must be progressed first.
  if (member_live(q) && pending_for_us(q)) return GNI_RC_NOT_DONE;
  abi::ctl::MsgqLeave req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMsgqLeave);
  abi::ctl::Reply rep{};
  q->nic->conn.call(req, rep);  // a daemon that is gone has dropped us already
  {
    std::lock_guard<std::mutex> lk(joined_mu);
    if (auto it = joined.find(q->nic); it != joined.end() && it->second.seg == q->self) joined.erase(it);
  }
  msgq_ofi_release(q->nic);
  q->magic = 0;
  delete q;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MsgqIdle(gni_msgq_handle_t msgq_hndl) {
  Msgq* q = as_msgq(msgq_hndl);
  if (!q) return GNI_RC_INVALID_PARAM;
  if (!member_live(q)) return GNI_RC_SUCCESS;  // nothing can move any more
  if (pending_for_us(q)) return GNI_RC_NOT_DONE;
  const uint32_t self_inst = q->nic->cdm->inst_id, self_pe = q->nic->nic_addr;
  std::lock_guard<std::mutex> lk(q->mu);
  for (auto& [pe, rn] : q->remotes) {
    if (!rn.seg || !rn.seg->alive() || !rn.rx_known) continue;
    auto ours = [&](const mq::EntryHeader& e) {
      return e.src_inst == self_inst && e.src_pe == self_pe && rn.seg->view.destination_live(e);
    };
    if (rn.seg->ring(rn.rx).any_published(ours)) return GNI_RC_NOT_DONE;  // not yet taken
  }
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MsgqGetConnAttrs(gni_msgq_handle_t msgq_hndl, uint32_t pe_addr, gni_msgq_ep_attr_t* attrs,
                                  uint32_t* attrs_size) {
  Msgq* q = as_msgq(msgq_hndl);
  if (!q || !attrs || !attrs_size) return GNI_RC_INVALID_PARAM;
  if (!member_live(q)) return GNI_RC_INVALID_STATE;
  abi::ctl::MsgqConnReply rep{};
  gni_return_t rc = control(q->nic, abi::ctl::Op::kMsgqConnOpen, pe_addr, 0, rep);
  if (rc != GNI_RC_SUCCESS) return rc;
  const mq::SegmentView& v = q->self->view;
  std::memset(attrs, 0, sizeof *attrs);
  attrs->pe_addr = q->nic->nic_addr;
  attrs->max_msg_sz = q->attrs.max_msg_sz;
  attrs->smsg_q_sz = q->attrs.smsg_q_sz;
  // The instances that joined so far. The memory handle names the segment and the ring
  // (nothing is registered: senders reach the ring through the node's daemon).
  for (uint32_t i = 0; i < v.attrs.nloc_insts; ++i) {
    uint32_t inst, gen;
    if (!v.read_member(i, inst, gen)) continue;
    gni_msgq_rem_inst_t& r = attrs->insts[attrs->num_insts++];
    r.id = inst;
    r.mdh.qword1 = q->self->id;
    r.mdh.qword2 = (uint64_t{rep.gen} << 32) | rep.conn;
    r.mdh_off = v.ring_offset(rep.conn);
  }
  *attrs_size = static_cast<uint32_t>(offsetof(gni_msgq_ep_attr_t, insts) +
                                      attrs->num_insts * sizeof(gni_msgq_rem_inst_t));
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MsgqConnect(gni_msgq_handle_t msgq_hndl, uint32_t pe_addr, gni_msgq_ep_attr_t* attrs) {
  Msgq* q = as_msgq(msgq_hndl);
  if (!q || !attrs) return GNI_RC_INVALID_PARAM;
  // The attributes came out of band: they must be those of node pe_addr's queue, with ours.
  if (attrs->pe_addr != pe_addr || attrs->max_msg_sz != q->attrs.max_msg_sz ||
      attrs->smsg_q_sz != q->attrs.smsg_q_sz || attrs->num_insts == 0 || attrs->num_insts > GNI_MSGQ_NODE_INSTS_MAX)
    return GNI_RC_INVALID_PARAM;
  if (!member_live(q)) return GNI_RC_INVALID_STATE;
  abi::ctl::MsgqConnReply rep{};
  gni_return_t rc = control(q->nic, abi::ctl::Op::kMsgqConnect, pe_addr, attrs->num_insts, rep);
  if (rc != GNI_RC_SUCCESS) return rc;
  std::lock_guard<std::mutex> lk(q->mu);
  q->tx.erase(pe_addr);
  q->remotes.erase(pe_addr);  // map the node's current segment on the next send
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MsgqConnRelease(gni_msgq_handle_t msgq_hndl, uint32_t pe_addr) {
  Msgq* q = as_msgq(msgq_hndl);
  if (!q) return GNI_RC_INVALID_PARAM;
  if (member_live(q)) {
    // Messages from that node not yet taken by a live receiver of ours: not done.
    uint32_t gen;
    int i = q->self->find_rx(pe_addr, gen);
    const mq::SegmentView& v = q->self->view;
    if (i >= 0 &&
        q->self->ring(uint32_t(i)).any_published([&](const mq::EntryHeader& e) { return v.destination_live(e); }))
      return GNI_RC_NOT_DONE;
  }
  abi::ctl::MsgqConnReply rep{};
  gni_return_t rc = control(q->nic, abi::ctl::Op::kMsgqConnRelease, pe_addr, 0, rep);
  {
    std::lock_guard<std::mutex> lk(q->mu);
    q->tx.erase(pe_addr);
    q->remotes.erase(pe_addr);
  }
  if (rc == GNI_RC_INVALID_STATE) return GNI_RC_SUCCESS;  // the daemon is gone: so is the connection
  return rc;
}

gni_return_t GNI_MsgqSend(gni_msgq_handle_t msgq_hndl, gni_ep_handle_t ep_hndl, void* hdr, uint32_t hdr_len,
                          void* msg, uint32_t msg_len, uint32_t msg_id, uint8_t msg_tag) {
  Msgq* q = as_msgq(msgq_hndl);
  Ep* ep = as_ep(ep_hndl);
  if (!q || !ep) return GNI_RC_INVALID_PARAM;
  return send(q, ep, hdr, hdr_len, msg, msg_len, msg_id, msg_tag);
}

// timeout in ms; 0 and (uint32_t)-1 poll once (Cray's examples pass -1 for "do not block").
// Blocking needs GNI_MSGQ_MODE_BLOCKING, and waits up to the timeout for the first message.
// The answer (see the top of this file): SUCCESS when every message there was for us was
// delivered, including none at all (a poll of an empty queue, or a blocking call whose
// timeout ran out); NOT_DONE when some may remain (a callback returned 0, a ring gave its
// bound, a ring scan gave up while the ring was moving). A poll that finds another thread
// delivering also answers NOT_DONE: that thread may still be processing messages.
gni_return_t GNI_MsgqProgress(gni_msgq_handle_t msgq_hndl, uint32_t timeout) {
  Msgq* q = as_msgq(msgq_hndl);
  if (!q) return GNI_RC_INVALID_PARAM;
  const bool poll = timeout == 0 || timeout == UINT32_MAX;
  if (!poll && !(q->attrs.modes & GNI_MSGQ_MODE_BLOCKING)) return GNI_RC_INVALID_PARAM;
  if (!q->rcv_cb) return GNI_RC_INVALID_STATE;  // nobody to deliver to; messages stay queued
  std::unique_lock<std::recursive_mutex> lk(q->progress_mu, std::defer_lock);
  if (poll) {
    if (!lk.try_lock()) return GNI_RC_NOT_DONE;  // another thread is delivering
  } else {
    lk.lock();
  }
  const uint64_t start = now_ns();
  const uint64_t deadline = start + uint64_t{timeout} * 1000000ull;
  const uint64_t spin_until = start + spin_ns();
  for (;;) {
    if (!member_live(q)) return GNI_RC_INVALID_STATE;
    Pass p = deliver(q);
    // Messages over the ofi fabric (msgq_ofi.h) that our own port has yet to store: drive it
    // (waiting for another thread's dispatch), as GNI_SmsgGetNext does, and look again.
    if (!p.delivered && !p.stopped && q->nic->ofi) {
      ofi_poll(q->nic, true);
      p = deliver(q);
    }
    if (p.delivered || poll) return answer(p);
    const uint64_t t = now_ns();
    // Nothing came in time: nothing left to process, unless a ring was moving too fast to
    // tell (then NOT_DONE, "could still be available").
    if (t >= deadline) return answer(p);
    // A ring that gave up its scan may hold a message for us: look again, never sleep.
    if (p.busy || t < spin_until) {
      abi::spin_step(t - start);
      continue;
    }
    mq::MemberRw* rw = q->self->view.member_rw(q->member);
    uint32_t seq = rw->futex.load(std::memory_order_acquire);
    rw->waiters.fetch_add(1, std::memory_order_seq_cst);
    const Pass again = deliver(q);
    // Sleep in slices so that a daemon killed outright is still noticed. Only on a pass
    // that saw every ring empty: a sender publishing after it wakes us (msgq_layout.h).
    if (!again.delivered && !again.busy)
      abi::futex_wait(&rw->futex, seq, static_cast<int64_t>(std::min<uint64_t>(200000000ull, deadline - t)));
    rw->waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (again.delivered) return answer(again);
    if (!q->nic->daemon_alive()) return GNI_RC_INVALID_STATE;
  }
}

}  // extern "C"
