#include "nicemu/daemon/ce/ce_engine.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/region_map.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::daemon {

namespace ace = abi::ce;
namespace cqe = abi::cqe;
using abi::ctl::Op;

namespace {

constexpr uint32_t kModeCqeOnComp = 0x10, kModeCqeOnErr = 0x40;
constexpr uint32_t kCqModeLocal = 0x1, kCqModeGlobal = 0x2;

uint64_t cqe_status(uint32_t st) {
  switch (st) {
    case ace::kOk: return cqe::kOk;
    case ace::kErrPeer: return cqe::kErrPeerGone;
    default: return cqe::kErrNoPeer;
  }
}

template <typename T>
T header_for(Op op) {
  T m{};
  m.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, static_cast<uint16_t>(op), 0,
                         static_cast<uint32_t>(sizeof(T))};
  return m;
}

template <typename T>
bool parse(const char* msg, size_t len, T& out) {
  if (len != sizeof(T)) return false;
  std::memcpy(&out, msg, sizeof(T));
  return out.h.length == sizeof(T);
}

}  // namespace

int CeEngine::create(CdmRegion& owner, uint32_t& ce_id) {
  if (channels_.size() >= ace::kMaxChannels) return abi::gni::kErrorResource;
  uint32_t id = 0;
  while (channels_.count(id)) ++id;  // the lowest free id, as hardware VCE numbers are small
  Channel& ch = channels_[id];
  ch.id = id;
  ch.owner = owner.attach_id();
  ch.cred = owner.credential();
  ce_id = id;
  return abi::gni::kSuccess;
}

int CeEngine::configure(CdmRegion& owner, const ace::CeConfigure& req) {
  namespace rc = abi::gni;
  auto it = channels_.find(req.ce_id);
  if (it == channels_.end() || it->second.owner != owner.attach_id()) return rc::kInvalidParam;
  Channel& ch = it->second;
  // A reduction in progress would be combined over two different trees.
  if (!ch.rounds.empty()) return rc::kInvalidState;
  auto rounding = ce::rounding_of(req.modes);
  if (!rounding || req.num_children > ace::kMaxChildren || req.has_parent > 1) return rc::kInvalidParam;
  if (req.has_parent && (req.parent.type != ace::kChildVce || req.parent.child_id >= ace::kMaxChildren))
    return rc::kInvalidParam;
  uint32_t mask = 0;
  std::array<ace::Edge, ace::kMaxChildren> children{};
  for (uint32_t i = 0; i < req.num_children; ++i) {
    const ace::Edge& e = req.children[i];
    if (e.child_id >= ace::kMaxChildren || (mask & (1u << e.child_id))) return rc::kInvalidParam;
    if (e.type != ace::kChildVce && e.type != ace::kChildPe) return rc::kInvalidParam;
    mask |= 1u << e.child_id;
    children[e.child_id] = e;
  }
  ch.configured = req.num_children > 0;
  ch.modes = req.modes;
  ch.rounding = *rounding;
  ch.cq = req.cq;
  ch.has_parent = req.has_parent != 0;
  ch.parent = req.parent;
  ch.children = children;
  ch.child_mask = mask;
  ch.last_attach.fill(0);
  ch.last_node.fill(0);
  uint32_t local = 0;
  for (uint32_t s = 0; s < ace::kMaxChildren; ++s)
    if ((mask & (1u << s)) && children[s].type == ace::kChildPe && children[s].node == self_) local |= 1u << s;
  set_local(ch, ch.configured ? local : 0);
  return ch.configured ? rc::kSuccess : rc::kInvalidParam;
}

int CeEngine::destroy(CdmRegion& owner, uint32_t ce_id) {
  auto it = channels_.find(ce_id);
  if (it == channels_.end() || it->second.owner != owner.attach_id()) return abi::gni::kInvalidParam;
  destroy_channel(it, ace::kErrPeer);
  drain();
  return abi::gni::kSuccess;
}

void CeEngine::destroy_channel(std::map<uint32_t, Channel>::iterator it, uint32_t status) {
  Channel& ch = it->second;
  for (Round& r : ch.rounds) {
    for (uint32_t s = 0; s < ace::kMaxChildren; ++s)
      if ((r.filled & (1u << s)) && r.slots[s].token != 0)
        deliver(r.slots[s].reply_node, Result{r.slots[s].token, status, r.slots[s].red_id, {}});
    --pending_rounds_;
  }
  if (!ch.rounds.empty()) ++ctr_.errors;
  set_local(ch, 0);
  const Credential cred = ch.cred;
  channels_.erase(it);
  drop_page_if_unused(cred);
}

// A contribution for a channel on another node: one CeContribute message to its daemon.
// False (counted) if it could not be sent.
bool CeEngine::send_contribution(uint32_t node, const Contribution& c) {
  auto m = header_for<ace::CeContribute>(Op::kCeContribute);
  m.origin_node = self_;
  m.to_ce = c.to_ce;
  m.child_id = c.child_id;
  m.kind = c.kind;
  m.from_ce = c.from_ce;
  m.ptag = c.cred.ptag;
  m.cookie = c.cred.cookie;
  m.cmd = c.cmd;
  m.mode = c.mode;
  m.status = c.status;
  m.fpe = c.op.fpe;
  m.token = c.token;
  m.red_id = c.red_id;
  m.a = c.op.a;
  m.b = c.op.b;
  m.origin_attach = c.origin_attach;
  if (env_.send(node, &m, sizeof m)) return true;
  ++ctr_.send_failures;
  return false;
}

void CeEngine::post(CdmRegion& leaf, const ace::CePost& p) {
  scan();  // what the leaf wrote into its page slot before this came first
  post_one(leaf, p, false);
  // The leaf goes back to its slot only once its CePosts are all taken (in order).
  if (auto it = page_slot_.find(leaf.attach_id()); it != page_slot_.end())
    if (Page* pg = page_of(it->second.first, false))
      std::atomic_ref<uint32_t>(pg->p->slot[it->second.second].sent_taken).fetch_add(1, std::memory_order_release);
  drain();
}

void CeEngine::post_one(CdmRegion& leaf, const ace::CePost& p, bool via_page) {
  ++ctr_.posts;
  const uint64_t token = next_token_++;
  Leaf& l = leaves_[token];
  l.attach_id = leaf.attach_id();
  l.target_node = p.target_node;
  l.ce_id = p.ce_id;
  l.result_addr = p.result_addr;
  l.src_cq = p.src_cq;
  l.tid = p.tid;
  l.local_event = p.local_event;
  l.cq_mode = p.cq_mode;
  l.since = now_;
  Contribution c;
  c.to_ce = p.ce_id;
  c.child_id = p.child_id;
  c.kind = ace::kChildPe;
  c.reply_node = self_;
  c.token = token;
  c.cred = leaf.credential();
  c.cmd = p.cmd;
  c.mode = p.mode & ce::kModeTwoOp;
  c.red_id = p.red_id;
  c.origin_attach = leaf.attach_id();
  auto cmd = ce::decode(p.cmd);
  if (!cmd || (p.mode & ~ce::kModeKnown)) {  // the library checks these; a forged post fails here
    leaf_result(token, Result{token, ace::kErrConfig, p.red_id, {}});
    return;
  }
  c.op = ce::leaf_operand(*cmd, p.mode, p.first, p.second);
  if (p.target_node == self_) {
    note_local(c.cred, p.ce_id, p.child_id, via_page);
    contribute(c);
  } else {
    if (!send_contribution(p.target_node, c)) leaf_result(token, Result{token, ace::kErrPeer, p.red_id, {}});
  }
}

CeEngine::Page::~Page() {
  if (p) munmap(p, ace::kPostPageBytes);
  if (fd >= 0) close(fd);
}

CeEngine::Page* CeEngine::page_of(const Credential& cred, bool create) {
  if (auto it = pages_.find(cred); it != pages_.end()) return it->second.get();
  if (!create) return nullptr;
  auto pg = std::make_unique<Page>();
  pg->fd = memfd_create("nicemu-ce-posts", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (pg->fd < 0 || ftruncate(pg->fd, static_cast<off_t>(ace::kPostPageBytes)) != 0) return nullptr;
  void* m = mmap(nullptr, ace::kPostPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, pg->fd, 0);
  if (m == MAP_FAILED) return nullptr;
  pg->p = static_cast<ace::PostPage*>(m);
  // Sealed against resizing: a client that shrank it would fault the daemon.
  if (fcntl(pg->fd, F_ADD_SEALS, abi::kHeapSeals) != 0) return nullptr;
  pg->p->magic = ace::kPostPageMagic;
  pg->p->version = ace::kPostPageVersion;
  pg->p->slots = ace::kPostSlots;
  Page* raw = pg.get();
  pages_[cred] = std::move(pg);
  return raw;
}

void CeEngine::drop_page_if_unused(const Credential& cred) {
  auto it = pages_.find(cred);
  if (it == pages_.end()) return;
  for (uint64_t o : it->second->owner)
    if (o != 0) return;
  for (const auto& [id, ch] : channels_)
    if (ch.cred == cred && ch.local_mask != 0) return;
  pages_.erase(it);
}

int CeEngine::open_page(CdmRegion& leaf, uint32_t& slot, int& fd) {
  Page* pg = page_of(leaf.credential(), true);
  if (!pg) return abi::gni::kErrorResource;
  uint32_t free_slot = ace::kPostSlots;
  for (uint32_t i = 0; i < ace::kPostSlots; ++i) {
    if (pg->owner[i] == leaf.attach_id()) {
      free_slot = i;
      break;
    }
    if (pg->owner[i] == 0 && free_slot == ace::kPostSlots) free_slot = i;
  }
  if (free_slot == ace::kPostSlots) return abi::gni::kErrorResource;
  if (pg->owner[free_slot] != leaf.attach_id()) {
    pg->owner[free_slot] = leaf.attach_id();
    pg->seq[free_slot] = 0;
    std::memset(&pg->p->slot[free_slot], 0, sizeof(ace::PostSlot));
  }
  slot = free_slot;
  fd = pg->fd;
  page_slot_[leaf.attach_id()] = {leaf.credential(), free_slot};
  return abi::gni::kSuccess;
}

void CeEngine::set_local(Channel& ch, uint32_t mask) {
  ch.local_mask = mask;
  ch.taken = ch.ahead = 0;
  Page* pg = page_of(ch.cred, mask != 0);
  if (!pg || ch.id >= ace::kMaxChannels) return;
  ace::PostChannel& e = pg->p->chan[ch.id];
  std::atomic_ref<uint32_t>(e.posted).store(0, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(e.local).store(mask, std::memory_order_release);
}

void CeEngine::note_local(const Credential& cred, uint32_t ce_id, uint32_t child_id, bool via_page) {
  if (child_id >= ace::kMaxChildren) return;
  auto it = channels_.find(ce_id);
  if (it == channels_.end() || !(it->second.cred == cred)) return;
  Channel& ch = it->second;
  const uint32_t bit = 1u << child_id;
  Page* pg = (ch.local_mask & bit) ? page_of(cred, false) : nullptr;
  if (!pg) return;
  std::atomic_ref<uint32_t> posted(pg->p->chan[ce_id].posted);
  // A leaf that sent a CePost counts as posted too, or the leaves after it in the page
  // would never find the round whole.
  if (!via_page) posted.fetch_or(bit, std::memory_order_acq_rel);
  if (ch.taken & bit) {  // its next round's post, before the others of this round came
    ch.ahead |= bit;
    return;
  }
  ch.taken |= bit;
  // The round's local posts are all taken: clear them before any result of the round goes
  // out, so before any leaf can post the next round.
  while (ch.taken == ch.local_mask) {
    posted.fetch_and(~ch.local_mask, std::memory_order_acq_rel);
    ch.taken = ch.ahead;
    ch.ahead = 0;
    if (ch.taken) posted.fetch_or(ch.taken, std::memory_order_acq_rel);
  }
}

void CeEngine::scan() {
  for (auto& [cred, pgp] : pages_) {
    Page& pg = *pgp;
    for (uint32_t i = 0; i < ace::kPostSlots; ++i) {
      if (pg.owner[i] == 0) continue;
      ace::PostSlot& live = pg.p->slot[i];
      const uint32_t seq = std::atomic_ref<uint32_t>(live.seq).load(std::memory_order_acquire);
      if (seq == pg.seq[i]) continue;
      ace::PostSlot s;
      std::memcpy(&s, &live, sizeof s);  // client-written: copied once, then checked
      pg.seq[i] = seq;
      std::atomic_ref<uint32_t>(live.taken).store(seq, std::memory_order_release);
      CdmRegion* leaf = env_.cdm(pg.owner[i]);
      if (!leaf) continue;
      ++ctr_.page_posts;
      // The library checked the result address against the leaf's registrations; a post
      // written by somebody else of the job is checked here, so that the result lands in
      // nothing the leaf did not register for writing.
      if (abi::region_check_access(reinterpret_cast<const char*>(leaf->header()), s.mem_qword1, s.mem_qword2,
                                   s.post.result_addr, 24, true, nullptr) != cqe::kOk) {
        ++ctr_.page_refused;
        continue;
      }
      ace::CePost p = s.post;
      p.h = header_for<ace::CePost>(Op::kCePost).h;
      p.target_node = self_;
      post_one(*leaf, p, true);
    }
  }
}

void CeEngine::ring() {
  ++ctr_.rings;
  scan();
  drain();
}

void CeEngine::member(CdmRegion& leaf, const ace::CeMember& m) {
  if (m.child_id >= ace::kMaxChildren || m.ce_id == ~0u) return;
  auto& v = members_[leaf.attach_id()];
  Membership e{m.target_node, m.ce_id, m.child_id, leaf.credential()};
  if (std::find(v.begin(), v.end(), e) != v.end()) return;
  if (v.size() >= kMaxMemberships) v.erase(v.begin());  // the oldest edge: re-wired since, most likely
  v.push_back(e);
}

void CeEngine::leaf_gone(uint32_t origin, uint32_t ce_id, uint32_t child_id, const Credential& cred,
                         uint64_t attach) {
  auto it = channels_.find(ce_id);
  if (it == channels_.end() || !(it->second.cred == cred) || child_id >= ace::kMaxChildren) return;
  Channel& ch = it->second;
  ++ctr_.leaves_gone;
  ch.gone_attach[child_id] = attach;
  ch.gone_node[child_id] = origin;
  check_channel(ch);
}

bool CeEngine::slot_gone(const Channel& ch, uint32_t s) const {
  const ace::Edge& e = ch.children[s];
  return ch.gone_attach[s] != 0 && e.type == ace::kChildPe && e.node == ch.gone_node[s] &&
         (ch.last_attach[s] == 0 || ch.last_attach[s] == ch.gone_attach[s]);
}

void CeEngine::contribute(const Contribution& c) { local_contribs_.push_back(c); }

void CeEngine::deliver(uint32_t node, const Result& r) {
  if (node == self_) {
    local_results_.push_back(r);
    return;
  }
  auto m = header_for<ace::CeResult>(Op::kCeResult);
  m.origin_node = self_;
  m.status = r.status;
  m.fpe = r.op.fpe;
  m.token = r.token;
  m.red_id = r.red_id;
  m.a = r.op.a;
  m.b = r.op.b;
  // A contributor whose daemon is gone has nobody left to tell; its children find out by
  // probing it.
  if (!env_.send(node, &m, sizeof m)) ++ctr_.send_failures;
}

void CeEngine::drain() {
  if (draining_) return;
  draining_ = true;
  while (!local_contribs_.empty() || !local_results_.empty()) {
    if (!local_contribs_.empty()) {
      Contribution c = local_contribs_.front();
      local_contribs_.pop_front();
      accept(c);
    } else {
      Result r = local_results_.front();
      local_results_.pop_front();
      result(r);
    }
  }
  draining_ = false;
}

void CeEngine::refuse(const Contribution& c, uint32_t status) {
  ++ctr_.refused;
  if (c.token != 0) deliver(c.reply_node, Result{c.token, status, c.red_id, {}});
}

void CeEngine::accept(const Contribution& c) {
  ++ctr_.contributions;
  auto it = channels_.find(c.to_ce);
  if (it == channels_.end()) return refuse(c, ace::kErrConfig);
  Channel& ch = it->second;
  if (!(ch.cred == c.cred) || !ch.configured || c.child_id >= ace::kMaxChildren ||
      !(ch.child_mask & (1u << c.child_id)))
    return refuse(c, ace::kErrConfig);
  const ace::Edge& e = ch.children[c.child_id];
  if (e.type != c.kind) return refuse(c, ace::kErrConfig);
  if (c.kind == ace::kChildVce && (e.node != c.reply_node || e.ce_id != c.from_ce)) return refuse(c, ace::kErrConfig);
  const uint32_t bit = 1u << c.child_id;
  Round* target = nullptr;
  for (Round& r : ch.rounds)
    if (!r.sent_up && !(r.filled & bit)) {
      target = &r;
      break;
    }
  if (!target) {
    ch.rounds.emplace_back();
    target = &ch.rounds.back();
    target->since = now_;
    ++pending_rounds_;
  }
  target->slots[c.child_id] = c;
  target->filled |= bit;
  if (c.kind == ace::kChildPe) {
    if (ch.gone_attach[c.child_id] != c.origin_attach) ch.gone_attach[c.child_id] = 0;  // a new leaf holds it
    ch.last_attach[c.child_id] = c.origin_attach;
    ch.last_node[c.child_id] = c.reply_node;
  }
  advance(ch);
}

void CeEngine::advance(Channel& ch) {
  for (Round& r : ch.rounds) {
    if (r.sent_up) continue;
    if (r.filled != ch.child_mask) return;
    // Fold the children in child-index order; the first error, or a command that differs,
    // makes the whole reduction an error.
    Result out;
    uint32_t cmd = 0, mode = 0;
    bool first = true;
    for (uint32_t s = 0; s < ace::kMaxChildren; ++s) {
      if (!(ch.child_mask & (1u << s))) continue;
      const Contribution& x = r.slots[s];
      if (first) {
        out.status = x.status;
        out.red_id = x.red_id;
        out.op = x.op;
        cmd = x.cmd;
        mode = x.mode;
        first = false;
        continue;
      }
      if (out.status == ace::kOk && x.status != ace::kOk) out.status = x.status;
      if (out.status == ace::kOk && (x.cmd != cmd || x.mode != mode)) out.status = ace::kErrMismatch;
      if (out.status != ace::kOk) continue;
      out.op = ce::combine(*ce::decode(cmd), (mode & ce::kModeTwoOp) != 0, ch.rounding, out.op, x.op);
    }
    if (out.status != ace::kOk) out.op = ce::Operand{};
    if (!ch.has_parent) {
      finish(ch, out);  // pops the front round (this one: a root has none sent up)
      return advance(ch);
    }
    r.sent_up = true;
    r.since = now_;
    Contribution up;
    up.to_ce = ch.parent.ce_id;
    up.child_id = ch.parent.child_id;
    up.kind = ace::kChildVce;
    up.from_ce = ch.id;
    up.reply_node = self_;
    up.token = kChannelToken | ch.id;
    up.cred = ch.cred;
    up.cmd = cmd;
    up.mode = mode;
    up.status = out.status;
    up.red_id = out.red_id;
    up.op = out.op;
    if (ch.parent.node == self_) {
      contribute(up);
    } else {
      if (!send_contribution(ch.parent.node, up)) {
        finish(ch, Result{up.token, ace::kErrPeer, up.red_id, {}});
        return advance(ch);
      }
    }
  }
}

void CeEngine::finish(Channel& ch, const Result& r) {
  if (ch.rounds.empty()) return;
  Round& front = ch.rounds.front();
  for (uint32_t s = 0; s < ace::kMaxChildren; ++s)
    if ((front.filled & (1u << s)) && front.slots[s].token != 0)
      deliver(front.slots[s].reply_node, Result{front.slots[s].token, r.status, r.red_id, r.op});
  channel_event(ch, r.status, r.red_id);
  if (r.status == ace::kOk)
    ++ch.completed;
  else
    ++ch.failed, ++ctr_.errors;
  ch.rounds.pop_front();
  --pending_rounds_;
}

void CeEngine::channel_event(const Channel& ch, uint32_t status, uint64_t red_id) {
  const bool want = (ch.modes & kModeCqeOnComp) || ((ch.modes & kModeCqeOnErr) && status != ace::kOk);
  if (!want || ch.cq == abi::kNoCq) return;
  CdmRegion* owner = env_.cdm(ch.owner);
  if (!owner) return;
  owner->push_cqe(ch.cq, cqe::make(cqe::kSrcLocalResponse, cqe::kTypePost, cqe_status(status), cqe::kInfoCe,
                                   red_id & cqe::kTidMask, ch.id));
}

void CeEngine::result(const Result& r) {
  ++ctr_.results;
  if (!(r.token & kChannelToken)) return leaf_result(r.token, r);
  auto it = channels_.find(static_cast<uint32_t>(r.token & 0xFFFFFFFF));
  if (it == channels_.end() || it->second.rounds.empty() || !it->second.rounds.front().sent_up) {
    ++ctr_.dropped;  // the channel was destroyed (its children were told) or already failed this round
    return;
  }
  finish(it->second, r);
  advance(it->second);
}

namespace {
// gni_ce_result_t is {control, result1, result2}. The values go first and the control word
// (done bit) last. On x86-64 one process_vm_writev does both in that order: the kernel
// copies the remote pieces one after another, and stores become visible in program order.
// That is one system call per leaf instead of two, a sixth of the daemon's cost per leaf.
uint64_t write_result(pid_t pid, uint64_t addr, uint64_t (&values)[2], uint64_t& control) {
#if defined(__x86_64__)
  iovec local[2] = {{values, sizeof values}, {&control, sizeof control}};
  iovec remote[2] = {{reinterpret_cast<void*>(addr + 8), sizeof values}, {reinterpret_cast<void*>(addr), sizeof control}};
  ssize_t n = process_vm_writev(pid, local, 2, remote, 2, 0);
  if (n == static_cast<ssize_t>(sizeof values + sizeof control)) return cqe::kOk;
  if (n < 0 && errno == ESRCH) return cqe::kErrPeerGone;
  if (n < 0) return cqe::kErrMemAccess;
  // A partial write (the result straddles a page that went away): the slow path says why.
#endif
  uint64_t st = xmem::copy(true, pid, addr + 8, reinterpret_cast<char*>(values), sizeof values, cqe::kErrPeerGone);
  if (st == cqe::kOk)
    st = xmem::copy(true, pid, addr, reinterpret_cast<char*>(&control), sizeof control, cqe::kErrPeerGone);
  return st;
}
}  // namespace

void CeEngine::leaf_result(uint64_t token, const Result& r) {
  auto it = leaves_.find(token);
  if (it == leaves_.end()) {
    ++ctr_.dropped;
    return;
  }
  const Leaf l = it->second;
  leaves_.erase(it);
  CdmRegion* cdm = env_.cdm(l.attach_id);
  if (!cdm) {
    ++ctr_.dropped;
    return;
  }
  // result1/result2 first, the control word (with its done bit) last: a leaf polling
  // GNI_CeCheckResult never sees a done word over stale results.
  uint64_t values[2] = {r.op.a, r.op.b};
  uint64_t control = ace::make_control(r.status, r.op.fpe, r.red_id);
  uint64_t st = write_result(cdm->pid(), l.result_addr, values, control);
  if (st == cqe::kOk) st = cqe_status(r.status);
  if (r.status != ace::kOk) ++ctr_.errors;
  if (l.tid == ace::kNoTid || l.tid > cqe::kTidMask) return;
  if (l.cq_mode & kCqModeLocal)
    cdm->push_cqe(l.src_cq, cqe::make(cqe::kSrcLocalRequest, cqe::kTypePost, st, cqe::kInfoLocal, l.tid, l.local_event));
  if (l.cq_mode & kCqModeGlobal)
    cdm->push_cqe(l.src_cq,
                  cqe::make(cqe::kSrcLocalResponse, cqe::kTypePost, st, cqe::kInfoGlobal, l.tid, l.local_event));
}

const char* CeEngine::message(uint32_t from, const abi::ctl::Header& h, const char* msg, size_t len) {
  scan();
  switch (static_cast<Op>(h.op)) {
    case Op::kCeContribute: {
      ace::CeContribute m;
      if (!parse(msg, len, m)) return "bad CeContribute";
      if (m.origin_node != from) return "CeContribute naming another sender";
      if ((m.kind != ace::kChildPe && m.kind != ace::kChildVce) || m.child_id >= ace::kMaxChildren ||
          !ce::decode(m.cmd) || m.status > ace::kErrMismatch || m.fpe > 0xF || (m.mode & ~ce::kModeTwoOp))
        return "CeContribute with invalid fields";
      Contribution c;
      c.to_ce = m.to_ce;
      c.child_id = m.child_id;
      c.kind = m.kind;
      c.from_ce = m.from_ce;
      c.reply_node = from;
      c.token = m.token;
      c.cred = Credential{m.ptag, m.cookie};
      c.cmd = m.cmd;
      c.mode = m.mode;
      c.status = m.status;
      c.red_id = m.red_id;
      c.op = ce::Operand{m.a, m.b, static_cast<uint8_t>(m.fpe)};
      c.origin_attach = m.origin_attach;
      if (c.token == 0) return "CeContribute without a token";
      contribute(c);
      break;
    }
    case Op::kCeResult: {
      ace::CeResult m;
      if (!parse(msg, len, m)) return "bad CeResult";
      if (m.origin_node != from) return "CeResult naming another sender";
      if (m.status > ace::kErrMismatch || m.fpe > 0xF) return "CeResult with invalid fields";
      local_results_.push_back(Result{m.token, m.status, m.red_id, ce::Operand{m.a, m.b, uint8_t(m.fpe)}});
      break;
    }
    case Op::kCeProbe: {
      ace::CeProbe m;
      if (!parse(msg, len, m)) return "bad CeProbe";
      if (m.origin_node != from) return "CeProbe naming another sender";
      auto rep = header_for<ace::CeProbeReply>(Op::kCeProbeReply);
      rep.origin_node = self_;
      rep.probe_id = m.probe_id;
      switch (m.what) {
        case ace::kProbeNode: rep.alive = 1; break;
        case ace::kProbeChannel: rep.alive = channels_.count(m.ce_id) ? 1 : 0; break;
        case ace::kProbeProcess: rep.alive = env_.cdm(m.attach_id) ? 1 : 0; break;
        default: return "CeProbe of an unknown kind";
      }
      if (!env_.send(from, &rep, sizeof rep)) ++ctr_.send_failures;
      return nullptr;
    }
    case Op::kCeProbeReply: {
      ace::CeProbeReply m;
      if (!parse(msg, len, m)) return "bad CeProbeReply";
      if (m.origin_node != from) return "CeProbeReply naming another sender";
      auto it = probes_.find(m.probe_id);
      if (it == probes_.end() || it->second.node != from) return nullptr;  // late: already timed out
      Probe p = it->second;
      probes_.erase(it);
      if (!m.alive) fail_dep(p);
      break;
    }
    case Op::kCeLeafGone: {
      ace::CeLeafGone m;
      if (!parse(msg, len, m)) return "bad CeLeafGone";
      if (m.origin_node != from) return "CeLeafGone naming another sender";
      if (m.child_id >= ace::kMaxChildren || m.attach_id == 0) return "CeLeafGone with invalid fields";
      leaf_gone(from, m.ce_id, m.child_id, Credential{m.ptag, m.cookie}, m.attach_id);
      break;
    }
    default:
      return "not a CE message";
  }
  drain();
  return nullptr;
}

void CeEngine::cdm_gone(uint64_t attach_id) {
  scan();  // what it posted before it went still counts, as its CePosts would
  for (auto& [cred, pg] : pages_)
    for (uint32_t i = 0; i < ace::kPostSlots; ++i)
      if (pg->owner[i] == attach_id) pg->owner[i] = 0;
  page_slot_.erase(attach_id);
  // The channels it was a leaf of learn it now, rather than waiting for an operand that
  // will never come.
  if (auto m = members_.find(attach_id); m != members_.end()) {
    for (const Membership& e : m->second) {
      if (e.node == self_) {
        leaf_gone(self_, e.ce_id, e.child_id, e.cred, attach_id);
        continue;
      }
      auto g = header_for<ace::CeLeafGone>(Op::kCeLeafGone);
      g.origin_node = self_;
      g.ce_id = e.ce_id;
      g.child_id = e.child_id;
      g.ptag = e.cred.ptag;
      g.cookie = e.cred.cookie;
      g.attach_id = attach_id;
      if (!env_.send(e.node, &g, sizeof g)) ++ctr_.send_failures;
    }
    members_.erase(m);
  }
  for (auto it = channels_.begin(); it != channels_.end();) {
    auto next = std::next(it);
    if (it->second.owner == attach_id) destroy_channel(it, ace::kErrPeer);
    it = next;
  }
  for (auto it = leaves_.begin(); it != leaves_.end();)
    it = it->second.attach_id == attach_id ? leaves_.erase(it) : std::next(it);
  // Reductions here waiting for that CDM (or for a channel it owned) fail now.
  for (auto& [id, ch] : channels_) check_channel(ch);
  drain();
  std::vector<Credential> creds;
  for (auto& [cred, pg] : pages_) creds.push_back(cred);
  for (const Credential& c : creds) drop_page_if_unused(c);
}

CeEngine::Round* CeEngine::waiting_round(Channel& ch) { return ch.rounds.empty() ? nullptr : &ch.rounds.front(); }

void CeEngine::probe(DepKind kind, uint32_t node, uint32_t what, uint32_t ce_id, uint64_t attach, uint32_t slot,
                     uint64_t token, uint32_t channel) {
  for (auto& [id, p] : probes_)  // one outstanding probe per dependency
    if (p.kind == kind && p.ce_id == channel && p.slot == slot && p.token == token) return;
  const uint64_t id = next_probe_++;
  probes_[id] = Probe{kind, channel, slot, token, node, now_};
  auto m = header_for<ace::CeProbe>(Op::kCeProbe);
  m.origin_node = self_;
  m.what = what;
  m.ce_id = ce_id;
  m.attach_id = attach;
  m.probe_id = id;
  ++ctr_.probes;
  // A node we cannot even send to is as good as silent: the probe times out.
  if (!env_.send(node, &m, sizeof m)) ++ctr_.send_failures;
}

void CeEngine::fail_dep(const Probe& p) {
  ++ctr_.dead;
  if (p.kind == DepKind::kLeaf) {
    if (leaves_.count(p.token)) leaf_result(p.token, Result{p.token, ace::kErrPeer, 0, {}});
    return;
  }
  auto it = channels_.find(p.ce_id);
  if (it == channels_.end()) return;
  Channel& ch = it->second;
  Round* r = waiting_round(ch);
  if (!r) return;
  if (p.kind == DepKind::kParent) {
    if (r->sent_up) {
      finish(ch, Result{0, ace::kErrPeer, r->slots[0].red_id, {}});
      advance(ch);
    }
    return;
  }
  const uint32_t bit = 1u << p.slot;
  if (r->sent_up || (r->filled & bit)) return;
  Contribution dead;
  dead.kind = ch.children[p.slot].type;
  dead.status = ace::kErrPeer;
  r->slots[p.slot] = dead;  // token 0: nobody to answer
  r->filled |= bit;
  advance(ch);
}

void CeEngine::check_channel(Channel& ch) {
  Round* r = waiting_round(ch);
  if (!r) return;
  const uint64_t waited = now_ - r->since;
  const bool probe_now = waited >= kProbeAfter && (waited - kProbeAfter) % kProbeEvery == 0;
  if (r->sent_up) {
    if (ch.parent.node == self_) {
      if (!channels_.count(ch.parent.ce_id)) fail_dep(Probe{DepKind::kParent, ch.id, 0, 0, self_, now_});
    } else if (probe_now) {
      probe(DepKind::kParent, ch.parent.node, ace::kProbeChannel, ch.parent.ce_id, 0, 0, 0, ch.id);
    }
    return;
  }
  for (uint32_t s = 0; s < ace::kMaxChildren; ++s) {
    const uint32_t bit = 1u << s;
    if (!(ch.child_mask & bit) || (r->filled & bit)) continue;
    const ace::Edge& e = ch.children[s];
    if (e.type == ace::kChildVce) {
      if (e.node == self_) {
        if (!channels_.count(e.ce_id)) fail_dep(Probe{DepKind::kSlot, ch.id, s, 0, self_, now_});
      } else if (probe_now) {
        probe(DepKind::kSlot, e.node, ace::kProbeChannel, e.ce_id, 0, s, 0, ch.id);
      }
    } else if (slot_gone(ch, s)) {
      fail_dep(Probe{DepKind::kSlot, ch.id, s, 0, self_, now_});
    } else if (ch.last_attach[s] != 0) {
      if (ch.last_node[s] == self_) {
        if (!env_.cdm(ch.last_attach[s])) fail_dep(Probe{DepKind::kSlot, ch.id, s, 0, self_, now_});
      } else if (probe_now) {
        probe(DepKind::kSlot, ch.last_node[s], ace::kProbeProcess, 0, ch.last_attach[s], s, 0, ch.id);
      }
    } else if (e.node != self_ && probe_now) {
      probe(DepKind::kSlot, e.node, ace::kProbeNode, 0, 0, s, 0, ch.id);
    }
    if (ch.rounds.empty() || &ch.rounds.front() != r || r->sent_up) return;  // failed meanwhile
  }
}

void CeEngine::tick() {
  scan();
  ++now_;
  // Probes unanswered for too long: their node is silent (or gone).
  for (auto it = probes_.begin(); it != probes_.end();) {
    if (now_ - it->second.sent >= kProbeTimeout) {
      Probe p = it->second;
      it = probes_.erase(it);
      fail_dep(p);
    } else {
      ++it;
    }
  }
  for (auto& [id, ch] : channels_) check_channel(ch);
  for (auto& [token, l] : leaves_) {
    if (l.target_node == self_) continue;
    const uint64_t waited = now_ - l.since;
    if (waited >= kProbeAfter && (waited - kProbeAfter) % kProbeEvery == 0)
      probe(DepKind::kLeaf, l.target_node, ace::kProbeChannel, l.ce_id, 0, 0, token, 0);
  }
  drain();
}

void CeEngine::start(asio::io_context& io) {
  timer_.emplace(io);
  arm();
}

void CeEngine::stop() {
  if (timer_) timer_->cancel();
}

void CeEngine::arm() {
  timer_->expires_after(std::chrono::milliseconds(kTickMs));
  timer_->async_wait([this](const asio::error_code& e) {
    if (e) return;
    // A ring missed (a hostile leaf of the job, a leaf gone mid-round) costs a tick at most.
    if (!pages_.empty()) {
      scan();
      drain();
    }
    if (busy() || !probes_.empty()) tick();
    arm();
  });
}

nlohmann::json CeEngine::status() const {
  return nlohmann::json{{"channels", channels_.size()},  {"pending_reductions", pending_rounds_},
                        {"pending_posts", leaves_.size()}, {"posts", ctr_.posts},
                        {"contributions", ctr_.contributions}, {"results", ctr_.results},
                        {"errors", ctr_.errors},          {"refused", ctr_.refused},
                        {"probes", ctr_.probes},          {"dead", ctr_.dead},
                        {"dropped", ctr_.dropped},        {"send_failures", ctr_.send_failures},
                        {"leaves_gone", ctr_.leaves_gone}, {"page_posts", ctr_.page_posts},
                        {"rings", ctr_.rings},            {"page_refused", ctr_.page_refused},
                        {"post_pages", pages_.size()}};
}

}  // namespace nicemu::daemon
