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
// Issue: "Device resource and capability queries" — daemon-reported device-wide usage.

gni_return_t GNI_GetDevResInfo(uint32_t, gni_dev_res_t, gni_dev_res_desc_t*) {
  return GNI_RC_ILLEGAL_OP;
}
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

// --- Bandwidth injection, ORB and MDD resources, §7.2 (P1/P2) ----------------------------
// Issue: "NIC tuning knobs" — accept-and-ignore BI settings (Charm++), SetMddResources
// (libfabric) with VMDH registrations.

gni_return_t GNI_SetDeviceOrbMMR(gni_nic_handle_t, gni_dev_orb_mmr_t, uint64_t, uint64_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_SetBIConfig(uint32_t, uint16_t, uint16_t, uint16_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_GetBIConfig(uint32_t, gni_bi_desc_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_BISyncWait(uint32_t, uint32_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_SetMddResources(gni_nic_handle_t, uint32_t) { return GNI_RC_ILLEGAL_OP; }

// --- Datagrams, §9 (P0/P1) -----------------------------------------------------------------
// Issue: "Datagram exchange" — daemon-side matching of directed and wildcard posts.

gni_return_t GNI_EpPostData(gni_ep_handle_t, void*, uint16_t, void*, uint16_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_EpPostDataWId(gni_ep_handle_t, void*, uint16_t, void*, uint16_t, uint64_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_EpPostDataTest(gni_ep_handle_t, gni_post_state_t*, uint32_t*, uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_EpPostDataTestById(gni_ep_handle_t, uint64_t, gni_post_state_t*, uint32_t*,
                                    uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_EpPostDataWait(gni_ep_handle_t, uint32_t, gni_post_state_t*, uint32_t*,
                                uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_EpPostDataWaitById(gni_ep_handle_t, uint64_t, uint32_t, gni_post_state_t*,
                                    uint32_t*, uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_PostDataProbe(gni_nic_handle_t, uint32_t*, uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_PostDataProbeById(gni_nic_handle_t, uint64_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_PostdataProbeWaitById(gni_nic_handle_t, uint32_t, uint64_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_EpPostDataCancel(gni_ep_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_EpPostDataCancelById(gni_ep_handle_t, uint64_t) { return GNI_RC_ILLEGAL_OP; }

// --- Memory registration extras, §10.2 (P1/P2) -------------------------------------------
// Issue: "Segmented registrations and handle queries" — offset-addressed regions,
// attribute queries, VMDH rebuild, iteration over a NIC's registrations.

gni_return_t GNI_MemRegisterSegments(gni_nic_handle_t, gni_mem_segment_t*, uint32_t,
                                     gni_cq_handle_t, uint32_t, uint32_t, gni_mem_handle_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_MemHndlQueryAttr(gni_mem_handle_t*, gni_mem_handle_attr_t, int*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_RebuildMemHndl(gni_mem_handle_t*, uint32_t, gni_mem_handle_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_MemQueryHndls(gni_nic_handle_t, int, gni_mem_handle_t*, uint64_t*,
                               uint64_t*) {
  return GNI_RC_ILLEGAL_OP;
}

// --- Blocking CQ vectors and interrupt masks, §11.2 (P0/P1/P2) ---------------------------
// Issue: "Blocking CQ waits over several CQs" — futex waits across rings (Open MPI's
// progress thread needs GNI_CqVectorMonitor).

gni_return_t GNI_CqVectorWaitEvent(gni_cq_handle_t*, uint32_t, uint64_t, gni_cq_entry_t*,
                                   uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CqVectorMonitor(gni_cq_handle_t*, uint32_t, uint64_t, uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CqInterruptMask(gni_cq_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CqInterruptUnmask(gni_cq_handle_t) { return GNI_RC_ILLEGAL_OP; }

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

// --- RDMA (BTE), CQ writes and chained posts, §12.4 (P0/P1/P2) ---------------------------
// Issue: "BTE engine and CQ writes" — daemon-run RDMA PUT/GET, remote CQ writes, then
// chained FMA/CQ-write transactions.

gni_return_t GNI_PostRdma(gni_ep_handle_t, gni_post_descriptor_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_PostCqWrite(gni_ep_handle_t, gni_post_descriptor_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CtPostFma(gni_ep_handle_t, gni_post_descriptor_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CtPostCqWrite(gni_ep_handle_t, gni_post_descriptor_t*) {
  return GNI_RC_ILLEGAL_OP;
}

// --- SMSG delivery mode, §14.2 (P2) --------------------------------------------------------
// Issue: "Ordering and delivery modes" — per-NIC routing mode for SMSG traffic.

gni_return_t GNI_SmsgSetDeliveryMode(gni_nic_handle_t, uint16_t) { return GNI_RC_ILLEGAL_OP; }

// --- Message queues, §15 (P1/P2) -----------------------------------------------------------
// Issue: "MSGQ" — per-node shared receive queues.

gni_return_t GNI_MsgqInit(gni_nic_handle_t, gni_msgq_rcv_cb_func*, void*, gni_cq_handle_t,
                          gni_msgq_attr_t*, gni_msgq_handle_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_MsgqRelease(gni_msgq_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_MsgqIdle(gni_msgq_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_MsgqGetConnAttrs(gni_msgq_handle_t, uint32_t, gni_msgq_ep_attr_t*,
                                  uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_MsgqConnect(gni_msgq_handle_t, uint32_t, gni_msgq_ep_attr_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_MsgqConnRelease(gni_msgq_handle_t, uint32_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_MsgqSend(gni_msgq_handle_t, gni_ep_handle_t, void*, uint32_t, void*, uint32_t,
                          uint32_t, uint8_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_MsgqProgress(gni_msgq_handle_t, uint32_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_MsgqSize(gni_msgq_attr_t*, uint32_t*) { return GNI_RC_ILLEGAL_OP; }

// --- Collective engine, §16 (P1) -----------------------------------------------------------
// Issue: "Collective engine" — ILLEGAL_OP from GNI_CeCreate is the documented fallback
// signal (GASNet then uses its own collectives).

gni_return_t GNI_CeCreate(gni_nic_handle_t, gni_ce_handle_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CeGetId(gni_ce_handle_t, uint32_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_EpSetCeAttr(gni_ep_handle_t, uint32_t, uint32_t, gni_ce_child_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CeConfigure(gni_ce_handle_t, gni_ep_handle_t*, uint32_t, gni_ep_handle_t,
                             gni_cq_handle_t, uint32_t) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_CeCheckResult(gni_ce_result_t*, uint32_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_CeDestroy(gni_ce_handle_t) { return GNI_RC_ILLEGAL_OP; }

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

// --- Error-event subscription, §18.2 (P2) -------------------------------------------------
// Issue: "NIC error events" — surface daemon-detected errors (link down, injected faults)
// as gni_error_event_t. GNI_SetErrorPtag is privileged.

gni_return_t GNI_SubscribeErrors(gni_nic_handle_t, uint32_t, gni_error_mask_t, uint32_t,
                                 gni_err_handle_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_ReleaseErrors(gni_err_handle_t) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_GetErrorMask(gni_err_handle_t, gni_error_mask_t*) { return GNI_RC_ILLEGAL_OP; }
gni_return_t GNI_SetErrorMask(gni_err_handle_t, gni_error_mask_t, gni_error_mask_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_GetErrorEvent(gni_err_handle_t, gni_error_event_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_WaitErrorEvents(gni_err_handle_t, gni_error_event_t*, uint32_t, uint32_t,
                                 uint32_t*) {
  return GNI_RC_ILLEGAL_OP;
}
gni_return_t GNI_SetErrorPtag(gni_err_handle_t, uint8_t) { return GNI_RC_PERMISSION_ERROR; }

}  // extern "C"
