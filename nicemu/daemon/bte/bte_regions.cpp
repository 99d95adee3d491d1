#include "nicemu/daemon/bte/bte_regions.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/region_map.h"
#include "nicemu/ctl/ctl_client.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace cqe = nicemu::abi::cqe;

std::shared_ptr<MappedRegion> MappedRegion::map(int ro_fd, int mdd_fd, int heap_fd, uint64_t size, pid_t owner) {
  char* b = map_region(ro_fd, mdd_fd, heap_fd, size);
  if (!b) return nullptr;
  std::shared_ptr<MappedRegion> r(new MappedRegion);
  r->base_ = b;
  r->size_ = size;
  const RegionHeader& h = r->header();
  if (h.magic != kRegionMagic || h.abi_version != kAbiVersion || h.region_size != size ||
      static_cast<pid_t>(h.owner_pid) != owner)
    return nullptr;
  r->pid_ = owner;
  r->attach_id_ = h.attach_id;
  // A pidfd names this very process: once it exits, a later process with the same pid is
  // not mistaken for it (the region state alone changes only when its daemon notices).
  r->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, owner, 0));
  if (r->pidfd_ < 0) {
    if (errno == ESRCH) return nullptr;  // already gone
    spdlog::debug("pidfd_open({}) failed ({}): liveness from the region state only", owner, strerror(errno));
  }
  return r;
}

MappedRegion::~MappedRegion() {
  if (base_) munmap(base_, size_);
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool MappedRegion::alive() const {
  if (region_state(header()) != kRegionAlive) return false;
  if (pidfd_ < 0) return true;  // no pidfd (old kernel): the state decides
  const int64_t at = alive_at_.load(std::memory_order_relaxed);
  if (at == kExited) return false;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now - at < kLivenessFor.count()) return true;
  pollfd p{pidfd_, POLLIN, 0};
  const bool alive = poll(&p, 1, 0) == 0;  // readable = the process exited
  alive_at_.store(alive ? now : kExited, std::memory_order_relaxed);
  return alive;
}

uint64_t MappedRegion::gone_status() const {
  return region_state(header()) == kRegionNicDown ? cqe::kErrNicDown : cqe::kErrPeerGone;
}

uint64_t MappedRegion::check_access(uint64_t q1, uint64_t q2, uint64_t addr, uint64_t len, bool write,
                                    uint32_t* dst_cq) const {
  return region_check_access(base_, q1, q2, addr, len, write, dst_cq);
}

uint64_t MappedRegion::translate(uint64_t q1, uint64_t q2, uint64_t addr, uint64_t len, bool write,
                                 Extents& out) const {
  return region_translate(base_, q1, q2, addr, len, write, nullptr, out);
}

CqRingView MappedRegion::cq_view(uint32_t slot) const { return region_cq_view(base_, size_, slot); }

RegionDirectory::RegionDirectory(uint32_t nic_addr, std::string rundir)
    : nic_addr_(nic_addr), rundir_(std::move(rundir)) {}

RegionDirectory::~RegionDirectory() = default;

std::shared_ptr<MappedRegion> RegionDirectory::add_local(int ro_fd, int mdd_fd, int heap_fd, uint64_t size, pid_t owner) {
  auto r = MappedRegion::map(ro_fd, mdd_fd, heap_fd, size, owner);
  if (!r) return nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  local_[r->attach_id()] = r;
  gone_.erase(RegionKey{nic_addr_, r->header().mem_domain, r->header().ptag, r->header().cookie});
  return r;
}

void RegionDirectory::remove_local(uint64_t attach_id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = local_.find(attach_id); it != local_.end()) {
    const RegionHeader& h = it->second->header();
    note_gone(RegionKey{nic_addr_, h.mem_domain, h.ptag, h.cookie}, it->second->gone_status());
    local_.erase(it);
  }
}

std::shared_ptr<MappedRegion> RegionDirectory::local(uint64_t attach_id) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = local_.find(attach_id);
  return it == local_.end() ? nullptr : it->second;
}

void RegionDirectory::note_gone(const RegionKey& key, uint64_t status) {
  if (gone_.size() >= 4096) gone_.clear();  // bounded: an old death only loses its precise status
  gone_[key] = status;
}

std::shared_ptr<MappedRegion> RegionDirectory::resolve(const RegionKey& key, uint64_t& status) {
  // A memory domain the node does not have: the handle does not translate (PROTECTION),
  // unless it was a CDM we knew that went away (PEER_GONE, or NIC_DOWN).
  auto missing = [&] {
    auto g = gone_.find(key);
    return g != gone_.end() ? g->second : uint64_t{cqe::kErrProtection};
  };
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (key.nic_addr == nic_addr_) {
      uint32_t domain = key.domain;
      if (domain & mdh::kVmdhRoute) {
        auto d = vmdh_.domain(key.ptag, key.cookie, domain & ~mdh::kVmdhRoute);
        if (!d) {
          status = cqe::kErrProtection;  // no registration has that index here
          return nullptr;
        }
        domain = *d;
      }
      uint64_t dead = 0;  // its owner exited, and the control thread has not reclaimed it yet
      for (auto& [id, r] : local_) {
        const RegionHeader& h = r->header();
        if (h.mem_domain != domain || h.ptag != key.ptag || h.cookie != key.cookie) continue;
        if (r->alive()) return r;
        dead = r->gone_status();
      }
      status = dead ? dead : missing();
      return nullptr;
    }
    if (auto it = remote_.find(key); it != remote_.end()) {
      if (it->second->alive()) return it->second;
      note_gone(key, it->second->gone_status());
      remote_.erase(it);  // died; a new CDM may have its memory domain
    }
  }
  auto r = lookup_remote(key, status);
  std::lock_guard<std::mutex> lk(mu_);
  if (!r) {
    if (status == cqe::kErrProtection) status = missing();
    return nullptr;
  }
  // Drop mappings of regions that died meanwhile: each one keeps its memfd's pages alive.
  std::erase_if(remote_, [this](const auto& kv) {
    if (kv.second->alive()) return false;
    note_gone(kv.first, kv.second->gone_status());
    return true;
  });
  gone_.erase(key);
  remote_[key] = r;
  return r;
}

// PeerLookup at the daemon of key.nic_addr with the initiator's credential: that daemon
// does the domain check, exactly as for a library on this host.
std::shared_ptr<MappedRegion> RegionDirectory::lookup_remote(const RegionKey& key, uint64_t& status) {
  std::lock_guard<std::mutex> lk(links_mu_);
  auto& c = links_[key.nic_addr];
  if (!c || !c->connected()) {
    c = std::make_unique<nicemu::ctl::Connection>();
    if (!c->connect(nicemu::ctl::socket_path(rundir_, key.nic_addr))) {
      status = cqe::kErrNoPeer;  // not on this host; other hosts come with the fabric
      return nullptr;
    }
    // A daemon that stopped answering must not hold a BTE channel forever.
    timeval tv{1, 0};
    setsockopt(c->fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  abi::ctl::PeerLookup req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kPeerLookup);
  req.nic_addr = key.nic_addr;
  req.mem_domain = key.domain;
  req.ptag = key.ptag;
  req.cookie = key.cookie;
  abi::ctl::PeerLookupReply rep{};
  int fds[3] = {-1, -1, -1};  // read-only section, MDD table, heap
  if (!c->call(req, rep, fds, 3)) {
    links_.erase(key.nic_addr);
    status = cqe::kErrNoPeer;
    return nullptr;
  }
  auto close_fds = [&] {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  };
  if (rep.r.rc != gni::kSuccess || fds[2] < 0) {
    close_fds();
    // No such memory domain there (or not ours to see): the handle does not translate.
    status = cqe::kErrProtection;
    return nullptr;
  }
  auto r = MappedRegion::map(fds[0], fds[1], fds[2], rep.region_size, static_cast<pid_t>(rep.pid));
  close_fds();
  if (!r || !r->alive()) {
    status = cqe::kErrPeerGone;
    return nullptr;
  }
  return r;
}

}  // namespace nicemu::daemon
