// The AMO arithmetic unit: what one atomic memory operation does to the target word, as a
// pure function. The requester (fma_requester.cpp) takes the target's AMO lock, reads the
// word, asks this unit for the outcome and writes back; nothing here touches memory.
//
// Opcodes are the gni_fma_cmd_type_t values of fact sheet §13 (gen-1 Gemini-style and
// gen-2 Aries-style; cached `_C` forms behave like uncached ones, `_S` forms have 32-bit
// operands). Decisions the sheet leaves open:
//  - FPMIN/FPMAX follow IEEE 754-2008 minNum/maxNum (C fmin/fmax): a NaN operand leaves the
//    target unchanged, a NaN target is replaced by a numeric operand; -0 is smaller than +0.
//    A min/max never rewrites the target with an equal value.
//  - FPADD is the host's IEEE addition (binary64, binary32 for `_S`) in the initiating
//    thread's floating-point environment (round-to-nearest-even unless the application
//    changed it); NaN payloads propagate as the CPU propagates them.
//  - Integer ADD wraps modulo 2^64 (2^32 for `_S`); IMIN/IMAX compare as two's complement.
#pragma once
#include <cstdint>
#include <optional>

namespace nicemu::amo {

enum class Op : uint8_t { kAdd, kAnd, kOr, kXor, kAx, kCswap, kSwap, kImin, kImax, kFpmin, kFpmax, kFpadd };

struct Command {
  Op op = Op::kAdd;
  uint8_t size = 8;       // operand bytes: 8, or 4 for the `_S` forms
  bool fetching = false;  // the old value goes back to local_addr
  bool operator==(const Command&) const = default;
};

// nullopt for a value that is not one of the 118 enumerators of gni_fma_cmd_type_t.
std::optional<Command> decode(uint32_t amo_cmd);

// Whether a descriptor's `length` fits command `c`: the operand size, or for the
// non-fetching two-operand commands (AX, CSWAP and their cached and 32-bit forms) twice
// that, since programs written for Cray XC machines post them with the length of both
// operands. Only `size` bytes of the target change either way; a fetching form returns
// `size` bytes, so it keeps the operand size.
constexpr bool length_ok(const Command& c, uint64_t length) {
  return length == c.size || (!c.fetching && (c.op == Op::kAx || c.op == Op::kCswap) && length == 2u * c.size);
}

struct Outcome {
  uint64_t new_value = 0;  // the target's value after the operation (low `size` bytes)
  uint64_t fetched = 0;    // the old value, zero-extended; meaningful when `fetching`
  bool store = false;      // the target changes (a failed compare or an unchanged min is no write)
};

// `old`, `first` and `second` are taken modulo 2^(8*size); results are zero-extended.
Outcome apply(const Command& c, uint64_t old, uint64_t first, uint64_t second);

const char* op_name(Op op);

}  // namespace nicemu::amo
