// Peers on this host: finding a peer CDM's region through the daemon of its node, and the
// library's view of its own daemon's health.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "internal.h"

namespace nicemu::ugni {

using namespace nicemu::abi;

namespace {
// Whether process `pid` (0: none known) no longer exists.
bool owner_gone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }
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
  peers[key] = r;
  return r;
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

int32_t Nic::alloc_tid(gni_post_descriptor_t* d, uint16_t events) {
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
  inflight[tid] = Inflight{d, events};
  return tid;
}

}  // namespace nicemu::ugni
