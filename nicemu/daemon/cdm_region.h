// One attached CDM as the NIC sees it: its shared-memory region (memfd), the registration
// table and CQ descriptors the daemon writes into the region's read-only section, and the
// SMSG mailboxes and CQ rings it allocates in the heap.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "nicemu/abi/counters_layout.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/shm_layout.h"
#include "nicemu/daemon/heap_allocator.h"

namespace nicemu::daemon {

struct Credential {
  uint32_t ptag = 0;
  uint32_t cookie = 0;
  bool operator<(const Credential& o) const { return std::tie(ptag, cookie) < std::tie(o.ptag, o.cookie); }
  bool operator==(const Credential& o) const = default;
};

class CdmRegion {
 public:
  // Creates the memfd, sizes and maps it, and fills in the header. Throws on failure.
  CdmRegion(uint32_t nic_addr, uint32_t device_type, const abi::ctl::Attach& req, pid_t pid,
            uint64_t attach_id, uint64_t region_size);
  ~CdmRegion();
  CdmRegion(const CdmRegion&) = delete;
  CdmRegion& operator=(const CdmRegion&) = delete;

  int memfd() const { return memfd_; }
  uint64_t attach_id() const { return attach_id_; }
  uint32_t inst_id() const { return inst_id_; }
  Credential credential() const { return cred_; }
  pid_t pid() const { return pid_; }
  uint64_t region_size() const { return size_; }
  bool alive() const;

  // Each returns a gni_return_t value.
  int mem_register(const abi::ctl::MemRegister& req, abi::ctl::MemRegisterReply& rep);
  int mem_deregister(const abi::ctl::MemDeregister& req);
  int cq_create(const abi::ctl::CqCreate& req, abi::ctl::CqCreateReply& rep);
  int cq_destroy(const abi::ctl::CqDestroy& req);
  int mbox_open(const abi::ctl::MboxOpen& req, abi::ctl::MboxOpenReply& rep);
  // The CDM's BTE submission ring (abi/bte_ring.h): allocated in the heap on first use,
  // the same one afterwards. Returns a gni_return_t value.
  int bte_ring(uint64_t& ctl_offset);

  // A datagram of this CDM changed state: wake its waiters (EpPostDataWait, probes).
  void notify_datagram();

  // Marks the region dead (owner gone) or NIC down, invalidates every registration and
  // wakes every waiter so nobody sleeps on a region that will never change again.
  void kill(abi::RegionState why);

  size_t live_registrations() const { return live_regs_; }
  size_t live_cqs() const { return cqs_.size(); }
  size_t mailboxes() const { return mboxes_.size(); }
  uint64_t heap_in_use() const { return heap_.in_use(); }
  // The client-written counter block in the heap (untrusted numbers), nullptr if none.
  const abi::counters::CdmCounterBlock* counter_block() const { return counters_; }

 private:
  abi::RegionHeader* header() const { return reinterpret_cast<abi::RegionHeader*>(base_); }
  abi::RegEntry* reg(uint32_t slot) const {
    return reinterpret_cast<abi::RegEntry*>(base_ + abi::kRegTableOffset) + slot;
  }
  abi::CqDesc* cq(uint32_t slot) const {
    return reinterpret_cast<abi::CqDesc*>(base_ + abi::kCqTableOffset) + slot;
  }
  void release_heap(uint64_t offset, uint64_t bytes);

  int memfd_ = -1;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t attach_id_ = 0;
  uint32_t inst_id_ = 0;
  Credential cred_;
  pid_t pid_ = 0;
  HeapAllocator heap_;
  size_t live_regs_ = 0;
  uint32_t next_reg_slot_ = 0;
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
  const abi::counters::CdmCounterBlock* counters_ = nullptr;
};

}  // namespace nicemu::daemon
