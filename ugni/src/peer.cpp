// Peers on this host: finding a peer CDM's region through the daemon of its node, and the
// library's view of its own daemon's health.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "internal.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::ugni {

using namespace nicemu::abi;
namespace cqe = nicemu::abi::cqe;

namespace {
// Whether process `pid` (0: none known) no longer exists.
bool owner_gone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

// The error event of a post our dead daemon held: NIC down (not recoverable), as the
// completion the daemon would have made had it failed the post (remote_requester.cpp,
// bte_engine.cpp).
uint64_t cqe_of_orphan(int32_t tid, const Inflight& f, uint64_t info) {
  const uint64_t src = f.bte ? cqe::kSrcBte : info == cqe::kInfoLocal ? cqe::kSrcLocalRequest : cqe::kSrcLocalResponse;
  return cqe::make(src, cqe::kTypePost, cqe::kErrNicDown, info, static_cast<uint64_t>(tid), f.local_event);
}
}  // namespace

std::shared_ptr<Region> Nic::resolve(uint32_t addr, uint32_t domain, uint64_t& status) {
  if (addr == nic_addr && domain == self->header()->mem_domain) return self;
  std::lock_guard<std::mutex> lk(peers_mu);
  auto key = std::make_pair(addr, domain);
  pid_t gone_owner = 0;  // we had this memory domain mapped, and its CDM is gone
  if (auto it = peers.find(key); it != peers.end()) {
    if (it->second->alive()) return it->second;
    gone_owner = it->second->pid;
    peers.erase(it);  // the peer died; a new CDM may have its memory domain
  }
  nicemu::ctl::Connection* c = nullptr;
  if (addr == nic_addr) {
    c = &conn;
  } else {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
    if (auto it = no_daemon_until.find(addr); it != no_daemon_until.end() && now < it->second) {
      status = cqe::kErrNoPeer;
      return nullptr;
    }
    auto& d = daemons[addr];
    if (!d || !d->connected()) {
      d = std::make_unique<nicemu::ctl::Connection>();
      if (!d->connect(nicemu::ctl::socket_path(rundir, addr))) {
        daemons.erase(addr);
        no_daemon_until[addr] = now + 1000000000ull;  // a daemon started later is found within 1 s
        // Not on this host: FMA, RDMA, CQ writes, chains and datagrams go through our daemon
        // (remote_post.cpp, ct_requester.cpp, datagram.cpp), SMSG and MSGQ are relayed by the
        // daemons (smsg_relay.cpp, msgq.cpp): nothing here needs the peer's region.
        status = cqe::kErrNoPeer;
        return nullptr;
      }
    }
    c = d.get();
  }
  abi::ctl::PeerLookup req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kPeerLookup);
  req.nic_addr = addr;
  req.mem_domain = domain;
  req.ptag = cdm->ptag;
  req.cookie = cdm->cookie;
  abi::ctl::PeerLookupReply rep{};
  int fds[3] = {-1, -1, -1};  // read-only section, MDD table, heap
  if (!c->call(req, rep, fds, 3)) {
    if (addr != nic_addr) daemons.erase(addr);
    status = cqe::kErrNicDown;
    return nullptr;
  }
  if (rep.r.rc != GNI_RC_SUCCESS || fds[2] < 0) {
    for (int fd : fds)
      if (fd >= 0) close(fd);
    // A node that has no such memory domain cannot translate the handle: a protection
    // error, as on the hardware (an invalid MDH); unless the process we knew there died.
    status = rep.r.rc == GNI_RC_NO_MATCH && owner_gone(gone_owner) ? cqe::kErrPeerGone : cqe::kErrProtection;
    return nullptr;
  }
  auto r = Region::map(fds, rep.region_size, rep.ro_size);
  if (!r || !r->alive()) {
    status = cqe::kErrPeerGone;
    return nullptr;
  }
  if (r->pid != self_pid()) note_reach(*r);
  peers[key] = r;
  return r;
}

void Nic::note_reach(Region& r) {
  // Once per peer mapping: whether the kernel lets us copy to and from its owner.
  if (xmem::probe(r.pid) != xmem::Reach::kRefused) return;
  const int why = errno;
  r.xmem_refused = true;
  count(counters, ctr::cdm::xmem_fallback_peers);
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "libugni(nicemu): cross-memory attach to pid %d (NIC address %u) is refused (%s: another user's "
                 "process, Yama ptrace_scope, or a seccomp filter); FMA and AMOs to such peers go through the "
                 "daemon, RDMA through its BTE engine (counted in xmem_fallback_peers; docs/decisions.md)\n",
                 static_cast<int>(r.pid), r.nic_addr, strerrorname_np(why) ? strerrorname_np(why) : "refused");
  });
}

bool Nic::daemon_alive() {
  if (nic_down.load(std::memory_order_relaxed)) return false;
  if (self->state() == kRegionNicDown) {
    nic_down = true;
    return false;
  }
  // A hung-up attach socket means the daemon died. POLLIN alone is no sign: another thread
  // (a client's main thread while its progress thread waits on CQs) may be inside a
  // control call whose reply has arrived but is not read yet.
  pollfd p{conn.fd(), POLLIN, 0};
  if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) {
    nic_down = true;
    return false;
  }
  return true;
}

int32_t Nic::alloc_tid(gni_post_descriptor_t* d, uint16_t modes) {
  const uint16_t events = modes == GNI_CQMODE_DUAL_EVENTS ? 2 : 1;
  std::lock_guard<std::mutex> lk(inflight_mu);
  uint16_t tid;
  if (!free_tids.empty()) {
    tid = free_tids.back();
    free_tids.pop_back();
  } else {
    if (inflight.size() >= 0xFFFF) return -1;  // 0xFFFF is reserved for "no descriptor"
    tid = static_cast<uint16_t>(inflight.size());
    inflight.emplace_back();
  }
  inflight[tid] = Inflight{};
  inflight[tid].desc = d;
  inflight[tid].remaining = events;
  inflight[tid].modes = modes;
  return tid;
}

void Nic::to_daemon(int32_t tid, Cq* cq, uint32_t local_event, bool bte, bool handed) {
  if (tid < 0 || !cq) return;
  std::lock_guard<std::mutex> lk(inflight_mu);
  Inflight& f = inflight[static_cast<size_t>(tid)];
  if (!handed && orphans_built) {
    // Taken back after it joined the orphans below: its caller completes it.
    auto it = orphans.find(cq);
    if (it != orphans.end())
      std::erase_if(it->second, [tid](uint64_t e) { return cqe::tid_of(e) == static_cast<uint64_t>(tid); });
  }
  f.cq = cq;
  f.local_event = local_event;
  f.bte = bte;
  f.daemon = handed;
  // Handed after the list of orphans was made (a thread posting while the NIC went down):
  // it joins the list, as nothing will answer it either.
  if (handed && orphans_built) {
    f.daemon = false;
    if (f.modes & GNI_CQMODE_LOCAL_EVENT)
      orphans[cq].push_back(cqe_of_orphan(tid, f, cqe::kInfoLocal));
    if (f.modes & GNI_CQMODE_GLOBAL_EVENT)
      orphans[cq].push_back(cqe_of_orphan(tid, f, cqe::kInfoGlobal));
  }
}

bool Nic::daemon_gone() {
  if (daemon_exited.load(std::memory_order_relaxed)) return true;
  // The socket hangs up when the daemon's last thread has released its files, i.e. after
  // every thread stopped running: no CQ entry of its can come after this.
  pollfd p{conn.fd(), POLLIN, 0};
  if (conn.fd() >= 0 && !(poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)))) return false;
  daemon_exited = true;
  return true;
}

bool Nic::orphan_event(Cq* cq, uint64_t& entry) {
  if (!daemon_gone()) return false;
  std::lock_guard<std::mutex> lk(inflight_mu);
  if (!orphans_built) {
    // In tid order, which is no order of posting; the hardware gives none for failures
    // either. Entries come out of each list from the back, so the lists are reversed.
    orphans_built = true;
    for (size_t t = inflight.size(); t-- > 0;) {
      Inflight& f = inflight[t];
      if (!f.desc || !f.daemon || !f.cq) continue;
      f.daemon = false;
      if (f.modes & GNI_CQMODE_GLOBAL_EVENT) orphans[f.cq].push_back(cqe_of_orphan(int32_t(t), f, cqe::kInfoGlobal));
      if (f.modes & GNI_CQMODE_LOCAL_EVENT) orphans[f.cq].push_back(cqe_of_orphan(int32_t(t), f, cqe::kInfoLocal));
    }
  }
  auto it = orphans.find(cq);
  if (it == orphans.end() || it->second.empty()) return false;
  entry = it->second.back();
  it->second.pop_back();
  return true;
}

void Nic::forget_cq(Cq* cq) {
  std::lock_guard<std::mutex> lk(inflight_mu);
  orphans.erase(cq);
  for (Inflight& f : inflight)
    if (f.cq == cq) {
      f.cq = nullptr;
      f.daemon = false;
    }
}

}  // namespace nicemu::ugni
