// One attached CDM as the NIC sees it: its shared-memory region (memfd), the registration
// table and CQ descriptors the daemon writes into the region's read-only section, and the
// SMSG mailboxes and CQ rings it allocates in the heap.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
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

namespace nicemu::daemon {

struct Credential {
  uint32_t ptag = 0;
  uint32_t cookie = 0;
  bool operator<(const Credential& o) const { return std::tie(ptag, cookie) < std::tie(o.ptag, o.cookie); }
  bool operator==(const Credential& o) const = default;
};

// What a registration covers: one range at `address`, or `segments` (peers then address
// offsets 0 .. length-1 of their concatenation and `address` is unused).
struct RegSpec {
  uint64_t address = 0;
  uint64_t length = 0;
  uint32_t flags = 0;
  uint32_t dst_cq = abi::kNoCq;
  std::vector<abi::ctl::MemSegment> segments;
  uint32_t vmdh = 0;      // vMDH index + 1 (GNI_MEM_USE_VMDH); 0: none
  bool reserved = false;  // GNI_MEM_RESERVE_REGION: not accessible until filled in (kRegReserved)
};

class CdmRegion {
 public:
  // Creates the memfd, sizes and maps it, and fills in the header. Throws on failure.
  // `mem_domain` is the MDH its registrations' handles carry (mem_handle.h), unique among
  // the node's live CDMs.
  CdmRegion(uint32_t nic_addr, uint32_t device_type, const abi::ctl::Attach& req, pid_t pid,
            uint64_t attach_id, uint64_t region_size, uint32_t mem_domain);
  ~CdmRegion();
  CdmRegion(const CdmRegion&) = delete;
  CdmRegion& operator=(const CdmRegion&) = delete;

  // The two memfds of the region (abi/region_map.h): read-only section (sealed), heap.
  int ro_memfd() const { return ro_fd_; }
  int heap_memfd() const { return heap_fd_; }
  uint64_t attach_id() const { return attach_id_; }
  uint32_t inst_id() const { return inst_id_; }
  uint32_t mem_domain() const { return mem_domain_; }
  Credential credential() const { return cred_; }
  pid_t pid() const { return pid_; }
  uint64_t region_size() const { return size_; }
  bool alive() const;

  // Registration table. A registration belongs to the process, not to one CDM, so the
  // daemon keeps the same entries in all the process's CDMs of one domain (process_mdd.h);
  // these are the per-region primitives it uses. Each int is a gni_return_t value.
  int check_register(const RegSpec& spec) const;
  bool reg_free(uint32_t slot) const { return reg(slot)->state == abi::kRegFree; }
  const abi::RegEntry& reg_entry(uint32_t slot) const { return *reg(slot); }
  RegSpec reg_spec(uint32_t slot) const;  // what `slot` registers (live slots)
  // The attach id of the CDM the process registered `slot` through (0 if free).
  uint64_t reg_origin(uint32_t slot) const;
  // Publishes free `slot` (segments first, then the entry under its seqlock). `origin` and
  // `domain` are the attach id and memory domain of the CDM that registered it.
  int reg_store(uint32_t slot, uint32_t gen, const RegSpec& spec, uint32_t dst_cq, uint64_t origin, uint32_t domain);
  void reg_clear(uint32_t slot);
  // A reserved registration's pages were filled in (GNI_MEM_UPDATE_REGION): it turns live.
  void reg_make_live(uint32_t slot);
  // The slot of this region's registration holding vMDH `index`, if any.
  std::optional<uint32_t> vmdh_slot(uint32_t index) const;
  uint32_t reg_hint() const { return next_reg_slot_; }
  void set_reg_hint(uint32_t slot) { next_reg_slot_ = slot % abi::kRegSlots; }

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

  size_t live_registrations() const { return live_regs_; }
  size_t live_cqs() const { return cqs_.size(); }
  size_t mailboxes() const { return mboxes_.size(); }
  uint64_t heap_in_use() const { return heap_.in_use(); }
  // The client-written counter block in the heap (untrusted numbers), nullptr if none.
  const abi::counters::CdmCounterBlock* counter_block() const { return counters_; }
  // The daemon's writable view of the header (for the lease, lease_keeper.h).
  abi::RegionHeader* header() const { return reinterpret_cast<abi::RegionHeader*>(base_); }

 private:
  abi::RegEntry* reg(uint32_t slot) const {
    return reinterpret_cast<abi::RegEntry*>(base_ + abi::kRegTableOffset) + slot;
  }
  abi::CqDesc* cq(uint32_t slot) const {
    return reinterpret_cast<abi::CqDesc*>(base_ + abi::kCqTableOffset) + slot;
  }
  void release_heap(uint64_t offset, uint64_t bytes);
  // Takes a free slot and publishes the entry under its seqlock; returns its handle.
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
  // Runs of the segment table (byte offsets in the read-only section, like the heap's).
  HeapAllocator segs_{abi::kSegTableOffset, abi::kSegTableOffset + uint64_t{abi::kSegSlots} * sizeof(abi::SegEntry)};
  size_t live_regs_ = 0;
  uint32_t next_reg_slot_ = 0;
  std::unordered_map<uint32_t, uint64_t> origin_;  // live slot -> attach id it was registered through
  std::unordered_map<uint32_t, uint32_t> vmdh_slots_;  // vMDH index -> slot
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
};

}  // namespace nicemu::daemon
