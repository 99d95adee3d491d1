// Pins gni_pub.h to the uGNI fact sheet: struct layouts (§12.2, §14.1, §19.9), a sample of
// every constant table, the exported name tables and the CQ-entry accessor macros.
#include <doctest/doctest.h>

#include <gni_pub.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "ce_result.h"
#include "nicemu/abi/cq_entry.h"

namespace cqe = nicemu::abi::cqe;

TEST_CASE("gni_post_descriptor_t has the LP64 layout of fact sheet 12.2") {
  CHECK(sizeof(gni_post_descriptor_t) == 184);
  CHECK(offsetof(gni_post_descriptor_t, next_descr) == 0);
  CHECK(offsetof(gni_post_descriptor_t, prev_descr) == 8);
  CHECK(offsetof(gni_post_descriptor_t, post_id) == 16);
  CHECK(offsetof(gni_post_descriptor_t, status) == 24);
  CHECK(offsetof(gni_post_descriptor_t, cq_mode_complete) == 32);
  CHECK(offsetof(gni_post_descriptor_t, type) == 36);
  CHECK(offsetof(gni_post_descriptor_t, cq_mode) == 40);
  CHECK(offsetof(gni_post_descriptor_t, dlvr_mode) == 42);
  CHECK(offsetof(gni_post_descriptor_t, local_addr) == 48);
  CHECK(offsetof(gni_post_descriptor_t, local_mem_hndl) == 56);
  CHECK(offsetof(gni_post_descriptor_t, remote_addr) == 72);
  CHECK(offsetof(gni_post_descriptor_t, remote_mem_hndl) == 80);
  CHECK(offsetof(gni_post_descriptor_t, length) == 96);
  CHECK(offsetof(gni_post_descriptor_t, rdma_mode) == 104);
  CHECK(offsetof(gni_post_descriptor_t, src_cq_hndl) == 112);
  CHECK(offsetof(gni_post_descriptor_t, sync_flag_value) == 120);
  CHECK(offsetof(gni_post_descriptor_t, sync_flag_addr) == 128);
  CHECK(offsetof(gni_post_descriptor_t, amo_cmd) == 136);
  CHECK(offsetof(gni_post_descriptor_t, first_operand) == 144);
  CHECK(offsetof(gni_post_descriptor_t, second_operand) == 152);
  CHECK(offsetof(gni_post_descriptor_t, cqwrite_value) == 160);
  CHECK(offsetof(gni_post_descriptor_t, ce_cmd) == 168);
  CHECK(offsetof(gni_post_descriptor_t, ce_mode) == 172);
  CHECK(offsetof(gni_post_descriptor_t, ce_red_id) == 176);
  CHECK(sizeof(gni_post_type_t) == 4);
  CHECK(sizeof(gni_fma_cmd_type_t) == 4);
}

TEST_CASE("gni_smsg_attr_t and gni_mem_handle_t layouts") {
  CHECK(sizeof(gni_smsg_attr_t) == 56);
  CHECK(offsetof(gni_smsg_attr_t, msg_type) == 0);
  CHECK(offsetof(gni_smsg_attr_t, msg_buffer) == 8);
  CHECK(offsetof(gni_smsg_attr_t, buff_size) == 16);
  CHECK(offsetof(gni_smsg_attr_t, mem_hndl) == 24);
  CHECK(offsetof(gni_smsg_attr_t, mbox_offset) == 40);
  CHECK(offsetof(gni_smsg_attr_t, mbox_maxcredit) == 44);
  CHECK(offsetof(gni_smsg_attr_t, msg_maxsize) == 48);

  CHECK(sizeof(gni_mem_handle_t) == 16);
  CHECK(offsetof(gni_mem_handle_t, qword1) == 0);
  CHECK(offsetof(gni_mem_handle_t, qword2) == 8);

  CHECK(sizeof(gni_cq_entry_t) == 8);
  CHECK(sizeof(gni_cdm_handle_t) == sizeof(void*));
  CHECK(sizeof(gni_version_info_t) == 4 + 4 + 80 + 4 + 4 + 80);
}

TEST_CASE("chained-element layouts follow fact sheet 12.5 field order (LP64)") {
  CHECK(offsetof(gni_ct_put_post_descriptor_t, next_descr) == 0);
  CHECK(offsetof(gni_ct_put_post_descriptor_t, ep_hndl) == 8);
  CHECK(offsetof(gni_ct_put_post_descriptor_t, length) == 16);
  CHECK(offsetof(gni_ct_put_post_descriptor_t, remote_addr) == 24);
  CHECK(offsetof(gni_ct_put_post_descriptor_t, remote_mem_hndl) == 32);
  CHECK(offsetof(gni_ct_put_post_descriptor_t, local_addr) == 48);
  CHECK(sizeof(gni_ct_put_post_descriptor_t) == 56);
  CHECK(offsetof(gni_ct_get_post_descriptor_t, local_addr) == 48);
  CHECK(offsetof(gni_ct_get_post_descriptor_t, local_mem_hndl) == 56);
  CHECK(sizeof(gni_ct_get_post_descriptor_t) == 72);
  CHECK(offsetof(gni_ct_amo_post_descriptor_t, local_mem_hndl) == 56);
  CHECK(offsetof(gni_ct_amo_post_descriptor_t, amo_cmd) == 72);
  CHECK(offsetof(gni_ct_amo_post_descriptor_t, first_operand) == 80);
  CHECK(offsetof(gni_ct_amo_post_descriptor_t, second_operand) == 88);
  CHECK(sizeof(gni_ct_amo_post_descriptor_t) == 96);
  CHECK(offsetof(gni_ct_cqw_post_descriptor_t, ep_hndl) == 8);
  CHECK(offsetof(gni_ct_cqw_post_descriptor_t, remote_mem_hndl) == 16);
  CHECK(offsetof(gni_ct_cqw_post_descriptor_t, cqwrite_value) == 32);
  CHECK(sizeof(gni_ct_cqw_post_descriptor_t) == 40);
  gni_ct_uni_post_descriptor_t u{};
  CHECK(static_cast<void*>(&u.u.put) == static_cast<void*>(&u.u.amo));
  CHECK(sizeof(u) == sizeof(gni_ct_amo_post_descriptor_t));
}

TEST_CASE("gni_bi_desc_t: eight uint16_t in the order of fact sheet 7.1") {
  CHECK(sizeof(gni_bi_desc_t) == 16);
  CHECK(offsetof(gni_bi_desc_t, current_bw) == 0);
  CHECK(offsetof(gni_bi_desc_t, current_aot_bw) == 2);
  CHECK(offsetof(gni_bi_desc_t, current_norbs) == 4);
  CHECK(offsetof(gni_bi_desc_t, flags) == 6);
  CHECK(offsetof(gni_bi_desc_t, sys_def_bw) == 8);
  CHECK(offsetof(gni_bi_desc_t, sys_def_aot_bw) == 10);
  CHECK(offsetof(gni_bi_desc_t, cle_seqnum) == 12);
  CHECK(offsetof(gni_bi_desc_t, hss_seqnum) == 14);
  CHECK(GNI_BI_FLAG_APPLY_NOW == 0x1);
  CHECK(GNI_BI_FLAG_VALUE_IS_NUM_ORB_ENTRIES == 0x8);
  CHECK(GNI_BI_INJECT_BW_ORB_MAX == 992);
}

TEST_CASE("gni_ce_res accessors read the fields of a result's control word") {
  namespace ce = nicemu::ugni::ce;
  gni_ce_result_t r{};
  CHECK(gni_ce_res_status_ok(&r) == 1);
  CHECK(gni_ce_res_get_status(&r) == 0);
  r.control = ce::make_control(0, GNI_CE_FPE_OFLOW | GNI_CE_FPE_PRECISION, 0xDEADBEEF);
  CHECK(gni_ce_res_status_ok(&r) == 1);
  CHECK(GNI_CE_RES_GET_FPE(&r) == (GNI_CE_FPE_OFLOW | GNI_CE_FPE_PRECISION));
  CHECK(GNI_CE_RES_GET_RED_ID(&r) == 0xDEADBEEF);
  r.control = ce::make_control(3, 0, 7);
  CHECK(GNI_CE_RES_GET_STATUS(&r) == 3);
  CHECK(GNI_CE_RES_STATUS_OK(&r) == 0);
  CHECK(gni_ce_res_get_red_id(&r) == 7);
  CHECK(gni_ce_res_get_fpe(&r) == 0);
  CHECK(gni_ce_res_status_ok(nullptr) == 0);
  CHECK(gni_ce_res_get_status(nullptr) == 0);
  CHECK(gni_ce_res_get_fpe(nullptr) == 0);
  CHECK(gni_ce_res_get_red_id(nullptr) == 0);
  // The result words are the caller's: the accessors only read.
  r.result1 = 1;
  r.result2 = 2;
  (void)gni_ce_res_get_status(&r);
  CHECK((r.result1 == 1 && r.result2 == 2 && r.control == ce::make_control(3, 0, 7)));
}

TEST_CASE("return codes and versions") {
  CHECK(GNI_RC_SUCCESS == 0);
  CHECK(GNI_RC_NOT_DONE == 1);
  CHECK(GNI_RC_INVALID_PARAM == 2);
  CHECK(GNI_RC_ERROR_RESOURCE == 3);
  CHECK(GNI_RC_TIMEOUT == 4);
  CHECK(GNI_RC_PERMISSION_ERROR == 5);
  CHECK(GNI_RC_DESCRIPTOR_ERROR == 6);
  CHECK(GNI_RC_ALIGNMENT_ERROR == 7);
  CHECK(GNI_RC_INVALID_STATE == 8);
  CHECK(GNI_RC_NO_MATCH == 9);
  CHECK(GNI_RC_SIZE_ERROR == 10);
  CHECK(GNI_RC_TRANSACTION_ERROR == 11);
  CHECK(GNI_RC_ILLEGAL_OP == 12);
  CHECK(GNI_RC_ERROR_NOMEM == 13);

  CHECK(GNI_VERSION == 0x00610104);
  CHECK(GNI_GET_MAJOR(GNI_VERSION) == 0);
  CHECK(GNI_GET_MINOR(GNI_VERSION) == 0x61);
  CHECK(GNI_GET_REV(GNI_VERSION) == 0x0104);
  CHECK(GNI_VERSION_CHECK(0, 0x61, 0x104) == GNI_VERSION);
  CHECK(GNI_VERSION >= GNI_VERSION_CE_FPADD_RELEASE);
  CHECK(GNI_VERSION_FMA_CHAIN_TRANSACTIONS == 0x5d0000);
}

TEST_CASE("protection, CDM modes and devices") {
  CHECK(GNI_PTAG_USER_START == 3);
  CHECK(GNI_PTAG_LB == 255);
  CHECK(GNI_FIND_ALLOC_PTAG == 255);
  CHECK(GNI_PKEY_USER_END == 65407);
  CHECK(GNI_JOB_CREATE_COOKIE(0xFA7B, 0) == 0xFA7B0000u);
  CHECK(GNI_JOB_CREATE_COOKIE(1, 7) == ((1u << 16) | (7u << 3)));

  CHECK(GNI_CDM_MODE_FORK_FULLCOPY == 0x2);
  CHECK(GNI_CDM_MODE_ERR_NO_KILL == 0x8);
  CHECK(GNI_CDM_MODE_FAST_DATAGRAM_POLL == 0x20);
  CHECK(GNI_CDM_MODE_DUAL_EVENTS == 0x1000);
  CHECK(GNI_CDM_MODE_FMA_SHARED == 0x20000);
  CHECK(GNI_CDM_MODE_CACHED_AMO_ENABLED == 0x40000);
  CHECK(GNI_CDM_MODE_FMA_SMALL_WINDOW == 0x200000);
  CHECK(GNI_CDM_MODE_MASK == 0x0FFFFFFF);
  CHECK(GNI_CDM_MODE_PRIV_MASK == 0xF0000000u);

  CHECK(GNI_DEVICE_GEMINI == 0);
  CHECK(GNI_DEVICE_ARIES == 1);
  CHECK(GNI_DEV_RES_LAST == 10);
  CHECK(GNI_JOB_RES_MDD == 1);
  CHECK(GNI_JOB_RES_RDMA == 7);
  CHECK(GNI_JOB_RES_LAST == 14);
  CHECK(GNI_NUM_STATS == 21);
  CHECK(GNI_STAT_MR_MULTI_PAGESIZE == 20);
  CHECK(GNI_BI_INJECT_BW_ORB_MAX == 992);
}

TEST_CASE("datagram, memory and CQ constants") {
  CHECK(GNI_DATAGRAM_MAXSIZE == 128);
  CHECK(GNI_POST_PENDING == 0);
  CHECK(GNI_POST_COMPLETED == 1);
  CHECK(GNI_POST_TERMINATED == 4);
  CHECK(GNI_POST_REMOTE_DATA == 5);

  CHECK(GNI_MEM_READWRITE == 0);
  CHECK(GNI_MEM_READ_ONLY == 1);
  CHECK(GNI_MEM_USE_VMDH == 2);
  CHECK(GNI_MEM_RELAXED_PI_ORDERING == 0x100);
  CHECK(GNI_MEM_MDD_DEDICATED == 0x1000);
  CHECK(GNI_MEM_PRIV_MASK == 0x00F00000);
  CHECK(GNI_MEM_IS_EXTERNAL(GNI_MEM_CUDA) != 0);
  CHECK(GNI_MEM_IS_EXTERNAL(GNI_MEM_READ_ONLY) == 0);
  CHECK(GNI_MEMHNDL_ATTR_CLONE == 7);

  CHECK(GNI_CQ_NOBLOCK == 0);
  CHECK(GNI_CQ_BLOCKING == 1);
  CHECK(GNI_CQ_EMULATED_INVALID == 3);
  CHECK(GNI_CQ_NOAUTOFILL == 0x10);
  CHECK(GNI_CQ_IS_BLOCKING(GNI_CQ_BLOCKING));
  CHECK(GNI_CQ_IS_NON_BLOCKING(GNI_CQ_NOBLOCK));
  CHECK(GNI_CQ_IS_INVALID_EMULATED(GNI_CQ_EMULATED | GNI_CQ_BLOCKING));
  CHECK_FALSE(GNI_CQ_IS_INVALID_EMULATED(GNI_CQ_EMULATED));
  CHECK(GNI_CQ_EVENT_TYPE_SMSG == 1);
  CHECK(GNI_CQ_EVENT_TYPE_MSGQ == 3);
}

TEST_CASE("post types and mode bits") {
  CHECK(GNI_POST_RDMA_PUT == 1);
  CHECK(GNI_POST_FMA_PUT == 3);
  CHECK(GNI_POST_FMA_PUT_W_SYNCFLAG == 4);
  CHECK(GNI_POST_FMA_GET == 5);
  CHECK(GNI_POST_AMO == 6);
  CHECK(GNI_POST_CQWRITE == 7);
  CHECK(GNI_POST_AMO_W_FLAG == 10);
  CHECK(GNI_FMA_FLAGGED_RESPONSE_SIZE == 4);

  CHECK(GNI_CQMODE_GLOBAL_EVENT == 2);
  CHECK(GNI_CQMODE_REMOTE_EVENT == 4);
  CHECK(GNI_CQMODE_DUAL_EVENTS == (GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_GLOBAL_EVENT));
  CHECK(GNI_DLVMODE_IN_ORDER == 3);
  CHECK(GNI_DLVMODE_MNON_HASH == GNI_DLVMODE_IN_ORDER);
  CHECK(GNI_DLVMODE_ADAPTIVE0 == GNI_DLVMODE_PERFORMANCE);
  CHECK(GNI_DLVMODE_ORDERED_TAIL == 0x100);
  CHECK(GNI_RDMAMODE_FENCE == 2);
  CHECK(GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT == 2);
  CHECK(GNI_SMSG_ANY_TAG == 0xFF);
  CHECK(GNI_SMSG_MAX_SIZE == 65535);
  CHECK(FMA_SMSG_MAX_RETRANS_DEFAULT == 10);
  CHECK(GNI_MSGQ_NODE_INSTS_MAX == 128);
  CHECK(GNI_CE_MODE_RC_ADAPT == 0x400);
  CHECK(GNI_FMA_CE_FPMAX_GIDX == 0x3b);
  CHECK(GNI_CEMODE_FPE_PRECISION == 0x10);
  CHECK(GNI_ERRMASK_UNKNOWN_TRANSACTION == 0x80);
  CHECK(GNI_DQUEUE_DEFAULT_MSG_SIZE == 192);
}

TEST_CASE("AMO opcodes of gen-1 and gen-2 tables") {
  // gen-1 fetching / non-fetching, plain and cached
  CHECK(GNI_FMA_ATOMIC_FADD == 0x008);
  CHECK(GNI_FMA_ATOMIC_FAND == 0x009);
  CHECK(GNI_FMA_ATOMIC_FOR == 0x00A);
  CHECK(GNI_FMA_ATOMIC_FXOR == 0x00B);
  CHECK(GNI_FMA_ATOMIC_CSWAP == 0x00D);
  CHECK(GNI_FMA_ATOMIC_CSWAP_C == 0x01D);
  CHECK(GNI_FMA_ATOMIC_ADD == 0x108);
  CHECK(GNI_FMA_ATOMIC_AND == 0x109);
  CHECK(GNI_FMA_ATOMIC_OR == 0x10A);
  CHECK(GNI_FMA_ATOMIC_XOR == 0x10B);
  CHECK(GNI_FMA_ATOMIC_AX_C == 0x11C);
  // gen-2 fetching
  CHECK(GNI_FMA_ATOMIC2_FAND == 0x041);
  CHECK(GNI_FMA_ATOMIC2_FAND_S == 0x240);
  CHECK(GNI_FMA_ATOMIC2_FSWAP == 0x047);
  CHECK(GNI_FMA_ATOMIC2_FCSWAP_S == 0x24A);
  CHECK(GNI_FMA_ATOMIC2_FIADD_S == 0x254);
  CHECK(GNI_FMA_ATOMIC2_FIMIN_SC == 0x270);
  CHECK(GNI_FMA_ATOMIC2_FFPADD == 0x05D);
  CHECK(GNI_FMA_ATOMIC2_FFPMAX_C == 0x07B);
  // gen-2 non-fetching
  CHECK(GNI_FMA_ATOMIC2_AND_S == 0x340);
  CHECK(GNI_FMA_ATOMIC2_SWAP == 0x147);
  CHECK(GNI_FMA_ATOMIC2_CSWAP_S == 0x34A);
  CHECK(GNI_FMA_ATOMIC2_IMIN == 0x151);
  CHECK(GNI_FMA_ATOMIC2_IMAX_S == 0x352);
  CHECK(GNI_FMA_ATOMIC2_IADD_SC == 0x374);
  CHECK(GNI_FMA_ATOMIC2_FPADD_S == 0x35C);
  CHECK(GNI_FMA_ATOMIC2_FPMIN_C == 0x179);
  CHECK(GNI_FMA_ATOMIC2_FPMAX == 0x15B);

  // Encoding rules of §13: 0x100 = non-fetching, 0x200 = 32-bit, 0x40 = gen-2.
  CHECK((GNI_FMA_ATOMIC2_AND_S & ~0x100) == GNI_FMA_ATOMIC2_FAND_S);
  CHECK((GNI_FMA_ATOMIC_ADD & ~0x100) == GNI_FMA_ATOMIC_FADD);
  CHECK((GNI_FMA_ATOMIC2_XOR_S & 0x240) == 0x240);
}

TEST_CASE("gni_err_str names every return code") {
  const char* const expected[] = {
      "GNI_RC_SUCCESS",          "GNI_RC_NOT_DONE",        "GNI_RC_INVALID_PARAM",
      "GNI_RC_ERROR_RESOURCE",   "GNI_RC_TIMEOUT",         "GNI_RC_PERMISSION_ERROR",
      "GNI_RC_DESCRIPTOR_ERROR", "GNI_RC_ALIGNMENT_ERROR", "GNI_RC_INVALID_STATE",
      "GNI_RC_NO_MATCH",         "GNI_RC_SIZE_ERROR",      "GNI_RC_TRANSACTION_ERROR",
      "GNI_RC_ILLEGAL_OP",       "GNI_RC_ERROR_NOMEM",
  };
  for (int rc = GNI_RC_SUCCESS; rc <= GNI_RC_ERROR_NOMEM; ++rc) {
    CAPTURE(rc);
    REQUIRE(gni_err_str[rc] != nullptr);
    CHECK(std::string(gni_err_str[rc]) == expected[rc]);
  }
  CHECK(std::string(gni_err_str[GNI_RC_TRANSACTION_ERROR]) == "GNI_RC_TRANSACTION_ERROR");
}

TEST_CASE("gni_statistic_str: unique identifier-like names") {
  std::set<std::string> seen;
  for (int i = 0; i < GNI_NUM_STATS; ++i) {
    CAPTURE(i);
    REQUIRE(gni_statistic_str[i] != nullptr);
    const std::string s = gni_statistic_str[i];
    CHECK_FALSE(s.empty());
    CHECK(s.rfind("GNI_STAT_", 0) == std::string::npos);
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      CHECK((std::isupper(c) || std::isdigit(c) || c == '_'));
    }
    CHECK(seen.insert(s).second);
  }
  CHECK(std::string(gni_statistic_str[GNI_STAT_SMSG_BUFF_CREDITS_STALL]) ==
        "SMSG_BUFF_CREDITS_STALL");
  CHECK(std::string(gni_statistic_str[GNI_STAT_MR_MULTI_PAGESIZE]) == "MR_MULTI_PAGESIZE");
}

TEST_CASE("CQ accessor macros round-trip through the project encoding") {
  gni_cq_entry_t e = cqe::make(cqe::kSrcLocalRequest, cqe::kTypePost, cqe::kOk, 0, 0, 0);

  GNI_CQ_SET_INST_ID(e, 0xFEDCBA98u);  // all 32 bits survive, even on ARIES
  CHECK(GNI_CQ_GET_INST_ID(e) == 0xFEDCBA98u);
  CHECK(GNI_CQ_GET_REM_INST_ID(e) == 0xFEDCBA98u);

  GNI_CQ_SET_MSG_ID(e, 0xFFFFFFFFu);
  CHECK(GNI_CQ_GET_MSG_ID(e) == 0xFFFFFFFFu);
  GNI_CQ_SET_REM_INST_ID(e, 7);
  CHECK(GNI_CQ_GET_REM_INST_ID(e) == 7);

  GNI_CQ_SET_TID(e, 0xBEEF);
  CHECK(GNI_CQ_GET_TID(e) == 0xBEEF);
  CHECK(GNI_CQ_GET_INST_ID(e) == 7);  // the id field is untouched by SET_TID
  GNI_CQ_SET_TID(e, 0x12345);         // wider values are masked to 16 bits
  CHECK(GNI_CQ_GET_TID(e) == 0x2345);

  GNI_CQ_SET_TYPE(e, GNI_CQ_EVENT_TYPE_SMSG);
  CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_SMSG);
  GNI_CQ_SET_TYPE(e, GNI_CQ_EVENT_TYPE_MSGQ);
  CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_MSGQ);
  CHECK(GNI_CQ_GET_SOURCE(e) == cqe::kSrcLocalRequest);
  CHECK(GNI_CQ_GET_DATA(e) == ((uint64_t{0x2345} << 32) | 7));

  gni_cq_entry_t err = cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kErrBounds, 0, 1, 2);
  CHECK_FALSE(GNI_CQ_STATUS_OK(err));
  CHECK(GNI_CQ_GET_STATUS(err) == cqe::kErrBounds);
  GNI_CQ_CLR_STATUS(err);
  CHECK(GNI_CQ_STATUS_OK(err));
  CHECK(err == cqe::make(cqe::kSrcRemoteRequest, cqe::kTypePost, cqe::kOk, 0, 1, 2));

  CHECK(GNI_CQ_OVERRUN(cqe::overrun_entry()) != 0);
  CHECK(GNI_CQ_OVERRUN(e) == 0);
  CHECK(GNI_CQ_STATUS_DLA_OVERFLOW(e) == 0);
  CHECK(GNI_CQ_BTE_ENQ_STATUS(e) == 0);

  // A remote CQ write carries 48 bits of data (Charm++ recovers a pointer this way).
  const gni_cq_entry_t w = cqe::make_cqwrite(0x7FFF12345678ull);
  CHECK((GNI_CQ_GET_DATA(w) & 0xFFFFFFFFFFFFull) == 0x7FFF12345678ull);
  CHECK(GNI_CQ_GET_REM_INST_ID(w) == 0x12345678u);

  // GET macros are bare function designators (§11.3).
  uint64_t (*get_data)(gni_cq_entry_t) = GNI_CQ_GET_DATA;
  CHECK(get_data(w) == GNI_CQ_GET_DATA(w));
}

TEST_CASE("GNI_CqErrorStr and GNI_CqErrorRecoverable decode the status field") {
  char buf[256];
  const gni_cq_entry_t bounds = cqe::make(cqe::kSrcLocalRequest, 0, cqe::kErrBounds, 0, 0, 0);
  CHECK(GNI_CqErrorStr(bounds, buf, sizeof buf) == GNI_RC_SUCCESS);
  CHECK(std::strstr(buf, "BOUNDS") != nullptr);
  CHECK(GNI_CqErrorStr(bounds, nullptr, 16) == GNI_RC_INVALID_PARAM);
  CHECK(GNI_CqErrorStr(bounds, buf, 4) == GNI_RC_SIZE_ERROR);
  CHECK(std::strlen(buf) == 3);

  uint32_t rec = 42;
  CHECK(GNI_CqErrorRecoverable(bounds, &rec) == GNI_RC_SUCCESS);
  CHECK(rec == 0);
  const gni_cq_entry_t transient =
      cqe::make(cqe::kSrcLocalRequest, 0, cqe::kErrTransient, 0, 0, 0);
  CHECK(GNI_CqErrorRecoverable(transient, &rec) == GNI_RC_SUCCESS);
  CHECK(rec == 1);
  CHECK(GNI_CqErrorRecoverable(transient, nullptr) == GNI_RC_INVALID_PARAM);
  CHECK(GNI_CqErrorRecoverable(cqe::make(cqe::kSrcLocalRequest, 0, cqe::kOk, 0, 0, 0), &rec) ==
        GNI_RC_INVALID_STATE);
}

TEST_CASE("resource helpers") {
  CHECK(gni_dev_res_valid(GNI_DEV_RES_MDD));
  CHECK_FALSE(gni_dev_res_valid(GNI_DEV_RES_FIRST));
  CHECK_FALSE(gni_dev_res_valid(GNI_DEV_RES_LAST));
  CHECK(std::string(gni_dev_res_to_str(GNI_DEV_RES_CQ)) == "GNI_DEV_RES_CQ");
  CHECK(gni_job_res_valid(GNI_JOB_RES_NONVMDH));
  CHECK_FALSE(gni_job_res_valid(GNI_JOB_RES_LAST));
  CHECK(std::string(gni_job_res_to_str(GNI_JOB_RES_MDD)) == "GNI_JOB_RES_MDD");
  CHECK(gni_job_res_to_str(static_cast<gni_job_res_t>(99)) != nullptr);
  CHECK(gni_dev_orb_mmr_valid(GNI_DEV_ORB_MMR_MAX_PID_CNT));
  CHECK(std::string(gni_dev_orb_mmr_to_str(GNI_DEV_ORB_MMR_MAX_PID_CNT)) ==
        "GNI_DEV_ORB_MMR_MAX_PID_CNT");
}
