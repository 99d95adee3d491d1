// The exported lower-case helpers of gni_pub.h (fact sheet §11.3, §16, §6.1, §7.1, §19.1):
// CQ-entry accessors, CE-result accessors, resource-enum helpers, and the gni_err_str /
// gni_statistic_str tables. Entries are decoded only through nicemu/abi/cq_entry.h, the
// one definition shared with the NIC engines that write them.
#include "gni_pub.h"

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "ce_result.h"
#include "nicemu/abi/cq_entry.h"

namespace cqe = nicemu::abi::cqe;
namespace ce = nicemu::ugni::ce;

namespace {

constexpr uint64_t replace_field(uint64_t entry, unsigned shift, uint64_t mask, uint64_t value) {
  return (entry & ~(mask << shift)) | ((value & mask) << shift);
}

template <typename E, std::size_t N>
const char* enum_name(const char* const (&names)[N], E value, const char* unknown) {
  const auto i = static_cast<std::size_t>(value);
  return i < N ? names[i] : unknown;
}

constexpr const char* kDevResNames[] = {
    "GNI_DEV_RES_FIRST", "GNI_DEV_RES_MDD", "GNI_DEV_RES_MRT", "GNI_DEV_RES_CQ",
    "GNI_DEV_RES_FMA",   "GNI_DEV_RES_CE",  "GNI_DEV_RES_DLA", "GNI_DEV_RES_TCR",
    "GNI_DEV_RES_DVA",   "GNI_DEV_RES_VMDH", "GNI_DEV_RES_LAST",
};
static_assert(std::size(kDevResNames) == GNI_DEV_RES_LAST + 1);

constexpr const char* kJobResNames[] = {
    "GNI_JOB_RES_FIRST",  "GNI_JOB_RES_MDD",    "GNI_JOB_RES_MRT",       "GNI_JOB_RES_IOMMU",
    "GNI_JOB_RES_GART",   "GNI_JOB_RES_CQ",     "GNI_JOB_RES_FMA",       "GNI_JOB_RES_RDMA",
    "GNI_JOB_RES_CE",     "GNI_JOB_RES_DLA",    "GNI_JOB_RES_SFMA",      "GNI_JOB_RES_DIRECT",
    "GNI_JOB_RES_PCI_IOMMU", "GNI_JOB_RES_NONVMDH", "GNI_JOB_RES_LAST",
};
static_assert(std::size(kJobResNames) == GNI_JOB_RES_LAST + 1);

constexpr const char* kOrbMmrNames[] = {
    "GNI_DEV_ORB_MMR_FIRST",
    "GNI_DEV_ORB_MMR_MAX_PID_CNT",
    "GNI_DEV_ORB_MMR_LAST",
};
static_assert(std::size(kOrbMmrNames) == GNI_DEV_ORB_MMR_LAST + 1);

}  // namespace

extern "C" {

// --- Return-code and statistic names (§3, §6.1) ----------------------------------------

const char* gni_err_str[] = {
    "GNI_RC_SUCCESS",          "GNI_RC_NOT_DONE",          "GNI_RC_INVALID_PARAM",
    "GNI_RC_ERROR_RESOURCE",   "GNI_RC_TIMEOUT",           "GNI_RC_PERMISSION_ERROR",
    "GNI_RC_DESCRIPTOR_ERROR", "GNI_RC_ALIGNMENT_ERROR",   "GNI_RC_INVALID_STATE",
    "GNI_RC_NO_MATCH",         "GNI_RC_SIZE_ERROR",        "GNI_RC_TRANSACTION_ERROR",
    "GNI_RC_ILLEGAL_OP",       "GNI_RC_ERROR_NOMEM",
};

// Open MPI lower-cases these into performance-variable names, so they stay unique and
// identifier-like; the exact Cray spelling is unconfirmed (§6.1, §20).
const char* gni_statistic_str[] = {
    "SMSG_BUFF_CREDITS_STALL",
    "SMSG_DLA_STALL",
    "SMSG_MBOX_CREDITS_STALL",
    "SMSG_REQ_STALL",
    "SMSG_RETRANS_COUNT",
    "SMSG_RETRANS_DLA_COUNT",
    "SMSG_RETRANS_STALL",
    "DLA_ALLOC_STATUS_STALL",
    "DLA_ALLOC_STATUS_TIMEOUT",
    "DLA_BLOCK_ORPHANED",
    "DLA_BLOCK_RETRANS_COUNT",
    "DLA_FREE_BLOCKS_STALL",
    "DLA_FREE_FMAD_BLOCKS_STALL",
    "DLA_HIGH_RETRANS_COUNT",
    "DLA_OVERFLOW_RESEND",
    "DLA_RETRANS_COUNT",
    "DLA_TOTAL_RETRANS_COUNT",
    "FLBTE_TXD_CORRUPT",
    "FLBTE_TXD_NONE",
    "FMA_LAUNCH_COUNT",
    "MR_MULTI_PAGESIZE",
};

// --- CQ-entry accessors (§11.3, §11.4) ---------------------------------------------------

uint64_t gni_cq_get_data(gni_cq_entry_t entry) { return entry & cqe::kDataMask; }
uint64_t gni_cq_get_source(gni_cq_entry_t entry) { return cqe::source_of(entry); }
uint64_t gni_cq_get_status(gni_cq_entry_t entry) { return cqe::status_of(entry); }
uint64_t gni_cq_get_info(gni_cq_entry_t entry) { return cqe::info_of(entry); }
uint64_t gni_cq_overrun(gni_cq_entry_t entry) { return (entry >> cqe::kOverrunShift) & 1; }

// One overrun bit covers local and remote-event CQs alike; there is no separate flag.
uint64_t gni_cq_rem_overrun(gni_cq_entry_t) { return 0; }

// All 32 bits even when the device reports ARIES (real Aries keeps 24): clients that want
// 24 bits (UCX on ARIES) mask their own ids, and GASNet / Open MPI / Charm++ use 32.
uint64_t gni_cq_get_inst_id(gni_cq_entry_t entry) { return cqe::id_of(entry); }
uint64_t gni_cq_get_rem_inst_id(gni_cq_entry_t entry) { return cqe::id_of(entry); }
uint64_t gni_cq_get_msg_id(gni_cq_entry_t entry) { return cqe::id_of(entry); }
uint64_t gni_cq_get_tid(gni_cq_entry_t entry) { return cqe::tid_of(entry); }
uint64_t gni_cq_get_type(gni_cq_entry_t entry) { return cqe::type_of(entry); }

// DLA and transaction-type fields have no place in the project encoding; a CE channel
// event carries its channel and reduction id (cq_entry.h, kInfoCe).
uint64_t gni_cq_get_block_id(gni_cq_entry_t) { return 0; }
uint64_t gni_cq_get_unsuccessful_cnt(gni_cq_entry_t) { return 0; }
uint64_t gni_cq_get_marker_id(gni_cq_entry_t) { return 0; }
uint64_t gni_cq_get_failed_enqueue_cnt(gni_cq_entry_t) { return 0; }
uint64_t gni_cq_get_ce_id(gni_cq_entry_t entry) {
  return cqe::info_of(entry) & cqe::kInfoCe ? cqe::id_of(entry) : 0;
}
uint64_t gni_cq_get_reductn_id(gni_cq_entry_t entry) {
  return cqe::info_of(entry) & cqe::kInfoCe ? cqe::tid_of(entry) : 0;
}
uint64_t gni_cq_get_trans_type(gni_cq_entry_t) { return 0; }

void gni_cq_set_inst_id(gni_cq_entry_t* entry, uint64_t value) {
  if (entry) *entry = replace_field(*entry, 0, cqe::kIdMask, value);
}
void gni_cq_set_rem_inst_id(gni_cq_entry_t* entry, uint64_t value) {
  if (entry) *entry = replace_field(*entry, 0, cqe::kIdMask, value);
}
void gni_cq_set_msg_id(gni_cq_entry_t* entry, uint64_t value) {
  if (entry) *entry = replace_field(*entry, 0, cqe::kIdMask, value);
}
void gni_cq_set_tid(gni_cq_entry_t* entry, uint64_t value) {
  if (entry) *entry = replace_field(*entry, cqe::kTidShift, cqe::kTidMask, value);
}
void gni_cq_set_type(gni_cq_entry_t* entry, uint64_t value) {
  if (entry) *entry = replace_field(*entry, cqe::kTypeShift, cqe::kTypeMask, value);
}
void gni_cq_clr_status(gni_cq_entry_t* entry) {
  if (entry) *entry = replace_field(*entry, cqe::kStatusShift, cqe::kStatusMask, cqe::kOk);
}

unsigned gni_cq_status_dla_overflow(gni_cq_entry_t) { return 0; }
unsigned gni_cq_bte_enq_status(gni_cq_entry_t) { return 0; }

// --- CE-result accessors (§16) -----------------------------------------------------------
// Fields of the result's control word in the layout of ce_result.h. A NULL result reads as
// 0 everywhere and is never OK.

uint64_t gni_ce_res_get_status(gni_ce_result_t* result) { return result ? ce::status(result->control) : 0; }
uint64_t gni_ce_res_status_ok(gni_ce_result_t* result) {
  return result != nullptr && ce::status(result->control) == 0;
}
uint64_t gni_ce_res_get_fpe(gni_ce_result_t* result) { return result ? ce::fpe(result->control) : 0; }
uint64_t gni_ce_res_get_red_id(gni_ce_result_t* result) { return result ? ce::red_id(result->control) : 0; }

// --- Resource-enum helpers (§6.1, §7.1) --------------------------------------------------

uint32_t gni_dev_res_valid(gni_dev_res_t res) {
  return res > GNI_DEV_RES_FIRST && res < GNI_DEV_RES_LAST;
}
const char* gni_dev_res_to_str(gni_dev_res_t res) {
  return enum_name(kDevResNames, res, "invalid gni_dev_res_t");
}
uint32_t gni_job_res_valid(gni_job_res_t res) {
  return res > GNI_JOB_RES_FIRST && res < GNI_JOB_RES_LAST;
}
const char* gni_job_res_to_str(gni_job_res_t res) {
  return enum_name(kJobResNames, res, "invalid gni_job_res_t");
}
uint32_t gni_dev_orb_mmr_valid(gni_dev_orb_mmr_t mmr) {
  return mmr > GNI_DEV_ORB_MMR_FIRST && mmr < GNI_DEV_ORB_MMR_LAST;
}
const char* gni_dev_orb_mmr_to_str(gni_dev_orb_mmr_t mmr) {
  return enum_name(kOrbMmrNames, mmr, "invalid gni_dev_orb_mmr_t");
}

}  // extern "C"

static_assert(std::size(gni_err_str) == GNI_RC_ERROR_NOMEM + 1);
static_assert(std::size(gni_statistic_str) == GNI_NUM_STATS);
