// CQE encoding as the daemon and libugni produce it, read back through the exported
// gni_cq_* accessors clients use.
#include <doctest/doctest.h>

#include <string>

#include "gni_pub.h"
#include "nicemu/abi/cq_entry.h"

using namespace nicemu::abi;

TEST_CASE("a local POST event carries inst_id, tid and status") {
  uint64_t e = cqe::make(cqe::kSrcLocalRequest, cqe::kTypePost, cqe::kErrBounds, cqe::kInfoLocal, 0x1234, 0xDEADBEEF);
  CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST);
  CHECK(GNI_CQ_GET_INST_ID(e) == 0xDEADBEEF);  // all 32 bits, even on Aries
  CHECK(GNI_CQ_GET_TID(e) == 0x1234);
  CHECK(GNI_CQ_GET_STATUS(e) == cqe::kErrBounds);
  CHECK_FALSE(GNI_CQ_STATUS_OK(e));
  uint32_t rec = 7;
  CHECK(GNI_CqErrorRecoverable(e, &rec) == GNI_RC_SUCCESS);
  CHECK(rec == 0);
  char buf[128];
  CHECK(GNI_CqErrorStr(e, buf, sizeof(buf)) == GNI_RC_SUCCESS);
  CHECK(std::string(buf).find("BOUNDS") != std::string::npos);
}

TEST_CASE("SMSG events: msg_id keeps 32 bits, remote events carry the sender's id") {
  uint64_t local = cqe::make(cqe::kSrcLocalResponse, cqe::kTypeSmsg, 0, cqe::kInfoGlobal, 0, 0xFFFFFFFF);
  CHECK(GNI_CQ_GET_TYPE(local) == GNI_CQ_EVENT_TYPE_SMSG);
  CHECK(GNI_CQ_GET_MSG_ID(local) == 0xFFFFFFFFu);
  CHECK(GNI_CQ_STATUS_OK(local));
  uint64_t remote = cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, 0, 0, 0, 77);
  CHECK(GNI_CQ_GET_REM_INST_ID(remote) == 77);
  CHECK(GNI_CQ_GET_INST_ID(remote) == 77);
  CHECK(GNI_CQ_GET_SOURCE(remote) != 0);
}

TEST_CASE("CQ write carries 48 bits of data; overrun entries are flagged") {
  uint64_t e = cqe::make_cqwrite(0xFFFF123456789ABCull);
  CHECK(GNI_CQ_GET_DATA(e) == 0x123456789ABCull);
  CHECK(GNI_CQ_GET_REM_INST_ID(e) == 0x56789ABCull);
  CHECK(GNI_CQ_OVERRUN(cqe::overrun_entry()));
  CHECK_FALSE(GNI_CQ_OVERRUN(e));
  uint32_t rec = 0;
  CHECK(GNI_CqErrorRecoverable(cqe::make(1, 0, cqe::kErrTransient, 0, 0, 0), &rec) == GNI_RC_SUCCESS);
  CHECK(rec == 1);
}
