// The CDM regions the BTE engine reads and writes, as the engine's own mappings: this
// node's CDMs (mapped when they attach) and targets on the other emulated nodes of this
// host (looked up at their daemons, as libugni's Nic::resolve does). The engine's threads
// hold a mapping by shared_ptr for as long as a transfer uses it, so a CDM that is
// reclaimed meanwhile (its CdmRegion unmapped by the control thread) never leaves them
// with a dangling pointer: they see its state turn dead instead.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "nicemu/abi/cq_ring.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/shm_layout.h"
#include "nicemu/daemon/cdm/vmdh_table.h"

namespace nicemu::ctl {
class Connection;
}

namespace nicemu::daemon {

class MappedRegion {
 public:
  // Maps `memfd` (read-only section PROT_READ, heap read-write) and opens a pidfd of the
  // owner. nullptr if the region does not look like one (magic, version, size).
  static std::shared_ptr<MappedRegion> map(int ro_fd, int mdd_fd, int heap_fd, uint64_t size, pid_t owner);
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  const abi::RegionHeader& header() const { return *reinterpret_cast<const abi::RegionHeader*>(base_); }
  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  pid_t pid() const { return pid_; }
  uint64_t attach_id() const { return attach_id_; }

  // Alive: the daemon has not reclaimed it and its owner process has not exited. Checked
  // before every chunk, so a transfer never writes into a process that replaced a dead one.
  // The owner's pidfd is polled at most once per kLivenessFor while it answers alive (a
  // request checked it up to six times, half of the BTE engine's time per post): a pid is
  // handed out again only after the kernel's pid counter has gone round pid_max, which
  // takes far longer. Dead is final and seen at the first poll after the exit.
  bool alive() const;
  static constexpr std::chrono::nanoseconds kLivenessFor{std::chrono::milliseconds(1)};
  // The CQE status for "this side is gone": peer gone, or NIC down if its daemon stopped.
  uint64_t gone_status() const;

  uint64_t check_access(uint64_t q1, uint64_t q2, uint64_t addr, uint64_t len, bool write, uint32_t* dst_cq) const;
  // check_access, and the owner's pieces of the access (offsets of a multi-segment
  // registration translated through the region's segment table).
  uint64_t translate(uint64_t q1, uint64_t q2, uint64_t addr, uint64_t len, bool write, abi::Extents& out) const;
  abi::CqRingView cq_view(uint32_t slot) const;

 private:
  MappedRegion() = default;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  pid_t pid_ = 0;
  int pidfd_ = -1;
  uint64_t attach_id_ = 0;
  // steady_clock time (ns) of the last poll that found the owner alive (at first: long
  // enough ago to poll); kExited once it exited.
  static constexpr int64_t kExited = -1;
  mutable std::atomic<int64_t> alive_at_{-2 * kLivenessFor.count()};
};

// A target CDM: its NIC address and memory domain (the route of the handle an operation
// names: its MDH, or a vMDH index | kVmdhRoute, mem_handle.h), and the initiator's
// protection domain, which the target must be in.
struct RegionKey {
  uint32_t nic_addr, domain, ptag, cookie;
  bool operator<(const RegionKey& o) const {
    return std::tie(nic_addr, domain, ptag, cookie) < std::tie(o.nic_addr, o.domain, o.ptag, o.cookie);
  }
};

// Thread-safe directory: local CDMs by attach id and key, remote ones cached by key.
class RegionDirectory {
 public:
  RegionDirectory(uint32_t nic_addr, std::string rundir);
  ~RegionDirectory();

  // A CDM of this node attached / went away (called by the control thread).
  std::shared_ptr<MappedRegion> add_local(int ro_fd, int mdd_fd, int heap_fd, uint64_t size, pid_t owner);
  void remove_local(uint64_t attach_id);
  std::shared_ptr<MappedRegion> local(uint64_t attach_id) const;

  // The live region of (nic_addr, memory domain) in the protection domain (ptag, cookie),
  // on this node or on another daemon of this host. nullptr with a CQE status on failure:
  // PEER_GONE (NIC_DOWN) for a CDM that went away, PROTECTION for a memory domain the node
  // does not have (the handle does not translate), NO_PEER for a node not on this host.
  std::shared_ptr<MappedRegion> resolve(const RegionKey& key, uint64_t& status);

  // This node's vMDH bindings (kept by the control thread), through which a key with a vMDH
  // route finds its CDM here.
  VmdhTable& vmdh() { return vmdh_; }

 private:
  std::shared_ptr<MappedRegion> lookup_remote(const RegionKey& key, uint64_t& status);

  const uint32_t nic_addr_;
  const std::string rundir_;
  VmdhTable vmdh_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<MappedRegion>> local_;    // attach id -> region
  // Targets that went away, with the status that says how, until the key names a live CDM
  // again: every transfer racing a death reports PEER_GONE, whichever channel looks first.
  std::map<RegionKey, uint64_t> gone_;
  void note_gone(const RegionKey& key, uint64_t status);  // under mu_
  std::map<RegionKey, std::shared_ptr<MappedRegion>> remote_;  // other nodes' regions
  std::mutex links_mu_;  // serialises lookups at other daemons (one connection each)
  std::map<uint32_t, std::unique_ptr<nicemu::ctl::Connection>> links_;
};

}  // namespace nicemu::daemon
