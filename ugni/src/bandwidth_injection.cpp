// Bandwidth injection (fact sheet §7.2): the settings belong to the NIC, so they are kept
// by the node's daemon (nicemu/daemon/cdm/bandwidth_injection.h) and every process of the node
// reads what the last one set. Charm++ reads `current_bw` and sets a percentage with
// GNI_BI_FLAG_APPLY_NOW on device 0 at start-up. nicemu records and reports the settings
// but does not throttle injection.
#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;

namespace {

constexpr uint16_t kKnownModes = GNI_BI_FLAG_APPLY_NOW | GNI_BI_FLAG_APPLY_AFTER_THROTTLE |
                                 GNI_BI_FLAG_USE_DEFAULT_SETTINGS | GNI_BI_FLAG_VALUE_IS_NUM_ORB_ENTRIES;

// A request to the daemon of this process's node (device 0). False if there is none.
template <typename Req, typename Rep>
bool call_device(Req& req, Rep& rep) {
  std::string path = daemon_socket();
  nicemu::ctl::Connection c;
  return !path.empty() && c.connect(path) && c.call(req, rep);
}

}  // namespace

extern "C" {

gni_return_t GNI_SetBIConfig(uint32_t device_id, uint16_t bw, uint16_t aot_bw, uint16_t modes) {
  if (device_id != 0 || (modes & ~kKnownModes)) return GNI_RC_INVALID_PARAM;
  if (!(modes & GNI_BI_FLAG_USE_DEFAULT_SETTINGS)) {
    const uint16_t max = (modes & GNI_BI_FLAG_VALUE_IS_NUM_ORB_ENTRIES) ? GNI_BI_INJECT_BW_ORB_MAX
                                                                         : GNI_BI_INJECT_BW_MAX;
    if (bw > max || aot_bw > max) return GNI_RC_INVALID_PARAM;
  }
  abi::ctl::BiConfigSet req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kBiConfigSet);
  req.bw = bw;
  req.aot_bw = aot_bw;
  req.modes = modes;
  abi::ctl::Reply rep{};
  if (!call_device(req, rep)) return GNI_RC_INVALID_PARAM;  // no device 0 on this node
  return static_cast<gni_return_t>(rep.rc);
}

gni_return_t GNI_GetBIConfig(uint32_t device_id, gni_bi_desc_t* desc) {
  if (device_id != 0 || !desc) return GNI_RC_INVALID_PARAM;
  abi::ctl::BiConfigGet req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kBiConfigGet);
  abi::ctl::BiConfigReply rep{};
  if (!call_device(req, rep)) return GNI_RC_INVALID_PARAM;
  if (rep.r.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.r.rc);
  desc->current_bw = rep.current_bw;
  desc->current_aot_bw = rep.current_aot_bw;
  desc->current_norbs = rep.current_norbs;
  desc->flags = rep.flags;
  desc->sys_def_bw = rep.sys_def_bw;
  desc->sys_def_aot_bw = rep.sys_def_aot_bw;
  desc->cle_seqnum = rep.cle_seqnum;
  desc->hss_seqnum = rep.hss_seqnum;
  return GNI_RC_SUCCESS;
}

// Settings apply when GNI_SetBIConfig returns, so there is nothing to wait for; the
// timeout (marked OUT in the header, passed by value) is not used.
gni_return_t GNI_BISyncWait(uint32_t device_id, uint32_t timeout) {
  (void)timeout;
  abi::ctl::HelloReply h;
  if (device_id != 0 || !daemon_hello(h)) return GNI_RC_INVALID_PARAM;
  return GNI_RC_SUCCESS;
}

}  // extern "C"
