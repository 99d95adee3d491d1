// Bandwidth-injection (BI) settings of the emulated NIC (GNI_SetBIConfig / GNI_GetBIConfig,
// fact sheet §7): on Aries the NIC limits how fast a node injects requests, as a
// percentage of full bandwidth or as a number of outstanding-request-buffer (ORB) entries.
// nicemu records the settings per NIC, as the device does, so every process of the node
// reads what the last one set; it does not throttle anything (the emulated NIC's speed is
// the host's, and a throttle on a shared 2-core machine would measure nothing).
#pragma once
#include <cstdint>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"

namespace nicemu::daemon {

class BandwidthInjection {
 public:
  static constexpr uint16_t kApplyNow = 0x1, kApplyAfterThrottle = 0x2, kUseDefaults = 0x4, kValueIsOrbs = 0x8;
  static constexpr uint16_t kKnownModes = kApplyNow | kApplyAfterThrottle | kUseDefaults | kValueIsOrbs;
  static constexpr uint16_t kMaxPercent = 100;  // GNI_BI_INJECT_BW_MAX
  static constexpr uint16_t kMaxOrbs = 992;     // GNI_BI_INJECT_BW_ORB_MAX

  // A gni_return_t value: INVALID_PARAM for unknown mode bits or a value out of range.
  int set(uint16_t bw, uint16_t aot_bw, uint16_t modes) {
    if (modes & ~kKnownModes) return abi::gni::kInvalidParam;
    uint16_t norbs;
    if (modes & kUseDefaults) {
      bw = kMaxPercent;
      aot_bw = kMaxPercent;
      norbs = kMaxOrbs;
    } else if (modes & kValueIsOrbs) {
      if (bw > kMaxOrbs || aot_bw > kMaxOrbs) return abi::gni::kInvalidParam;
      norbs = bw;
      bw = orbs_to_percent(bw);
      aot_bw = orbs_to_percent(aot_bw);
    } else {
      if (bw > kMaxPercent || aot_bw > kMaxPercent) return abi::gni::kInvalidParam;
      norbs = percent_to_orbs(bw);
    }
    norbs_ = norbs;
    bw_ = bw;
    aot_bw_ = aot_bw;
    flags_ = modes;
    ++seq_;
    return abi::gni::kSuccess;
  }

  void get(abi::ctl::BiConfigReply& r) const {
    r.current_bw = bw_;
    r.current_aot_bw = aot_bw_;
    r.current_norbs = norbs_;
    r.flags = flags_;
    r.sys_def_bw = kMaxPercent;
    r.sys_def_aot_bw = kMaxPercent;
    r.cle_seqnum = seq_;  // changes with every accepted setting
    r.hss_seqnum = 0;     // no hardware supervisory system changes settings here
  }

  // The ORB-entry view of a percentage and back, rounded to nearest (nicemu's convention:
  // 100 % is all 992 entries).
  static constexpr uint16_t percent_to_orbs(uint16_t p) {
    return static_cast<uint16_t>((uint32_t{p} * kMaxOrbs + kMaxPercent / 2) / kMaxPercent);
  }
  static constexpr uint16_t orbs_to_percent(uint16_t o) {
    return static_cast<uint16_t>((uint32_t{o} * kMaxPercent + kMaxOrbs / 2) / kMaxOrbs);
  }

 private:
  uint16_t bw_ = kMaxPercent;
  uint16_t aot_bw_ = kMaxPercent;
  uint16_t norbs_ = kMaxOrbs;
  uint16_t flags_ = 0;
  uint16_t seq_ = 0;
};

}  // namespace nicemu::daemon
