// The control word of a collective-engine result (gni_ce_result_t, fact sheet §16), as
// the exported gni_ce_res_* accessors read it. Cray's layout is not public; nicemu has no
// collective engine (GNI_CeCreate returns GNI_RC_ILLEGAL_OP), so nothing produces results
// and this layout only has to be the one the accessors and their tests agree on:
//   bits 3..0   floating-point exceptions (GNI_CE_FPE_*)
//   bits 15..8  status (0 = OK)
//   bits 63..32 reduction id (low 32 bits of the descriptor's ce_red_id)
#pragma once
#include <cstdint>

namespace nicemu::ugni::ce {

inline constexpr uint64_t kFpeMask = 0xF;
inline constexpr unsigned kStatusShift = 8;
inline constexpr uint64_t kStatusMask = 0xFF;
inline constexpr unsigned kRedIdShift = 32;
inline constexpr uint64_t kRedIdMask = 0xFFFFFFFF;

constexpr uint64_t make_control(uint64_t status, uint64_t fpe, uint64_t red_id) {
  return (fpe & kFpeMask) | ((status & kStatusMask) << kStatusShift) | ((red_id & kRedIdMask) << kRedIdShift);
}
constexpr uint64_t status(uint64_t control) { return (control >> kStatusShift) & kStatusMask; }
constexpr uint64_t fpe(uint64_t control) { return control & kFpeMask; }
constexpr uint64_t red_id(uint64_t control) { return (control >> kRedIdShift) & kRedIdMask; }

}  // namespace nicemu::ugni::ce
