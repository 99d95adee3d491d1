// Memory registration. Plain registrations go straight into the process's MDD table
// (mdd_table.h), which peers and the daemon validate every access against; those that need
// the node (vMDH indices, reserved regions, segments) are made by the daemon in a slot we
// chose. A handle names its entry: memory domain, slot, first page.
#include <cstddef>
#include <memory>

#include "internal.h"
#include "fault_engine.h"
#include "mdd_table.h"
#include "ofi_port.h"
#include "nicemu/abi/mem_handle.h"

using namespace nicemu;
using namespace nicemu::ugni;

namespace {

// Checks shared by both registration calls: flags nicemu does not support, a dst CQ that
// must belong to this NIC, and a vMDH registration's block (GNI_SetMddResources first, an
// index inside it, or -1). Returns the dst CQ's slot (or kNoCq) through `dst_slot`.
gni_return_t check_registration(Nic* n, gni_cq_handle_t dst_cq_hndl, uint32_t flags, uint32_t vmdh_index,
                                uint32_t& dst_slot) {
  if (flags & (GNI_MEM_PHYS_SEGMENTS | GNI_MEM_PRIV_MASK | GNI_MEM_CUDA)) return GNI_RC_INVALID_PARAM;
  if (flags & GNI_MEM_USE_VMDH) {
    if (n->mdd_resources == 0) return GNI_RC_INVALID_PARAM;  // "will fail if GNI_SetMddResources has not been called"
    if (vmdh_index != UINT32_MAX && vmdh_index >= n->mdd_resources) return GNI_RC_INVALID_PARAM;
  }
  dst_slot = abi::kNoCq;
  if (dst_cq_hndl) {
    Cq* dst = as_cq(dst_cq_hndl);
    if (!dst || dst->nic != n) return GNI_RC_INVALID_PARAM;
    dst_slot = dst->slot;
  }
  return GNI_RC_SUCCESS;
}

}  // namespace

extern "C" {

// GNI_MEM_USE_VMDH takes entry `vmdh_index` of the node's vMDH block (GNI_SetMddResources),
// GNI_MEM_RESERVE_REGION registers without making the memory reachable, and
// GNI_MEM_UPDATE_REGION fills in pages of the reserved registration *mem_hndl names (the
// first call makes it live); docs/decisions.md.
gni_return_t GNI_MemRegister(gni_nic_handle_t nic_hndl, uint64_t address, uint64_t length,
                             gni_cq_handle_t dst_cq_hndl, uint32_t flags, uint32_t vmdh_index,
                             gni_mem_handle_t* mem_hndl) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !mem_hndl || length == 0 || address == 0) return GNI_RC_INVALID_PARAM;
  abi::ctl::MemRegister req{};
  if (gni_return_t rc = check_registration(n, dst_cq_hndl, flags, vmdh_index, req.dst_cq); rc != GNI_RC_SUCCESS)
    return rc;
  if (address + length < address) return GNI_RC_INVALID_PARAM;
  const uint64_t first_page = address & ~(abi::kPageSize - 1);
  if ((address + length - first_page + abi::kPageSize - 1) / abi::kPageSize > 0xFFFFFFF) return GNI_RC_INVALID_PARAM;
  if (!n->self->alive()) return GNI_RC_INVALID_STATE;
  const bool update = flags & GNI_MEM_UPDATE_REGION;
  if (fault_path(n))
    if (gni_return_t rc = fault_register(n, update); rc != GNI_RC_SUCCESS) return rc;
  const uint32_t domain = n->mem_domain;
  if (!update && !(flags & (GNI_MEM_USE_VMDH | GNI_MEM_RESERVE_REGION))) {
    // The common case: no request to the daemon.
    const uint32_t slot = n->mdd->take(n, domain, MddTable::kOurs);
    if (slot == abi::kRegSlots) return GNI_RC_ERROR_RESOURCE;
    n->mdd->publish(slot, address, length, flags, req.dst_cq, domain);
    abi::mdh::Fields f = abi::mdh::registration_fields(address, length, domain, slot, flags & GNI_MEM_READ_ONLY, 0);
    abi::mdh::encode(f, mem_hndl->qword1, mem_hndl->qword2);
  } else {
    req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMemRegister);
    req.address = address;
    req.length = length;
    req.flags = flags;
    req.vmdh_index = vmdh_index;
    req.mdd_block = n->mdd_resources;
    if (update) {
      req.qword1 = mem_hndl->qword1;
      req.qword2 = mem_hndl->qword2;
    } else if ((req.slot = n->mdd->take(n, domain, MddTable::kDaemons)) == abi::kRegSlots) {
      return GNI_RC_ERROR_RESOURCE;
    }
    abi::ctl::MemRegisterReply rep{};
    if (gni_return_t rc = daemon_call(n, req, rep); rc != GNI_RC_SUCCESS) {
      if (!update) n->mdd->give(n, req.slot);
      return rc;
    }
    mem_hndl->qword1 = rep.qword1;
    mem_hndl->qword2 = rep.qword2;
    if (update) return GNI_RC_SUCCESS;  // the same registration
  }
  ofi_register(n, *mem_hndl, flags & GNI_MEM_READ_ONLY);  // peers on other hosts reach it over ofi
  n->live_regs.fetch_add(1, std::memory_order_relaxed);
  count(n->counters, ctr::cdm::registrations);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MemDeregister(gni_nic_handle_t nic_hndl, gni_mem_handle_t* mem_hndl) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !mem_hndl) return GNI_RC_INVALID_PARAM;
  auto f = abi::mdh::decode(mem_hndl->qword1, mem_hndl->qword2);
  if (!f) return GNI_RC_INVALID_PARAM;
  switch (n->mdd->use(f->slot)) {
    case MddTable::kOurs:
      if (!n->mdd->unpublish(*f)) return GNI_RC_INVALID_PARAM;
      break;
    case MddTable::kDaemons: {
      abi::ctl::MemDeregister req{};
      req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMemDeregister);
      req.qword1 = mem_hndl->qword1;
      req.qword2 = mem_hndl->qword2;
      abi::ctl::Reply rep{};
      if (!n->conn.call(req, rep)) return GNI_RC_INVALID_PARAM;  // NIC gone: nothing registered any more
      if (rep.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.rc);
      break;
    }
    default:
      return GNI_RC_INVALID_PARAM;  // not registered (any more)
  }
  ofi_deregister(n, *mem_hndl);
  n->mdd->give(n, f->slot);
  n->live_regs.fetch_sub(1, std::memory_order_relaxed);
  return GNI_RC_SUCCESS;
}

// Several segments make one region that peers address by offset, 0 .. (sum of lengths) - 1,
// not by virtual address (§10.2): remote_addr for every access of a peer, and local_addr
// where the NIC writes or reads through the handle (GETs, RDMA, fetched AMO values); an
// FMA PUT reads its source by VA as always. The daemon keeps the segment list in the
// region's read-only segment table, and every validation translates offsets through it.
gni_return_t GNI_MemRegisterSegments(gni_nic_handle_t nic_hndl, gni_mem_segment_t* mem_segments, uint32_t segments_cnt,
                                     gni_cq_handle_t dst_cq_hndl, uint32_t flags, uint32_t vmdh_index,
                                     gni_mem_handle_t* mem_hndl) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !mem_segments || segments_cnt == 0 || !mem_hndl) return GNI_RC_INVALID_PARAM;
  if (segments_cnt > abi::ctl::kMaxMemSegments) return GNI_RC_INVALID_PARAM;  // docs/decisions.md
  if (flags & GNI_MEM_UPDATE_REGION) return GNI_RC_INVALID_PARAM;  // pages are filled in through GNI_MemRegister
  auto req = std::make_unique<abi::ctl::MemRegisterSegments>();
  if (gni_return_t rc = check_registration(n, dst_cq_hndl, flags, vmdh_index, req->dst_cq); rc != GNI_RC_SUCCESS)
    return rc;
  req->vmdh_index = vmdh_index;
  req->mdd_block = n->mdd_resources;
  for (uint32_t i = 0; i < segments_cnt; ++i) {
    if (mem_segments[i].length == 0 || mem_segments[i].address == 0) return GNI_RC_INVALID_PARAM;
    req->segments[i].address = mem_segments[i].address;
    req->segments[i].length = mem_segments[i].length;
  }
  req->h.op = static_cast<uint16_t>(abi::ctl::Op::kMemRegisterSegments);
  req->flags = flags;
  req->count = segments_cnt;
  if (fault_path(n))
    if (gni_return_t rc = fault_register(n); rc != GNI_RC_SUCCESS) return rc;
  if ((req->slot = n->mdd->take(n, n->mem_domain, MddTable::kDaemons)) == abi::kRegSlots) return GNI_RC_ERROR_RESOURCE;
  abi::ctl::MemRegisterReply rep{};
  const size_t bytes =
      offsetof(abi::ctl::MemRegisterSegments, segments) + size_t{segments_cnt} * sizeof(abi::ctl::MemSegment);
  const long got = n->conn.call(req.get(), bytes, &rep, sizeof rep);
  if (got < static_cast<long>(sizeof(abi::ctl::Reply)) || rep.r.rc != GNI_RC_SUCCESS) {
    n->mdd->give(n, req->slot);
    return got < static_cast<long>(sizeof(abi::ctl::Reply)) ? GNI_RC_ERROR_RESOURCE : static_cast<gni_return_t>(rep.r.rc);
  }
  mem_hndl->qword1 = rep.qword1;
  mem_hndl->qword2 = rep.qword2;
  n->live_regs.fetch_add(1, std::memory_order_relaxed);
  return GNI_RC_SUCCESS;
}

// The size of the NIC's virtual-MDH block: GNI_MEM_USE_VMDH registrations take indices below
// it. The indices live in the node's block of the protection domain (the daemon's
// VmdhTable), shared by every process of the domain there, as on the hardware; a handle's
// MDH field holds the index, so the block has at most 4096 entries.
gni_return_t GNI_SetMddResources(gni_nic_handle_t nic_hndl, uint32_t num_entries) {
  Nic* n = as_nic(nic_hndl);
  if (!n || num_entries > abi::mdh::kVmdhIndices) return GNI_RC_INVALID_PARAM;
  n->mdd_resources = num_entries;
  return GNI_RC_SUCCESS;
}

// A copy of a vMDH handle naming another index (for peers with the same layout: each node
// has the memory under its own index). The rebuilt handle keeps address, length, flags and
// the registration slot (only a hint to the target) and gets a fresh CRC.
gni_return_t GNI_RebuildMemHndl(gni_mem_handle_t* src_mem_hndl, uint32_t vmdh_index, gni_mem_handle_t* dst_mem_hndl) {
  if (!src_mem_hndl || !dst_mem_hndl || vmdh_index >= abi::mdh::kVmdhIndices) return GNI_RC_INVALID_PARAM;
  auto f = abi::mdh::decode(src_mem_hndl->qword1, src_mem_hndl->qword2);
  if (!f || !(f->flags & abi::mdh::kFlagVmdh)) return GNI_RC_INVALID_PARAM;
  f->domain = vmdh_index;
  abi::mdh::encode(*f, dst_mem_hndl->qword1, dst_mem_hndl->qword2);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
