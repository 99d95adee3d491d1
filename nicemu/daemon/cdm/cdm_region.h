// One attached CDM as the NIC sees it: its shared-memory region (memfds), the CQ descriptors
// the daemon writes into the region's read-only section, its process's MDD table
// (process_mdd.h, mapped into the region), and the SMSG mailboxes and CQ rings it allocates
// in the heap.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "nicemu/abi/counters_layout.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/shm_layout.h"
#include "nicemu/abi/dgram_ring.h"
#include "nicemu/daemon/cdm/heap_allocator.h"
#include "nicemu/daemon/cdm/process_mdd.h"

namespace nicemu::daemon {

struct Credential {
  uint32_t ptag = 0;
  uint32_t cookie = 0;
  bool operator<(const Credential& o) const { return std::tie(ptag, cookie) < std::tie(o.ptag, o.cookie); }
  bool operator==(const Credential& o) const = default;
};

class CdmRegion {
 public:
  // Creates the memfds, sizes and maps them with `mdd` between, and fills in the header.
  // Throws on failure. `mem_domain` is the MDH its registrations' handles carry
  // (mem_handle.h), unique among the node's live CDMs.
  CdmRegion(uint32_t nic_addr, uint32_t device_type, const abi::ctl::Attach& req, pid_t pid,
            uint64_t attach_id, uint64_t region_size, uint32_t mem_domain, std::shared_ptr<ProcessMdd> mdd);
  ~CdmRegion();
  CdmRegion(const CdmRegion&) = delete;
  CdmRegion& operator=(const CdmRegion&) = delete;

  // The memfds of the region (abi/region_map.h): read-only section (sealed), MDD table, heap.
  int ro_memfd() const { return ro_fd_; }
  int mdd_memfd() const { return mdd_->memfd(); }
  int heap_memfd() const { return heap_fd_; }
  uint64_t attach_id() const { return attach_id_; }
  uint32_t inst_id() const { return inst_id_; }
  uint32_t mem_domain() const { return mem_domain_; }
  Credential credential() const { return cred_; }
  pid_t pid() const { return pid_; }
  uint64_t region_size() const { return size_; }
  bool alive() const;

  // The process's MDD table (shared with its other CDMs of this credential).
  ProcessMdd& mdd() const { return *mdd_; }
  const std::shared_ptr<ProcessMdd>& mdd_ptr() const { return mdd_; }
  // Checks a registration the daemon is asked to make through this CDM (its dst CQ, sizes).
  int check_register(const RegSpec& spec) const;

  // Each returns a gni_return_t value.
  int cq_create(const abi::ctl::CqCreate& req, abi::ctl::CqCreateReply& rep);
  int cq_destroy(const abi::ctl::CqDestroy& req);
  // `may_create` false: only an existing mailbox is returned (a limit is reached).
  int mbox_open(const abi::ctl::MboxOpen& req, abi::ctl::MboxOpenReply& rep, bool may_create = true);
  // The CDM's BTE submission ring (abi/bte_ring.h): allocated in the heap on first use,
  // the same one afterwards. Returns a gni_return_t value.
  int bte_ring(uint64_t& ctl_offset);

  // The CDM's datagram completion ring (abi/dgram_ring.h): allocated in the heap on first
  // use, the same one afterwards. Returns a gni_return_t value.
  int dgram_ring(uint64_t& ctl_offset);
  // Publishes a finished datagram on that ring; false if there is no ring or it is full
  // (then `stalled` is set for the library to kick us, see dgram_ring.h).
  bool push_datagram(const abi::DgramEvent& e);
  bool has_dgram_ring() const { return dgram_ring_.valid(); }
  // A datagram of this CDM changed state: wake its waiters (EpPostDataWait, probes).
  void notify_datagram();

  // For the daemon's own structures in the heap (SMSG relay blocks, smsg_relay.h): a zeroed
  // block, nullopt if the heap is full; and a pointer to [offset, offset + bytes) of the
  // heap, nullptr if that is not inside it.
  std::optional<uint64_t> heap_block(uint64_t bytes);
  char* heap_ptr(uint64_t offset, uint64_t bytes) const;
  // Pushes `entry` into CQ `slot` (a CQ destroyed meanwhile is skipped); false if not pushed.
  bool push_cqe(uint32_t slot, uint64_t entry) const;
  size_t push_cqes(uint32_t slot, const uint64_t* entries, size_t n) const;  // in order; how many went in

  // Marks the region dead (owner gone) or NIC down, invalidates every registration and
  // wakes every waiter so nobody sleeps on a region that will never change again.
  void kill(abi::RegionState why);

  size_t live_registrations() const { return mdd_->live(mem_domain_); }
  size_t live_cqs() const { return cqs_.size(); }
  size_t mailboxes() const { return mboxes_.size(); }
  uint64_t heap_in_use() const { return heap_.in_use(); }
  // The client-written counter block in the heap (untrusted numbers), nullptr if none.
  const abi::counters::CdmCounterBlock* counter_block() const { return counters_; }
  // The daemon's writable view of the header (for the lease, lease_keeper.h).
  abi::RegionHeader* header() const { return reinterpret_cast<abi::RegionHeader*>(base_); }
  // RemotePosts taken from the owner's connection, mod 2^32: relayed SMSG messages name how
  // many came before them (ctl::SmsgRelaySend::posts_before) and wait for them (smsg_relay.h).
  uint32_t remote_posts_taken() const { return remote_posts_taken_; }
  void took_remote_post() { ++remote_posts_taken_; }

 private:
  abi::CqDesc* cq(uint32_t slot) const {
    return reinterpret_cast<abi::CqDesc*>(base_ + abi::kCqTableOffset) + slot;
  }
  void release_heap(uint64_t offset, uint64_t bytes);
  std::shared_ptr<ProcessMdd> mdd_;
  int ro_fd_ = -1;
  int heap_fd_ = -1;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t attach_id_ = 0;
  uint32_t inst_id_ = 0;
  uint32_t mem_domain_ = 0;
  Credential cred_;
  pid_t pid_ = 0;
  HeapAllocator heap_;
  std::map<uint32_t, uint64_t> cqs_;  // slot -> ctl offset
  struct MboxKey {
    uint32_t slot, gen, offset;
    bool operator<(const MboxKey& o) const { return std::tie(slot, gen, offset) < std::tie(o.slot, o.gen, o.offset); }
  };
  struct Mbox {
    uint64_t ctl_offset, bytes;
    uint32_t credits, max_size;
  };
  std::map<MboxKey, Mbox> mboxes_;
  uint64_t bte_ring_offset_ = 0;  // 0 = not allocated yet
  abi::DgramRingView dgram_ring_;  // invalid = not allocated yet
  uint64_t dgram_ring_offset_ = 0;
  const abi::counters::CdmCounterBlock* counters_ = nullptr;
  uint32_t remote_posts_taken_ = 0;
};

}  // namespace nicemu::daemon
