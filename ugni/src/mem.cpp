// Memory registration: the daemon owns the table (it writes the entry peers validate
// against); the handle it returns names the entry.
#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;

extern "C" {

gni_return_t GNI_MemRegister(gni_nic_handle_t nic_hndl, uint64_t address, uint64_t length,
                             gni_cq_handle_t dst_cq_hndl, uint32_t flags, uint32_t vmdh_index,
                             gni_mem_handle_t* mem_hndl) {
  (void)vmdh_index;  // GNI_MEM_USE_VMDH is not supported (rejected below)
  Nic* n = as_nic(nic_hndl);
  if (!n || !mem_hndl || length == 0 || address == 0) return GNI_RC_INVALID_PARAM;
  if (flags & (GNI_MEM_USE_VMDH | GNI_MEM_RESERVE_REGION | GNI_MEM_UPDATE_REGION | GNI_MEM_PHYS_SEGMENTS |
               GNI_MEM_PRIV_MASK | GNI_MEM_CUDA))
    return GNI_RC_INVALID_PARAM;
  Cq* dst = nullptr;
  if (dst_cq_hndl) {
    dst = as_cq(dst_cq_hndl);
    if (!dst || dst->nic != n) return GNI_RC_INVALID_PARAM;
  }
  abi::ctl::MemRegister req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMemRegister);
  req.address = address;
  req.length = length;
  req.flags = flags;
  req.dst_cq = dst ? dst->slot : abi::kNoCq;
  abi::ctl::MemRegisterReply rep{};
  if (!n->conn.call(req, rep)) return GNI_RC_ERROR_RESOURCE;
  if (rep.r.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.r.rc);
  mem_hndl->qword1 = rep.qword1;
  mem_hndl->qword2 = rep.qword2;
  n->live_regs.fetch_add(1, std::memory_order_relaxed);
  count(n->counters, ctr::cdm::registrations);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_MemDeregister(gni_nic_handle_t nic_hndl, gni_mem_handle_t* mem_hndl) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !mem_hndl) return GNI_RC_INVALID_PARAM;
  abi::ctl::MemDeregister req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMemDeregister);
  req.qword1 = mem_hndl->qword1;
  req.qword2 = mem_hndl->qword2;
  abi::ctl::Reply rep{};
  if (!n->conn.call(req, rep)) return GNI_RC_INVALID_PARAM;  // NIC gone: nothing registered any more
  if (rep.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.rc);
  n->live_regs.fetch_sub(1, std::memory_order_relaxed);
  return GNI_RC_SUCCESS;
}

// Several segments make one region that peers address by offset, not by virtual address
// (the API's rule for multi-segment registrations). That needs an offset-to-address
// translation at the target, which the registration table does not carry yet, so only the
// single-segment form (plain GNI_MemRegister, addressed by VA) is accepted; more segments
// return GNI_RC_ILLEGAL_OP (docs/compatibility.md).
gni_return_t GNI_MemRegisterSegments(gni_nic_handle_t nic_hndl, gni_mem_segment_t* mem_segments, uint32_t segments_cnt,
                                     gni_cq_handle_t dst_cq_hndl, uint32_t flags, uint32_t vmdh_index,
                                     gni_mem_handle_t* mem_hndl) {
  if (!as_nic(nic_hndl) || !mem_segments || segments_cnt == 0 || !mem_hndl) return GNI_RC_INVALID_PARAM;
  for (uint32_t i = 0; i < segments_cnt; ++i)
    if (mem_segments[i].length == 0 || mem_segments[i].address == 0) return GNI_RC_INVALID_PARAM;
  if (segments_cnt > 1) return GNI_RC_ILLEGAL_OP;
  return GNI_MemRegister(nic_hndl, mem_segments[0].address, mem_segments[0].length, dst_cq_hndl, flags, vmdh_index,
                         mem_hndl);
}

// The size of the NIC's virtual-MDH block. Recorded; registrations with GNI_MEM_USE_VMDH
// are refused anyway (GNI_MemRegister), so the block is never used.
gni_return_t GNI_SetMddResources(gni_nic_handle_t nic_hndl, uint32_t num_entries) {
  Nic* n = as_nic(nic_hndl);
  if (!n) return GNI_RC_INVALID_PARAM;
  n->mdd_resources = num_entries;
  return GNI_RC_SUCCESS;
}

}  // extern "C"
