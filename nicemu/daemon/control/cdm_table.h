// The node's attached CDMs (cdm/cdm_region.h) by attach id, with the memory domains (MDH
// values) they hold, their index by inst, process and credential (cdm/cdm_index.h), and the
// daemon's lease on their regions (lease_keeper.h). How a request finds the CDM it is about.
#pragma once
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "nicemu/abi/mem_handle.h"
#include "nicemu/daemon/cdm/cdm_index.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/cdm/vmdh_table.h"
#include "nicemu/daemon/lease_keeper.h"

namespace nicemu::daemon {

struct Peer;

class CdmTable {
 public:
  using Regions = std::map<uint64_t, std::unique_ptr<CdmRegion>>;
  // `vmdh`: the node's vMDH table (bte/bte_regions.h), asked when a lookup names a vMDH.
  explicit CdmTable(std::function<const VmdhTable&()> vmdh) : vmdh_(std::move(vmdh)) {}

  // The CDM `attach_id` (nullptr if none), whether alive or not; and only if alive.
  CdmRegion* get(uint64_t attach_id) const;
  CdmRegion* live(uint64_t attach_id) const;
  // The CDM the connection of `peer` attached (nullptr if none).
  CdmRegion* owned(const Peer& peer) const;
  // The live CDM of (credential `c`, `inst_id`).
  CdmRegion* find(const Credential& c, uint32_t inst_id) const;
  // The live CDM of memory domain `domain` (the MDH of its handles) if it is in domain `c`:
  // how memory operations find their target, whatever id their EP was bound with.
  // `domain`: a route (mem_handle.h), a memory domain or a vMDH index | kVmdhRoute.
  CdmRegion* find_by_domain(const Credential& c, uint32_t domain) const;
  // The live CDMs of process `pid` in domain `c` (process_mdd.h).
  std::vector<CdmRegion*> family(pid_t pid, const Credential& c) const;
  const CdmIndex& index() const { return index_; }
  const Regions& all() const { return cdms_; }

  // A free memory domain, handed out round-robin so a domain is reused as late as possible;
  // 0 if every one is taken.
  uint32_t free_domain() const;
  uint64_t next_attach_id() { return next_attach_++; }
  // Takes `region` (of process `pid`, credential `c`, in its memory domain) into the table and
  // under the daemon's lease.
  void add(std::unique_ptr<CdmRegion> region, pid_t pid, const Credential& c, uint32_t inst_id);
  // Drops CDM `attach_id`: off the lease, its domain free, out of the index, unmapped.
  void remove(uint64_t attach_id);
  // Drops every CDM (the daemon stops).
  void clear();

 private:
  std::function<const VmdhTable&()> vmdh_;
  Regions cdms_;  // attach_id -> region
  CdmIndex index_;  // the same CDMs, by inst, process, credential
  // After cdms_, so it ends (marking the regions still mapped NIC down) before they unmap.
  LeaseKeeper leases_;
  uint64_t next_attach_ = 1;
  // Memory domains of the attached CDMs: attach id per domain, 0 = free.
  std::array<uint64_t, abi::mdh::kMaxDomains> domains_{};
  uint32_t next_domain_ = 1;
};

}  // namespace nicemu::daemon
