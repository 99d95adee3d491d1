// The control word of a collective-engine result (gni_ce_result_t, fact sheet §16) as the
// exported gni_ce_res_* accessors and GNI_CeCheckResult read it; the layout is defined with
// the CE messages (nicemu/abi/ce_ops.h), since the daemon writes it.
#pragma once
#include <cstdint>

#include "nicemu/abi/ce_ops.h"

namespace nicemu::ugni::ce {

namespace ace = nicemu::abi::ce;
inline constexpr uint64_t kFpeMask = ace::kResFpeMask;
inline constexpr unsigned kStatusShift = ace::kResStatusShift;
inline constexpr uint64_t kStatusMask = ace::kResStatusMask;
inline constexpr unsigned kRedIdShift = ace::kResRedIdShift;
inline constexpr uint64_t kRedIdMask = ace::kResRedIdMask;

// Without the done bit (tests of the accessors build words by hand).
constexpr uint64_t make_control(uint64_t status, uint64_t fpe, uint64_t red_id) {
  return ace::make_control(status, fpe, red_id) & ~ace::kResDone;
}
constexpr uint64_t status(uint64_t control) { return (control >> kStatusShift) & kStatusMask; }
constexpr uint64_t fpe(uint64_t control) { return control & kFpeMask; }
constexpr uint64_t red_id(uint64_t control) { return (control >> kRedIdShift) & kRedIdMask; }
constexpr bool done(uint64_t control) { return (control & ace::kResDone) != 0; }

}  // namespace nicemu::ugni::ce
