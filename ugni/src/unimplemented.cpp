// Every uGNI function of the fact sheet that nicemu does not implement yet. Each returns
// GNI_RC_ILLEGAL_OP ("operation not supported on this device", §3) so that clients probing
// optional features fall back cleanly; privileged calls return GNI_RC_PERMISSION_ERROR
// (§7), as an unprivileged caller on a real system would see. docs/compatibility.md lists
// the same set. When a family is implemented, move its definitions to their own file.
#include "gni_pub.h"

extern "C" {

// --- CDM hold/release (0x61) and checkpoint/resume (0x5c), §5.2 (P2) ---------------------
// Issue: "CDM hold/release and checkpoint" — keep a ptag reservation across CdmDestroy.

gni_return_t GNI_CdmHold(uint8_t, uint32_t, int*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CdmRelease(int) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CdmCheckpoint(gni_cdm_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CdmResume(gni_cdm_handle_t) { return GNI_RC_ILLEGAL_OP; }

// --- Device and capability queries, §6.2 (P1/P2) -----------------------------------------
// Issue: "Device resource and capability queries" — NTT granularity, capability words.

gni_return_t GNI_GetNttGran(uint32_t, uint32_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_GetCapabilities(gni_revision_info_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_ValidateCapabilities(gni_revision_info_t, gni_revision_info_t) {
  return GNI_RC_ILLEGAL_OP;
}

// --- Privileged job configuration, §6.2 and §7.2 (P2) ------------------------------------
// Issue: none planned — launchers configure jobs through the daemon, not through uGNI.
// An unprivileged caller is refused, which is what these return on a real system too.

gni_return_t GNI_SetJobResInfo(uint32_t, uint8_t, gni_job_res_t, uint64_t) {
  return GNI_RC_PERMISSION_ERROR;
}
gni_return_t GNI_SuspendJob(uint32_t, uint64_t, uint8_t, uint32_t, uint32_t) {
  return GNI_RC_PERMISSION_ERROR;
}
gni_return_t GNI_ResumeJob(uint32_t, uint64_t, uint8_t, uint32_t) {
  return GNI_RC_PERMISSION_ERROR;
}
gni_return_t GNI_ConfigureNTT(int, gni_ntt_descriptor_t*, uint32_t*) {
  return GNI_RC_PERMISSION_ERROR;
}
gni_return_t GNI_ConfigureJob(uint32_t, uint64_t, uint8_t, uint32_t, gni_job_limits_t*) {
  return GNI_RC_PERMISSION_ERROR;
}
gni_return_t GNI_ConfigureNTTandJob(int, uint64_t, uint8_t, uint32_t, gni_job_limits_t*,
                                    gni_ntt_descriptor_t*, uint32_t*) {
  return GNI_RC_PERMISSION_ERROR;
}
gni_return_t GNI_ConfigureJobFd(uint32_t, uint64_t, uint8_t, uint32_t, gni_job_limits_t*,
                                int*) {
  return GNI_RC_PERMISSION_ERROR;
}

// --- ORB registers, §7.2 (P2) ----------------------------------------------------------------
// Issue: "NIC tuning knobs" — ORB registers (bandwidth injection is in bandwidth_injection.cpp).

gni_return_t GNI_SetDeviceOrbMMR(gni_nic_handle_t, gni_dev_orb_mmr_t, uint64_t, uint64_t*) {
  return GNI_RC_ILLEGAL_OP;
}

// --- Completion channels, §11.2 (P2) -------------------------------------------------------
// Issue: "Completion channels" — eventfd-backed notification for blocking CQs.

gni_return_t GNI_CompChanCreate(gni_nic_handle_t, gni_comp_chan_handle_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CompChanDestroy(gni_comp_chan_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CompChanFd(gni_comp_chan_handle_t, int*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CompChanGetEvent(gni_comp_chan_handle_t, gni_cq_handle_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CqAttachCompChan(gni_cq_handle_t, gni_comp_chan_handle_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CqArmCompChan(gni_cq_handle_t*, uint32_t) { return GNI_RC_ILLEGAL_OP; }


// --- Dqueue (0x61), §17 (P2) ---------------------------------------------------------------
// Issue: "Dqueue" — after MSGQ, which it resembles.

gni_return_t GNI_DqueueInit(gni_nic_handle_t, gni_dqueue_in_attr_t*, gni_dqueue_out_attr_t*,
                            gni_dqueue_handle_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_DqueueFini(gni_dqueue_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_DqueueConnect(gni_dqueue_handle_t, gni_dqueue_out_attr_t*, uint32_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_DqueuePut(gni_dqueue_handle_t, void*, uint32_t, uint32_t, uint32_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_DqueueProgress(gni_dqueue_handle_t) { return GNI_RC_ILLEGAL_OP; }

}  // extern "C"
