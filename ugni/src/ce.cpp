// The collective engine (fact sheet §16; docs/collective-engine.md). A VCE channel lives in
// the daemon of our node, which is the NIC: GNI_CeCreate / GNI_CeConfigure / GNI_CeDestroy
// are requests to it, and a CE post hands the operand to it one-way, so the process goes on
// while the daemons combine the tree. The result is written into the post's
// gni_ce_result_t (control word last, nicemu/abi/ce_ops.h) and the post's CQ events follow.
// On a Gemini NIC every call answers GNI_RC_ILLEGAL_OP, which clients probe for.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>

#include "ce_result.h"
#include "fma_requester.h"
#include "internal.h"
#include "nicemu/abi/ce_ops.h"
#include "nicemu/ce/ce_alu.h"

namespace nicemu::ugni {

namespace ace = nicemu::abi::ce;
namespace alu = nicemu::ce;
namespace cqe = nicemu::abi::cqe;

// The job's CE post page on our node (abi/ce_ops.h PostPage) as one CDM uses it: mapped on
// its first CE post to a channel of its node; a leaf writes its operand there instead of
// sending it.
struct CePosts {
  std::mutex mu;                  // one post in the slot at a time; a second thread sends
  int state = 0;                  // 0: not asked yet, 1: mapped, -1: not to be had (CePost)
  void* page = nullptr;
  uint32_t slot = 0;
  uint32_t seq = 0;               // our last post's seq
  uint32_t sent = 0;              // CePosts sent since the page was mapped
  ~CePosts() {
    if (page) munmap(page, ace::kPostPageBytes);
  }
};

namespace {

struct Ce {
  uint32_t magic = kCeMagic;
  Nic* nic = nullptr;
  uint32_t id = 0;
};

Ce* as_ce(gni_ce_handle_t h) { return from_handle<Ce, kCeMagic>(h); }

bool gemini(const Nic* n) { return n->device_type == GNI_DEVICE_GEMINI; }

// For a call without a valid handle: ILLEGAL_OP on a Gemini node all the same (clients
// probe with whatever they have, Cray's answer is about the device), INVALID_PARAM on Aries.
gni_return_t bad_handle() {
  abi::ctl::HelloReply h;
  return daemon_hello(h) && h.device_type == GNI_DEVICE_GEMINI ? GNI_RC_ILLEGAL_OP : GNI_RC_INVALID_PARAM;
}

template <typename T>
abi::ctl::Header header(abi::ctl::Op op) {
  return abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, static_cast<uint16_t>(op), 0,
                          static_cast<uint32_t>(sizeof(T))};
}

constexpr uint32_t kRoundingModes = GNI_CE_MODE_ROUND_UP | GNI_CE_MODE_ROUND_DOWN | GNI_CE_MODE_ROUND_NEAR |
                                    GNI_CE_MODE_ROUND_ZERO;
constexpr uint32_t kCqeModes = GNI_CE_MODE_CQE_ONCOMP | GNI_CE_MODE_CQE_ONERR;
constexpr uint32_t kRoutingModes = GNI_CE_MODE_RC_NMIN_HASH | GNI_CE_MODE_RC_MIN_HASH | GNI_CE_MODE_RC_MNON_HASH |
                                   GNI_CE_MODE_RC_ADAPT;

// Cray's header: "specify 1" of each group; none of a group takes the default.
bool modes_ok(uint32_t m) {
  if (m & ~(kRoundingModes | kCqeModes | kRoutingModes)) return false;
  for (uint32_t group : {kRoundingModes, kCqeModes, kRoutingModes})
    if (__builtin_popcount(m & group) > 1) return false;
  return true;
}

bool edge_of(Nic* n, gni_ep_handle_t h, ace::Edge& out) {
  Ep* ep = as_ep(h);
  if (!ep || ep->nic != n || !ep->bound || ep->ce_child_type == 0) return false;
  out = ace::Edge{ep->remote_addr, ep->ce_id, ep->ce_child_id, ep->ce_child_type, ep->remote_id, 0};
  return true;
}

// Each CDM's CePosts lives in its Nic until GNI_CdmDestroy (ce_forget_nic); the first
// post makes it, and two threads that race there keep the first one made.
CePosts& posts_of(Nic* n) {
  if (CePosts* c = n->ce_posts.load(std::memory_order_acquire)) return *c;
  auto made = std::make_unique<CePosts>();
  CePosts* expected = nullptr;
  if (n->ce_posts.compare_exchange_strong(expected, made.get(), std::memory_order_acq_rel))
    return *made.release();
  return *expected;
}

// Maps the job's post page of our node (one control round trip per CDM, on its first post
// to a channel of our node).
bool open_posts(Nic* n, CePosts& c) {
  ace::CeOpen req{};
  req.h = header<ace::CeOpen>(nicemu::abi::ctl::Op::kCeOpen);
  ace::CeOpenReply rep{};
  int fd = -1;
  if (!n->conn.call(req, rep, &fd) || rep.r.rc != GNI_RC_SUCCESS || fd < 0 || rep.bytes != ace::kPostPageBytes ||
      rep.slot >= ace::kPostSlots) {
    if (fd >= 0) close(fd);
    return false;
  }
  void* m = mmap(nullptr, ace::kPostPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return false;
  if (static_cast<ace::PostPage*>(m)->magic != ace::kPostPageMagic ||
      static_cast<ace::PostPage*>(m)->version != ace::kPostPageVersion) {
    munmap(m, ace::kPostPageBytes);
    return false;
  }
  c.page = m;
  c.slot = rep.slot;
  ace::PostSlot& s = static_cast<ace::PostPage*>(m)->slot[rep.slot];
  c.seq = std::atomic_ref<uint32_t>(s.taken).load(std::memory_order_acquire);
  c.sent = std::atomic_ref<uint32_t>(s.sent_taken).load(std::memory_order_acquire);
  return true;
}

enum class PagePost { kDone, kDaemonGone };

// A leaf of a channel of our own node writes its post into its slot of the post page, and
// only the post that completes the channel's local posts of the round rings the daemon
// (abi/ce_ops.h): one daemon wake-up per channel and round instead of one per leaf. A post
// the page cannot take (not mapped, our previous posts not all taken yet, a channel of
// another node or whose slot for us is not local...) goes as a CePost, counted so that we
// know when the daemon has taken it.
PagePost post_to_daemon(Nic* n, ace::CePost& p, const gni_mem_handle_t& mh) {
  CePosts& c = posts_of(n);
  std::lock_guard<std::mutex> lk(c.mu);
  if (c.state == 0 && p.target_node == n->nic_addr) c.state = open_posts(n, c) ? 1 : -1;
  auto* pg = static_cast<ace::PostPage*>(c.page);
  const uint32_t bit = p.child_id < ace::kMaxChildren ? 1u << p.child_id : 0;
  uint32_t local = 0;
  bool page = false;
  if (c.state == 1 && p.target_node == n->nic_addr && p.ce_id < ace::kMaxChannels && bit) {
    ace::PostSlot& s = pg->slot[c.slot];
    local = std::atomic_ref<uint32_t>(pg->chan[p.ce_id].local).load(std::memory_order_acquire);
    page = (local & bit) && std::atomic_ref<uint32_t>(s.taken).load(std::memory_order_acquire) == c.seq &&
           std::atomic_ref<uint32_t>(s.sent_taken).load(std::memory_order_acquire) == c.sent;
  }
  if (!page) {
    if (!n->conn.send(&p, sizeof p)) return PagePost::kDaemonGone;
    if (c.state == 1) ++c.sent;
    return PagePost::kDone;
  }
  ace::PostSlot& s = pg->slot[c.slot];
  s.post = p;
  s.mem_qword1 = mh.qword1;
  s.mem_qword2 = mh.qword2;
  std::atomic_ref<uint32_t>(s.seq).store(++c.seq, std::memory_order_release);
  // After the post is visible: a daemon that finds the round whole finds our post too.
  const uint32_t old = std::atomic_ref<uint32_t>(pg->chan[p.ce_id].posted).fetch_or(bit, std::memory_order_acq_rel);
  if (((old | bit) & local) != local) return PagePost::kDone;
  ace::CeRing r{};
  r.h = header<ace::CeRing>(nicemu::abi::ctl::Op::kCeRing);
  return n->conn.send(&r, sizeof r) ? PagePost::kDone : PagePost::kDaemonGone;
}

}  // namespace

void ce_forget_nic(Nic* n) {
  delete n->ce_posts.exchange(nullptr, std::memory_order_acq_rel);
}

gni_return_t post_ce(Ep* ep, gni_post_descriptor_t* d) {
  Nic* n = ep->nic;
  if (gemini(n)) return GNI_RC_ILLEGAL_OP;
  // A leaf EP names its parent channel and its slot there (GNI_EpSetCeAttr, type PE).
  if (ep->ce_child_type != GNI_CE_CHILD_PE) return GNI_RC_INVALID_PARAM;
  uint32_t cmd;
  std::memcpy(&cmd, &d->ce_cmd, sizeof cmd);
  if (!alu::decode(cmd) || (d->ce_mode & ~alu::kModeKnown)) return GNI_RC_INVALID_PARAM;
  // The result structure is written by the NIC: it must be registered memory of ours.
  if (d->local_addr == 0 || d->local_addr % 8 != 0 ||
      validate_access(*n->self, d->local_mem_hndl, d->local_addr, sizeof(gni_ce_result_t), true, nullptr) != 0)
    return GNI_RC_INVALID_PARAM;
  if (gni_return_t rc = check_events(ep, ep->src_cq, d); rc != GNI_RC_SUCCESS) return rc;
  int32_t tid;
  if (!start_post(n, d, tid)) return GNI_RC_ERROR_RESOURCE;
  stat_add(n, GNI_STAT_FMA_LAUNCH_COUNT);
  ace::CePost p{};
  p.h = header<ace::CePost>(abi::ctl::Op::kCePost);
  p.target_node = ep->remote_addr;
  p.ce_id = ep->ce_id;
  p.child_id = ep->ce_child_id;
  p.cmd = cmd;
  p.mode = d->ce_mode;
  p.src_cq = ep->src_cq ? ep->src_cq->slot : abi::kNoCq;
  p.tid = tid < 0 ? ace::kNoTid : static_cast<uint32_t>(tid);
  p.local_event = ep->local_event;
  p.cq_mode = local_events(d);
  p.red_id = d->ce_red_id;
  p.first = d->first_operand;
  p.second = d->second_operand;
  p.result_addr = d->local_addr;
  n->to_daemon(tid, ep->src_cq, ep->local_event, false);  // before the daemon can see it
  if (!n->nic_down.load(std::memory_order_relaxed) && post_to_daemon(n, p, d->local_mem_hndl) == PagePost::kDone)
    return GNI_RC_SUCCESS;
  n->to_daemon(tid, ep->src_cq, ep->local_event, false, false);
  // Our daemon is gone: nobody will combine it. The result says so, as the events do.
  auto* res = reinterpret_cast<gni_ce_result_t*>(d->local_addr);
  res->result1 = res->result2 = 0;
  std::atomic_ref<uint64_t>(res->control).store(ace::make_control(ace::kErrPeer, 0, d->ce_red_id),
                                                std::memory_order_release);
  complete_fma(ep->src_cq, d, ep->local_event, cqe::kErrNicDown, tid);
  return GNI_RC_SUCCESS;
}

void ce_announce_leaf(Ep* ep) {
  // The channel owner's EPs to its PE children carry CE attributes too, with ce_id unused
  // (Cray passes -1): only an EP naming a channel is a leaf's edge.
  if (!ep->bound || ep->ce_child_type != GNI_CE_CHILD_PE || ep->ce_id == uint32_t(-1) || gemini(ep->nic)) return;
  ace::CeMember m{};
  m.h = header<ace::CeMember>(abi::ctl::Op::kCeMember);
  m.target_node = ep->remote_addr;
  m.ce_id = ep->ce_id;
  m.child_id = ep->ce_child_id;
  if (!ep->nic->nic_down.load(std::memory_order_relaxed)) ep->nic->conn.send(&m, sizeof m);
}

}  // namespace nicemu::ugni

using namespace nicemu;
using namespace nicemu::ugni;

extern "C" {

gni_return_t GNI_CeCreate(gni_nic_handle_t nic_hndl, gni_ce_handle_t* ce_hndl) {
  Nic* n = as_nic(nic_hndl);
  if (!n) return bad_handle();
  if (gemini(n)) return GNI_RC_ILLEGAL_OP;
  if (!ce_hndl) return GNI_RC_INVALID_PARAM;
  ace::CeCreate req{};
  req.h = header<ace::CeCreate>(abi::ctl::Op::kCeCreate);
  ace::CeCreateReply rep{};
  if (gni_return_t rc = daemon_call(n, req, rep); rc != GNI_RC_SUCCESS) return rc;
  auto* ce = new (std::nothrow) Ce;
  if (!ce) return GNI_RC_ERROR_NOMEM;
  ce->nic = n;
  ce->id = rep.ce_id;
  *ce_hndl = reinterpret_cast<gni_ce_handle_t>(ce);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CeGetId(gni_ce_handle_t ce_hndl, uint32_t* ce_id) {
  Ce* ce = as_ce(ce_hndl);
  if (!ce) return bad_handle();
  if (gemini(ce->nic)) return GNI_RC_ILLEGAL_OP;
  if (!ce_id) return GNI_RC_INVALID_PARAM;
  *ce_id = ce->id;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_EpSetCeAttr(gni_ep_handle_t ep_hndl, uint32_t ce_id, uint32_t child_id, gni_ce_child_t child_type) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return bad_handle();
  if (gemini(ep->nic)) return GNI_RC_ILLEGAL_OP;
  // Cray's header: child ids are in [0, GNI_CE_MAX_CHILDREN); ce_id is unused for a child
  // PE (its example passes -1), so it is stored as given.
  if (child_id >= GNI_CE_MAX_CHILDREN || (child_type != GNI_CE_CHILD_VCE && child_type != GNI_CE_CHILD_PE))
    return GNI_RC_INVALID_PARAM;
  ep->ce_id = ce_id;
  ep->ce_child_id = child_id;
  ep->ce_child_type = static_cast<uint32_t>(child_type);
  ce_announce_leaf(ep);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CeConfigure(gni_ce_handle_t ce_hndl, gni_ep_handle_t* child_eps, uint32_t num_child_eps,
                             gni_ep_handle_t parent_ep, gni_cq_handle_t cq_hndl, uint32_t modes) {
  Ce* ce = as_ce(ce_hndl);
  if (!ce) return bad_handle();
  Nic* n = ce->nic;
  if (gemini(n)) return GNI_RC_ILLEGAL_OP;
  if (num_child_eps == 0 || num_child_eps > GNI_CE_MAX_CHILDREN || !child_eps || !modes_ok(modes))
    return GNI_RC_INVALID_PARAM;
  ace::CeConfigure req{};
  req.h = header<ace::CeConfigure>(abi::ctl::Op::kCeConfigure);
  req.ce_id = ce->id;
  req.modes = modes;
  req.num_children = num_child_eps;
  uint32_t seen = 0;
  for (uint32_t i = 0; i < num_child_eps; ++i) {
    if (!edge_of(n, child_eps[i], req.children[i])) return GNI_RC_INVALID_PARAM;
    const uint32_t bit = 1u << req.children[i].child_id;
    if (seen & bit) return GNI_RC_INVALID_PARAM;  // two children in one slot
    seen |= bit;
  }
  if (parent_ep) {
    if (!edge_of(n, parent_ep, req.parent) || req.parent.type != GNI_CE_CHILD_VCE) return GNI_RC_INVALID_PARAM;
    req.has_parent = 1;
  }
  req.cq = abi::kNoCq;
  if (cq_hndl) {
    Cq* cq = as_cq(cq_hndl);
    if (!cq || cq->nic != n) return GNI_RC_INVALID_PARAM;
    req.cq = cq->slot;
  }
  abi::ctl::Reply rep{};
  if (!n->conn.call(req, rep)) return GNI_RC_ERROR_RESOURCE;
  return static_cast<gni_return_t>(rep.rc);
}

gni_return_t GNI_CeCheckResult(gni_ce_result_t* result, uint32_t length) {
  (void)length;  // "unused in Aries"
  abi::ctl::HelloReply h;
  if (daemon_hello(h) && h.device_type == GNI_DEVICE_GEMINI) return GNI_RC_ILLEGAL_OP;
  if (!result) return GNI_RC_INVALID_PARAM;
  const uint64_t control = std::atomic_ref<uint64_t>(result->control).load(std::memory_order_acquire);
  if (!nicemu::ugni::ce::done(control)) return GNI_RC_NOT_DONE;
  // Cray's header: TRANSACTION_ERROR when the result was not delivered (status not OK) or
  // an exception was raised (then the result is there; GNI_CE_RES_GET_FPE says which).
  if (nicemu::ugni::ce::status(control) != 0 || nicemu::ugni::ce::fpe(control) != 0) return GNI_RC_TRANSACTION_ERROR;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CeDestroy(gni_ce_handle_t ce_hndl) {
  Ce* ce = as_ce(ce_hndl);
  if (!ce) return bad_handle();
  if (gemini(ce->nic)) return GNI_RC_ILLEGAL_OP;
  ace::CeDestroy req{};
  req.h = header<ace::CeDestroy>(abi::ctl::Op::kCeDestroy);
  req.ce_id = ce->id;
  abi::ctl::Reply rep{};
  // A daemon that is gone took the channel with it: the handle is freed either way.
  if (ce->nic->conn.call(req, rep) && rep.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.rc);
  ce->magic = 0;
  delete ce;
  return GNI_RC_SUCCESS;
}

}  // extern "C"
