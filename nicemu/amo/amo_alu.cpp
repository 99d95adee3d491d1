// The AMO arithmetic unit (decisions in amo_alu.h).
#include "nicemu/amo/amo_alu.h"

#include <bit>
#include <cmath>
#include <iterator>

namespace nicemu::amo {

namespace {

// Opcode bits (fact sheet §13).
constexpr uint32_t kNonFetching = 0x100;
constexpr uint32_t kGen2 = 0x040;
constexpr uint32_t kGen1Bits = 0x100 | 0x010 | 0x00F;                  // non-fetching, cached, op
constexpr uint32_t kGen2Bits = 0x200 | 0x100 | 0x040 | 0x020 | 0x01F;  // _S, non-fetching, gen-2, _C, op + 64-bit bit
constexpr uint32_t kGen2Short = 0x200;

template <typename F, typename U>
U fp_min(U t, U a) {
  F x = std::bit_cast<F>(t), y = std::bit_cast<F>(a);
  if (std::isnan(y)) return t;
  if (std::isnan(x)) return a;
  if (y < x || (y == x && std::signbit(y) && !std::signbit(x))) return a;
  return t;
}

template <typename F, typename U>
U fp_max(U t, U a) {
  F x = std::bit_cast<F>(t), y = std::bit_cast<F>(a);
  if (std::isnan(y)) return t;
  if (std::isnan(x)) return a;
  if (y > x || (y == x && !std::signbit(y) && std::signbit(x))) return a;
  return t;
}

template <typename F, typename U>
U fp_add(U t, U a) {
  return std::bit_cast<U>(static_cast<F>(std::bit_cast<F>(t) + std::bit_cast<F>(a)));
}

// The operations that depend on the operand width's type.
template <typename U, typename S, typename F>
U typed(Op op, U t, U a) {
  switch (op) {
    case Op::kImin: return static_cast<S>(a) < static_cast<S>(t) ? a : t;
    case Op::kImax: return static_cast<S>(a) > static_cast<S>(t) ? a : t;
    case Op::kFpmin: return fp_min<F>(t, a);
    case Op::kFpmax: return fp_max<F>(t, a);
    case Op::kFpadd: return fp_add<F>(t, a);
    default: return t;
  }
}

}  // namespace

std::optional<Command> decode(uint32_t cmd) {
  Command c;
  c.fetching = !(cmd & kNonFetching);
  if (!(cmd & kGen2)) {
    // Gen-1: operation in bits 3..0 (0x8-0xD), 0x10 = cached; 64-bit operands only, and
    // CSWAP exists only in the fetching form.
    if (cmd & ~kGen1Bits) return std::nullopt;
    switch (cmd & 0xF) {
      case 0x8: c.op = Op::kAdd; break;
      case 0x9: c.op = Op::kAnd; break;
      case 0xA: c.op = Op::kOr; break;
      case 0xB: c.op = Op::kXor; break;
      case 0xC: c.op = Op::kAx; break;
      case 0xD:
        if (!c.fetching) return std::nullopt;
        c.op = Op::kCswap;
        break;
      default: return std::nullopt;
    }
    return c;
  }
  // Gen-2: operation in bits 4..1, 0x20 = cached, 0x200 = 32-bit; bit 0 is set exactly in
  // the 64-bit forms.
  if (cmd & ~kGen2Bits) return std::nullopt;
  const bool is_short = cmd & kGen2Short;
  if (bool(cmd & 1) == is_short) return std::nullopt;
  c.size = is_short ? 4 : 8;
  switch ((cmd >> 1) & 0xF) {
    case 0: c.op = Op::kAnd; break;
    case 1: c.op = Op::kOr; break;
    case 2: c.op = Op::kXor; break;
    case 3: c.op = Op::kSwap; break;
    case 4: c.op = Op::kAx; break;
    case 5: c.op = Op::kCswap; break;
    case 8: c.op = Op::kImin; break;
    case 9: c.op = Op::kImax; break;
    case 10: c.op = Op::kAdd; break;
    case 12: c.op = Op::kFpmin; break;
    case 13: c.op = Op::kFpmax; break;
    case 14: c.op = Op::kFpadd; break;
    default: return std::nullopt;
  }
  return c;
}

Outcome apply(const Command& c, uint64_t old, uint64_t a, uint64_t b) {
  const uint64_t mask = c.size == 4 ? 0xFFFFFFFFull : ~0ull;
  old &= mask;
  a &= mask;
  b &= mask;
  uint64_t v = old;
  switch (c.op) {
    case Op::kAdd: v = old + a; break;
    case Op::kAnd: v = old & a; break;
    case Op::kOr: v = old | a; break;
    case Op::kXor: v = old ^ a; break;
    case Op::kAx: v = (old & a) ^ b; break;
    case Op::kCswap: v = old == a ? b : old; break;
    case Op::kSwap: v = a; break;
    case Op::kImin:
    case Op::kImax:
    case Op::kFpmin:
    case Op::kFpmax:
    case Op::kFpadd:
      v = c.size == 4 ? typed<uint32_t, int32_t, float>(c.op, uint32_t(old), uint32_t(a))
                      : typed<uint64_t, int64_t, double>(c.op, old, a);
      break;
  }
  v &= mask;
  return Outcome{v, old, v != old};
}

const char* op_name(Op op) {
  static constexpr const char* kNames[] = {"ADD",  "AND",  "OR",   "XOR",   "AX",    "CSWAP",
                                           "SWAP", "IMIN", "IMAX", "FPMIN", "FPMAX", "FPADD"};
  auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "?";
}

}  // namespace nicemu::amo
