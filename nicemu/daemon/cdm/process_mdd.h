// A process's memory-domain descriptor table on this node. On the hardware a memory handle
// names memory of the registering process at the NIC, whichever of the process's CDMs
// (NIC handles) the access later arrives through: UCX registers through its memory
// domain's CDM and posts through each interface's CDM, Open MPI through one of several
// virtual devices. nicemu validates against the read-only table of the target CDM's region,
// so the daemon keeps the same entries (same slot, generation, range) in every region the
// process has attached in one protection domain. The handle carries the memory domain (MDH)
// of the CDM that registered, so remote accesses find that CDM's region, where the dst CQ
// lives (the copies have none); the copies serve the process's own local-handle checks.
#pragma once
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/daemon/cdm/cdm_region.h"

namespace nicemu::daemon {

// `family` holds every live region of the caller's process and credential, the caller too.
// Each returns a gni_return_t value.
int mdd_register(CdmRegion& caller, const std::vector<CdmRegion*>& family, const RegSpec& spec,
                 abi::ctl::MemRegisterReply& rep);
int mdd_deregister(CdmRegion& caller, const std::vector<CdmRegion*>& family, const abi::ctl::MemDeregister& req);
// GNI_MEM_UPDATE_REGION: the pages of the reserved registration req's handle names are
// filled in; it turns live in every region of the family (the first update does it).
int mdd_update(CdmRegion& caller, const std::vector<CdmRegion*>& family, const abi::ctl::MemRegister& req,
               abi::ctl::MemRegisterReply& rep);

// A new CDM of the process gets the registrations its sibling already has.
void mdd_copy_into(CdmRegion& fresh, const CdmRegion& sibling);

// The slots holding registrations `region` made itself (not copies of its siblings').
std::vector<uint32_t> mdd_own_slots(const CdmRegion& region);
// The CDM `origin` is gone: its registrations (`slots`, from mdd_own_slots) go with it
// (GNI_CdmDestroy releases them). Only those slots are visited: a process with a thousand
// CDMs would otherwise cost every detach a walk of every sibling's whole table.
void mdd_drop_origin(uint64_t origin, const std::vector<uint32_t>& slots, const std::vector<CdmRegion*>& family);

}  // namespace nicemu::daemon
