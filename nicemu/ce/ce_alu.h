// The collective engine's arithmetic (fact sheet §16): how one VCE channel combines two
// operands of a reduction, as a pure function of the command, the post mode and the
// channel's rounding mode. The daemon's CE engine (daemon/ce/ce_engine.h) folds the operands
// of a channel's children with it; nothing here knows about trees or messages.
//
// Semantics, from Cray's gni_pub.h comments and its ce_pmi_example (docs/decisions.md,
// "Collective engine"):
//  - An operand is a pair (a, b). AND, OR, XOR, IADD and FPADD reduce `a` only, unless the
//    post has GNI_CEMODE_TWO_OP: then `b` is reduced the same way, independently; `b` of a
//    single-operand reduction is 0 in the result.
//  - The min/max commands reduce the value `a` and carry the index `b` of the winner; on a
//    tie LIDX keeps the lowest index, GIDX the greatest.
//  - `_S` commands work on the low 32 bits of each operand (int32_t / float); results are
//    zero-extended to 64 bits.
//  - IADD wraps; IMIN/IMAX compare as two's complement. FPADD rounds with the channel's
//    mode (GNI_CE_MODE_ROUND_*) and raises the IEEE exceptions of the addition.
//  - FPMIN/FPMAX: a NaN raises OP_INVAL and wins (the result is NaN, as an ordered compare
//    of a NaN is invalid); -0 and +0 compare equal (a tie, decided by the index).
//  - Exception bits accumulate: those an operand arrives with (GNI_CEMODE_FPE_* on a post:
//    "an intermediate result that has experienced" it) and those every combining raised.
#pragma once
#include <cstdint>
#include <optional>

namespace nicemu::ce {

enum class Family : uint8_t { kAnd, kOr, kXor, kIAdd, kIMin, kIMax, kFAdd, kFMin, kFMax };

struct Command {
  Family family = Family::kAnd;
  bool wide = true;            // 64-bit operands; false for the `_S` forms
  bool greatest_index = false; // GIDX (ties keep the greatest index); LIDX otherwise
  bool operator==(const Command&) const = default;
};

// nullopt for a value that is not one of the 26 gni_ce_cmd_type_t enumerators.
std::optional<Command> decode(uint32_t ce_cmd);

constexpr bool has_index(Family f) {
  return f == Family::kIMin || f == Family::kIMax || f == Family::kFMin || f == Family::kFMax;
}

// GNI_CE_FPE_* bits in a result; GNI_CEMODE_FPE_* in a post mode are these shifted left by 1.
inline constexpr uint8_t kFpeInvalid = 0x1, kFpeOverflow = 0x2, kFpeUnderflow = 0x4, kFpePrecision = 0x8;
inline constexpr uint32_t kModeTwoOp = 1u << 0;
inline constexpr uint32_t kModeFpeShift = 1;
inline constexpr uint32_t kModeKnown = 0x1F;

enum class Rounding : uint8_t { kNear, kUp, kDown, kZero };
// The rounding of a channel's GNI_CeConfigure modes (GNI_CE_MODE_ROUND_*, at most one;
// none is round-to-nearest). nullopt if more than one is set.
std::optional<Rounding> rounding_of(uint32_t channel_modes);

struct Operand {
  uint64_t a = 0, b = 0;
  uint8_t fpe = 0;
  bool operator==(const Operand&) const = default;
};

// A leaf's operand as it enters the tree: `_S` forms keep the low 32 bits, a single-operand
// reduction drops `b`, and the post mode's exception bits are carried along.
Operand leaf_operand(const Command& c, uint32_t post_mode, uint64_t first, uint64_t second);

// x combined with y (x is the operand of the lower child index). Both must be leaf_operand
// results of the same command and mode.
Operand combine(const Command& c, bool two_op, Rounding r, const Operand& x, const Operand& y);

}  // namespace nicemu::ce
