// Real CDM regions of this process for daemon-side unit tests (no sockets, no daemon): a
// region as the daemon makes it on attach, CQs in it, and draining a CQ as a client would.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/daemon/cdm/cdm_region.h"

namespace cdm_fixture {

inline constexpr uint64_t kRegion = nicemu::abi::kRoSize + (4u << 20);

inline std::unique_ptr<nicemu::daemon::CdmRegion> make_cdm(uint32_t node, uint32_t inst, uint64_t attach_id,
                                                           uint32_t ptag, uint32_t cookie) {
  nicemu::abi::ctl::Attach a{};
  a.inst_id = inst;
  a.ptag = ptag;
  a.cookie = cookie;
  // The memory domain: the attach id, as a daemon numbering its first CDMs would.
  // Each its own MDD table, as CDMs of different processes (or credentials) have.
  return std::make_unique<nicemu::daemon::CdmRegion>(node, nicemu::abi::gni::kDeviceAries, a, getpid(), attach_id,
                                                     kRegion, static_cast<uint32_t>(attach_id),
                                                     std::make_shared<nicemu::daemon::ProcessMdd>(getpid()));
}

// A registration of `r` in `slot`, as the daemon makes it (the owner's library writes the
// same entry); returns the status.
inline int reg_store(nicemu::daemon::CdmRegion& r, uint32_t slot, const nicemu::daemon::RegSpec& spec,
                     uint32_t dst_cq) {
  nicemu::abi::ctl::MemRegisterReply rep{};
  return r.mdd().store(slot, spec, dst_cq, r.mem_domain(), rep);
}

inline uint32_t make_cq(nicemu::daemon::CdmRegion& r) {
  nicemu::abi::ctl::CqCreate req{};
  req.entry_count = 256;
  nicemu::abi::ctl::CqCreateReply rep{};
  REQUIRE(r.cq_create(req, rep) == nicemu::abi::gni::kSuccess);
  return rep.cq_index;
}

inline std::vector<uint64_t> drain(nicemu::daemon::CdmRegion& r, uint32_t cq) {
  std::vector<uint64_t> out;
  nicemu::abi::CqRingView v = nicemu::abi::region_cq_view(reinterpret_cast<char*>(r.header()), kRegion, cq);
  REQUIRE(v.valid());
  for (uint64_t e; (e = v.pop()) != 0;) out.push_back(e);
  return out;
}

}  // namespace cdm_fixture
