// The collective engine's arithmetic (nicemu/ce/ce_alu.h): decoding of the 26 CE commands,
// one- and two-operand reductions at both widths, index tie-breaking (LIDX lowest, GIDX
// greatest), rounding modes and exception bits of FPADD, NaN in FPMIN/FPMAX.
#include <doctest/doctest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "gni_pub.h"
#include "nicemu/ce/ce_alu.h"

using namespace nicemu::ce;

namespace {

uint64_t d(double v) { return std::bit_cast<uint64_t>(v); }
uint64_t f(float v) { return std::bit_cast<uint32_t>(v); }
double as_d(uint64_t v) { return std::bit_cast<double>(v); }
float as_f(uint64_t v) { return std::bit_cast<float>(uint32_t(v)); }

Operand fold(uint32_t cmd, uint32_t mode, Rounding r, std::initializer_list<std::pair<uint64_t, uint64_t>> ops) {
  const Command c = *decode(cmd);
  Operand acc;
  bool first = true;
  for (auto [a, b] : ops) {
    Operand o = leaf_operand(c, mode, a, b);
    acc = first ? o : combine(c, (mode & kModeTwoOp) != 0, r, acc, o);
    first = false;
  }
  return acc;
}

}  // namespace

TEST_CASE("ce_alu: decodes exactly the 26 commands of gni_ce_cmd_type_t") {
  const uint32_t valid[] = {GNI_FMA_CE_AND_S,        GNI_FMA_CE_AND,         GNI_FMA_CE_OR_S,        GNI_FMA_CE_OR,
                            GNI_FMA_CE_XOR_S,        GNI_FMA_CE_XOR,         GNI_FMA_CE_IMIN_LIDX_S, GNI_FMA_CE_IMIN_LIDX,
                            GNI_FMA_CE_IMAX_LIDX_S,  GNI_FMA_CE_IMAX_LIDX,   GNI_FMA_CE_IADD_S,      GNI_FMA_CE_IADD,
                            GNI_FMA_CE_FPMIN_LIDX_S, GNI_FMA_CE_FPMIN_LIDX,  GNI_FMA_CE_FPMAX_LIDX_S, GNI_FMA_CE_FPMAX_LIDX,
                            GNI_FMA_CE_FPADD_S,      GNI_FMA_CE_FPADD,       GNI_FMA_CE_IMIN_GIDX_S, GNI_FMA_CE_IMIN_GIDX,
                            GNI_FMA_CE_IMAX_GIDX_S,  GNI_FMA_CE_IMAX_GIDX,   GNI_FMA_CE_FPMIN_GIDX_S, GNI_FMA_CE_FPMIN_GIDX,
                            GNI_FMA_CE_FPMAX_GIDX_S, GNI_FMA_CE_FPMAX_GIDX};
  int n = 0;
  for (uint32_t v = 0; v < 0x100; ++v) {
    auto c = decode(v);
    bool listed = false;
    for (uint32_t x : valid) listed |= x == v;
    CHECK_MESSAGE(c.has_value() == listed, "command ", v);
    if (c) {
      ++n;
      CHECK(c->wide == ((v & 1) != 0));
      CHECK(c->greatest_index == (v >= 0x30));
    }
  }
  CHECK(n == 26);
  CHECK(decode(GNI_FMA_CE_FPMAX_GIDX)->family == Family::kFMax);
  CHECK(decode(GNI_FMA_CE_IADD_S)->family == Family::kIAdd);
}

TEST_CASE("ce_alu: rounding modes of a channel") {
  CHECK(rounding_of(0) == Rounding::kNear);
  CHECK(rounding_of(GNI_CE_MODE_ROUND_NEAR | GNI_CE_MODE_CQE_ONCOMP) == Rounding::kNear);
  CHECK(rounding_of(GNI_CE_MODE_ROUND_UP) == Rounding::kUp);
  CHECK(rounding_of(GNI_CE_MODE_ROUND_DOWN) == Rounding::kDown);
  CHECK(rounding_of(GNI_CE_MODE_ROUND_ZERO | GNI_CE_MODE_CQE_ONERR) == Rounding::kZero);
  CHECK_FALSE(rounding_of(GNI_CE_MODE_ROUND_UP | GNI_CE_MODE_ROUND_DOWN).has_value());
}

TEST_CASE("ce_alu: bitwise and integer reductions, one and two operands, both widths") {
  auto r = fold(GNI_FMA_CE_AND, 0, Rounding::kNear, {{0xF0F0, 0x1}, {0xFF00, 0x3}});
  CHECK(r.a == 0xF000);
  CHECK(r.b == 0);  // single operand: b is not reduced
  r = fold(GNI_FMA_CE_AND, GNI_CEMODE_TWO_OP, Rounding::kNear, {{0xF0F0, 0x1}, {0xFF00, 0x3}});
  CHECK(r.b == 0x1);
  r = fold(GNI_FMA_CE_OR_S, GNI_CEMODE_TWO_OP, Rounding::kNear, {{0xFFFF000000000001ull, 2}, {4, 0xAA00000008ull}});
  CHECK(r.a == 5);  // _S: the low 32 bits only, zero-extended
  CHECK(r.b == 0xA);
  r = fold(GNI_FMA_CE_XOR, GNI_CEMODE_TWO_OP, Rounding::kNear, {{1, 1}, {3, 1}, {4, 1}});
  CHECK(r.a == 6);
  CHECK(r.b == 1);
  r = fold(GNI_FMA_CE_IADD, GNI_CEMODE_TWO_OP, Rounding::kNear,
           {{uint64_t(std::numeric_limits<int64_t>::max()), uint64_t(-5)}, {1, 2}});
  CHECK(int64_t(r.a) == std::numeric_limits<int64_t>::min());  // wraps
  CHECK(int64_t(r.b) == -3);
  r = fold(GNI_FMA_CE_IADD_S, GNI_CEMODE_TWO_OP, Rounding::kNear, {{uint64_t(int64_t(-1)), 0x7FFFFFFF}, {2, 1}});
  CHECK(r.a == 1);
  CHECK(r.b == 0x80000000ull);
}

TEST_CASE("ce_alu: min/max carry the index; LIDX keeps the lowest on a tie, GIDX the greatest") {
  auto r = fold(GNI_FMA_CE_IMIN_LIDX, 0, Rounding::kNear, {{5, 7}, {uint64_t(-3), 9}, {uint64_t(-3), 2}, {4, 1}});
  CHECK(int64_t(r.a) == -3);
  CHECK(r.b == 2);
  r = fold(GNI_FMA_CE_IMIN_GIDX, 0, Rounding::kNear, {{5, 7}, {uint64_t(-3), 9}, {uint64_t(-3), 2}, {4, 1}});
  CHECK(r.b == 9);
  r = fold(GNI_FMA_CE_IMAX_LIDX_S, 0, Rounding::kNear, {{0xFFFFFFFFull, 0}, {1, 3}, {1, 2}});
  CHECK(r.a == 1);  // 0xFFFFFFFF is -1 as int32_t
  CHECK(r.b == 2);
  r = fold(GNI_FMA_CE_IMAX_GIDX_S, 0, Rounding::kNear, {{1, 3}, {1, 2}, {0, 8}});
  CHECK(r.b == 3);
  r = fold(GNI_FMA_CE_FPMAX_LIDX, 0, Rounding::kNear, {{d(2.5), 4}, {d(-1.0), 1}, {d(2.5), 3}});
  CHECK(as_d(r.a) == 2.5);
  CHECK(r.b == 3);
  CHECK(r.fpe == 0);
  r = fold(GNI_FMA_CE_FPMIN_GIDX_S, 0, Rounding::kNear, {{f(-0.0f), 1}, {f(0.0f), 6}, {f(3.0f), 0}});
  CHECK(r.b == 6);  // -0 and +0 tie
  CHECK(as_f(r.a) == 0.0f);
  r = fold(GNI_FMA_CE_FPMIN_LIDX, 0, Rounding::kNear, {{d(1.0), 1}, {d(std::nan("")), 2}, {d(-4.0), 3}});
  CHECK(std::isnan(as_d(r.a)));
  CHECK(r.b == 2);
  CHECK(r.fpe == kFpeInvalid);
}

TEST_CASE("ce_alu: FPADD in the channel's rounding mode, with its exceptions") {
  const double tiny = std::ldexp(1.0, -60);
  auto near = fold(GNI_FMA_CE_FPADD, 0, Rounding::kNear, {{d(1.0), 0}, {d(tiny), 0}});
  CHECK(as_d(near.a) == 1.0);
  CHECK(near.fpe == kFpePrecision);
  auto up = fold(GNI_FMA_CE_FPADD, 0, Rounding::kUp, {{d(1.0), 0}, {d(tiny), 0}});
  CHECK(as_d(up.a) == std::nextafter(1.0, 2.0));
  auto down = fold(GNI_FMA_CE_FPADD, 0, Rounding::kDown, {{d(-1.0), 0}, {d(-tiny), 0}});
  CHECK(as_d(down.a) == std::nextafter(-1.0, -2.0));
  auto zero = fold(GNI_FMA_CE_FPADD, 0, Rounding::kZero, {{d(-1.0), 0}, {d(-tiny), 0}});
  CHECK(as_d(zero.a) == -1.0);
  auto exact = fold(GNI_FMA_CE_FPADD, GNI_CEMODE_TWO_OP, Rounding::kNear, {{d(1.5), d(2.0)}, {d(2.25), d(-8.0)}});
  CHECK(as_d(exact.a) == 3.75);
  CHECK(as_d(exact.b) == -6.0);
  CHECK(exact.fpe == 0);
  auto over = fold(GNI_FMA_CE_FPADD, 0, Rounding::kNear, {{d(DBL_MAX), 0}, {d(DBL_MAX), 0}});
  CHECK(std::isinf(as_d(over.a)));
  CHECK(over.fpe == (kFpeOverflow | kFpePrecision));
  auto inval = fold(GNI_FMA_CE_FPADD_S, 0, Rounding::kNear, {{f(INFINITY), 0}, {f(-INFINITY), 0}});
  CHECK(std::isnan(as_f(inval.a)));
  CHECK(inval.fpe == kFpeInvalid);
  auto up_s = fold(GNI_FMA_CE_FPADD_S, 0, Rounding::kUp, {{f(1.0f), 0}, {f(std::ldexp(1.0f, -40)), 0}});
  CHECK(as_f(up_s.a) == std::nextafter(1.0f, 2.0f));
  CHECK((up_s.a >> 32) == 0);
  // Exceptions an operand arrives with (GNI_CEMODE_FPE_*) are carried into the result.
  auto carried = fold(GNI_FMA_CE_FPADD, GNI_CEMODE_FPE_UFLOW, Rounding::kNear, {{d(1.0), 0}, {d(2.0), 0}});
  CHECK(carried.fpe == kFpeUnderflow);
}
