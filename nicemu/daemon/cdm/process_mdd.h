// A process's memory-domain descriptor table on this node: its registrations and their
// segments (shm_layout.h, the MDD memfd). On the hardware a memory handle names memory of the
// registering process at the NIC, whichever of the process's CDMs (NIC handles) the access
// later arrives through: UCX registers through its memory domain's CDM and posts through each
// interface's CDM, Open MPI through one of several virtual devices. So one table serves all
// the process's CDMs of one credential: every region of theirs maps it at the same offsets.
//
// The owner's library writes plain registrations itself (no request to the daemon: a
// registration costs what the hardware's does). The daemon writes only what needs the node
// (vMDH indices), its own bookkeeping (segments, reserved registrations), in slots the library
// chose, and clears a CDM's entries when the CDM goes. It never trusts an entry it did not
// write: the side state here (which slots it made, their segment runs and vMDH indices)
// is what it acts on.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/shm_layout.h"
#include "nicemu/daemon/cdm/heap_allocator.h"

namespace nicemu::daemon {

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

class ProcessMdd {
 public:
  // Creates the memfd (size sealed) and the daemon's writable mapping. Throws on failure.
  explicit ProcessMdd(pid_t pid);
  ~ProcessMdd();
  ProcessMdd(const ProcessMdd&) = delete;
  ProcessMdd& operator=(const ProcessMdd&) = delete;

  int memfd() const { return fd_; }
  // The owner sealed the memfd against new writers (region_map.h): only then may peers get it.
  bool owner_sealed() const;

  const abi::RegEntry& entry(uint32_t slot) const { return entries()[slot]; }

  // A registration the daemon makes (vMDH, reserved, segments) in free `slot`, chosen by the
  // library, for the CDM of memory domain `domain`. Fills in the handle. gni_return_t values.
  int store(uint32_t slot, const RegSpec& spec, uint32_t dst_cq, uint32_t domain, abi::ctl::MemRegisterReply& rep);
  // Removes a registration the daemon made that the handle names; kInvalidParam otherwise.
  int deregister(uint64_t qword1, uint64_t qword2);
  // GNI_MEM_UPDATE_REGION on a reserved registration the daemon made.
  int update(uint64_t qword1, uint64_t qword2, uint64_t address, uint64_t length);
  // The CDM of memory domain `domain` is gone: every entry registered through it goes too
  // (GNI_CdmDestroy releases them), written by the library or by us.
  void drop_domain(uint32_t domain);
  // CQ `cq` of the CDM of `domain` is destroyed: its registrations lose their remote events.
  void drop_cq(uint32_t domain, uint32_t cq);
  // Live registrations made through `domain` (a scan: for status, not for hot paths).
  size_t live(uint32_t domain) const;
  // The slot of the registration the daemon made that holds vMDH `index` for `domain`.
  std::optional<uint32_t> vmdh_slot(uint32_t index, uint32_t domain) const;
  // The vMDH index + 1 a registration the daemon made holds (0: none or not ours).
  uint32_t made_vmdh(uint32_t slot) const;

  // Registrations the process may hold (ctl::RegBudget), counted against its limits.
  uint64_t granted = 0;

 private:
  abi::RegEntry* entries() const { return reinterpret_cast<abi::RegEntry*>(base_); }
  abi::SegEntry* segments() const {
    return reinterpret_cast<abi::SegEntry*>(base_ + (abi::kSegTableOffset - abi::kRegTableOffset));
  }
  // Frees `slot` (only if it still belongs to `domain`, unless 0) and forgets what we made there.
  // False if its seqlock stayed taken (a hostile owner).
  bool clear(uint32_t slot, uint32_t domain = 0);

  int fd_ = -1;
  char* base_ = nullptr;
  struct Made {
    uint64_t seg_run = 0;  // offset of its segment run (0: none)
    uint32_t vmdh = 0;     // vMDH index + 1
    uint32_t domain = 0;
  };
  std::unordered_map<uint32_t, Made> made_;  // slots the daemon wrote
  // Runs of the segment table, as offsets from kSegTableOffset + 64 (0 means "none").
  HeapAllocator segs_{64, 64 + uint64_t{abi::kSegSlots} * sizeof(abi::SegEntry)};
};

}  // namespace nicemu::daemon
