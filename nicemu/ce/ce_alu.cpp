#include "nicemu/ce/ce_alu.h"

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstring>

namespace nicemu::ce {

std::optional<Command> decode(uint32_t ce_cmd) {
  const bool wide = (ce_cmd & 1) != 0;
  switch (ce_cmd & ~1u) {
    case 0x00: return Command{Family::kAnd, wide, false};
    case 0x02: return Command{Family::kOr, wide, false};
    case 0x04: return Command{Family::kXor, wide, false};
    case 0x10: return Command{Family::kIMin, wide, false};
    case 0x12: return Command{Family::kIMax, wide, false};
    case 0x14: return Command{Family::kIAdd, wide, false};
    case 0x18: return Command{Family::kFMin, wide, false};
    case 0x1a: return Command{Family::kFMax, wide, false};
    case 0x1c: return Command{Family::kFAdd, wide, false};
    case 0x30: return Command{Family::kIMin, wide, true};
    case 0x32: return Command{Family::kIMax, wide, true};
    case 0x38: return Command{Family::kFMin, wide, true};
    case 0x3a: return Command{Family::kFMax, wide, true};
    default: return std::nullopt;
  }
}

std::optional<Rounding> rounding_of(uint32_t modes) {
  switch (modes & 0xF) {
    case 0x0:
    case 0x4: return Rounding::kNear;
    case 0x1: return Rounding::kUp;
    case 0x2: return Rounding::kDown;
    case 0x8: return Rounding::kZero;
    default: return std::nullopt;
  }
}

namespace {

constexpr uint64_t kLow32 = 0xFFFFFFFFull;

uint64_t narrow(const Command& c, uint64_t v) { return c.wide ? v : v & kLow32; }

int fe_mode(Rounding r) {
  switch (r) {
    case Rounding::kUp: return FE_UPWARD;
    case Rounding::kDown: return FE_DOWNWARD;
    case Rounding::kZero: return FE_TOWARDZERO;
    default: return FE_TONEAREST;
  }
}

uint8_t fpe_of(int raised) {
  return uint8_t((raised & FE_INVALID ? kFpeInvalid : 0) | (raised & FE_OVERFLOW ? kFpeOverflow : 0) |
                 (raised & FE_UNDERFLOW ? kFpeUnderflow : 0) | (raised & FE_INEXACT ? kFpePrecision : 0));
}

// One IEEE addition of two lanes in rounding mode `r`; the exceptions it raised are ORed
// into `fpe`. The caller's floating-point environment is restored afterwards.
uint64_t fp_add(bool wide, Rounding r, uint64_t x, uint64_t y, uint8_t& fpe) {
  std::fenv_t saved;
  std::feholdexcept(&saved);
  std::fesetround(fe_mode(r));
  uint64_t out;
  if (wide) {
    volatile double a = std::bit_cast<double>(x), b = std::bit_cast<double>(y);
    volatile double s = a + b;
    out = std::bit_cast<uint64_t>(static_cast<double>(s));
  } else {
    volatile float a = std::bit_cast<float>(uint32_t(x)), b = std::bit_cast<float>(uint32_t(y));
    volatile float s = a + b;
    out = std::bit_cast<uint32_t>(static_cast<float>(s));
  }
  fpe |= fpe_of(std::fetestexcept(FE_ALL_EXCEPT));
  std::fesetenv(&saved);
  return out;
}

uint64_t int_add(bool wide, uint64_t x, uint64_t y) { return wide ? x + y : (x + y) & kLow32; }

// -1, 0 or 1 for x < y, equal, x > y; `unordered` when a NaN is involved.
int compare(const Command& c, uint64_t x, uint64_t y, bool& unordered) {
  unordered = false;
  const bool fp = c.family == Family::kFMin || c.family == Family::kFMax;
  if (!fp) {
    const int64_t a = c.wide ? int64_t(x) : int64_t(int32_t(uint32_t(x)));
    const int64_t b = c.wide ? int64_t(y) : int64_t(int32_t(uint32_t(y)));
    return a < b ? -1 : a > b ? 1 : 0;
  }
  const double a = c.wide ? std::bit_cast<double>(x) : double(std::bit_cast<float>(uint32_t(x)));
  const double b = c.wide ? std::bit_cast<double>(y) : double(std::bit_cast<float>(uint32_t(y)));
  if (std::isnan(a) || std::isnan(b)) {
    unordered = true;
    return std::isnan(a) ? -1 : 1;  // the NaN wins, whichever way the operation looks
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

Operand pick_index(const Command& c, const Operand& x, const Operand& y) {
  bool unordered = false;
  int cmp = compare(c, x.a, y.a, unordered);
  Operand out;
  out.fpe = uint8_t(x.fpe | y.fpe | (unordered ? kFpeInvalid : 0));
  bool take_x;
  if (unordered) {
    take_x = cmp < 0;
  } else if (cmp == 0) {
    take_x = c.greatest_index ? x.b >= y.b : x.b <= y.b;
  } else {
    const bool min = c.family == Family::kIMin || c.family == Family::kFMin;
    take_x = min ? cmp < 0 : cmp > 0;
  }
  const Operand& w = take_x ? x : y;
  out.a = w.a;
  out.b = w.b;
  return out;
}

}  // namespace

Operand leaf_operand(const Command& c, uint32_t post_mode, uint64_t first, uint64_t second) {
  Operand o;
  o.a = narrow(c, first);
  const bool keep_b = has_index(c.family) || (post_mode & kModeTwoOp);
  o.b = keep_b ? narrow(c, second) : 0;
  o.fpe = uint8_t((post_mode >> kModeFpeShift) & 0xF);
  return o;
}

Operand combine(const Command& c, bool two_op, Rounding r, const Operand& x, const Operand& y) {
  if (has_index(c.family)) return pick_index(c, x, y);
  Operand out;
  out.fpe = uint8_t(x.fpe | y.fpe);
  auto lane = [&](uint64_t p, uint64_t q) -> uint64_t {
    switch (c.family) {
      case Family::kAnd: return p & q;
      case Family::kOr: return p | q;
      case Family::kXor: return p ^ q;
      case Family::kIAdd: return int_add(c.wide, p, q);
      case Family::kFAdd: return fp_add(c.wide, r, p, q, out.fpe);
      default: return 0;
    }
  };
  out.a = lane(x.a, y.a);
  out.b = two_op ? lane(x.b, y.b) : 0;
  return out;
}

}  // namespace nicemu::ce
