// The AMO arithmetic unit: decoding of all 118 gni_fma_cmd_type_t values (fact sheet §13)
// and the outcome of every operation at both widths, with the edge cases (wrap-around,
// signed minimum, NaN and signed zero for FPMIN/FPMAX, 32-bit operands with high garbage).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "nicemu/amo/amo_alu.h"
#include "gni_pub.h"

using nicemu::amo::apply;
using nicemu::amo::Command;
using nicemu::amo::decode;
using nicemu::amo::Op;

namespace {

struct Row {
  uint32_t cmd;
  Op op;
  uint8_t size;
  bool fetching;
};

// Every enumerator of gni_fma_cmd_type_t with its meaning, written out from the sheet.
#define G1(name, op, f) {GNI_FMA_ATOMIC_##name, Op::op, 8, f}, {GNI_FMA_ATOMIC_##name##_C, Op::op, 8, f}
#define G2(name, op, f)                                                                            \
  {GNI_FMA_ATOMIC2_##name, Op::op, 8, f}, {GNI_FMA_ATOMIC2_##name##_C, Op::op, 8, f},              \
      {GNI_FMA_ATOMIC2_##name##_S, Op::op, 4, f}, {GNI_FMA_ATOMIC2_##name##_SC, Op::op, 4, f}
const std::vector<Row> kAll = {
    G1(FADD, kAdd, true),   G1(FAND, kAnd, true),     G1(FOR, kOr, true),       G1(FXOR, kXor, true),
    G1(FAX, kAx, true),     G1(CSWAP, kCswap, true),  G1(ADD, kAdd, false),     G1(AND, kAnd, false),
    G1(OR, kOr, false),     G1(XOR, kXor, false),     G1(AX, kAx, false),       G2(FAND, kAnd, true),
    G2(FOR, kOr, true),     G2(FXOR, kXor, true),     G2(FSWAP, kSwap, true),   G2(FAX, kAx, true),
    G2(FCSWAP, kCswap, true), G2(FIMIN, kImin, true), G2(FIMAX, kImax, true),   G2(FIADD, kAdd, true),
    G2(FFPMIN, kFpmin, true), G2(FFPMAX, kFpmax, true), G2(FFPADD, kFpadd, true), G2(AND, kAnd, false),
    G2(OR, kOr, false),     G2(XOR, kXor, false),     G2(SWAP, kSwap, false),   G2(AX, kAx, false),
    G2(CSWAP, kCswap, false), G2(IMIN, kImin, false), G2(IMAX, kImax, false),   G2(IADD, kAdd, false),
    G2(FPMIN, kFpmin, false), G2(FPMAX, kFpmax, false), G2(FPADD, kFpadd, false),
};
#undef G1
#undef G2

uint64_t d2u(double d) { return std::bit_cast<uint64_t>(d); }
double u2d(uint64_t u) { return std::bit_cast<double>(u); }
uint64_t f2u(float f) { return std::bit_cast<uint32_t>(f); }
float u2f(uint64_t u) { return std::bit_cast<float>(static_cast<uint32_t>(u)); }

Command cmd(Op op, uint8_t size) { return Command{op, size, true}; }

// new value of one operation
uint64_t run(Op op, uint8_t size, uint64_t old, uint64_t a, uint64_t b = 0) {
  auto o = apply(cmd(op, size), old, a, b);
  CHECK(o.fetched == (size == 4 ? (old & 0xFFFFFFFF) : old));  // the old value, zero-extended
  CHECK(o.store == (o.new_value != o.fetched));
  return o.new_value;
}

}  // namespace

TEST_CASE("decode: all 118 enumerators, and nothing else") {
  CHECK(kAll.size() == 118);
  std::set<uint32_t> known;
  for (const Row& r : kAll) {
    CAPTURE(r.cmd);
    auto c = decode(r.cmd);
    REQUIRE(c.has_value());
    CHECK(c->op == r.op);
    CHECK(c->size == r.size);
    CHECK(c->fetching == r.fetching);
    known.insert(r.cmd);
  }
  CHECK(known.size() == 118);
  for (uint32_t v = 0; v < 0x10000; ++v) {
    if (known.contains(v)) continue;
    CAPTURE(v);
    CHECK_FALSE(decode(v).has_value());
  }
  for (uint32_t v : {0x10008u, 0x80000008u, 0xFFFFFFFFu, 0x1008u, 0x408u, 0x0C1u, 0x441u})
    CHECK_FALSE(decode(v).has_value());
}

TEST_CASE("every opcode computes its operation at its width") {
  // One vector per (operation, width), chosen so that each operation gives a distinct
  // answer; the upper operand halves are garbage that 32-bit forms must ignore.
  const uint64_t old64 = 0x0123456789ABCDEFull, a64 = 0x00FF00FF00FF00FFull, b64 = 0x1111111111111111ull;
  const uint64_t old32 = 0x89ABCDEFull, a32 = 0xDEAD000000FF00FFull, b32 = 0xBEEF000011111111ull;
  for (const Row& r : kAll) {
    CAPTURE(r.cmd);
    const Command c = *decode(r.cmd);
    const bool s = c.size == 4;
    const uint64_t old = s ? old32 | 0xFFFFFFFF00000000ull : old64;  // garbage above a 32-bit word too
    const uint64_t a = s ? a32 : a64, b = s ? b32 : b64;
    const uint64_t m = s ? 0xFFFFFFFFull : ~0ull;
    const uint64_t t = old & m, x = a & m, y = b & m;
    uint64_t want = 0;
    switch (r.op) {
      case Op::kAdd: want = (t + x) & m; break;
      case Op::kAnd: want = t & x; break;
      case Op::kOr: want = t | x; break;
      case Op::kXor: want = t ^ x; break;
      case Op::kAx: want = (t & x) ^ y; break;
      case Op::kCswap: want = t; break;  // no match here; matches are tested below
      case Op::kSwap: want = x; break;
      case Op::kImin: want = s ? t : x; break;  // old64 > a64 > 0; old32 < 0 < a32
      case Op::kImax: want = s ? x : t; break;
      case Op::kFpmin:
      case Op::kFpmax:
      case Op::kFpadd: continue;          // FP vectors below
    }
    auto o = apply(c, old, a, b);
    CHECK(o.new_value == want);
    CHECK(o.fetched == t);
    CHECK(o.store == (want != t));
    CHECK(c.fetching == r.fetching);
  }
}

TEST_CASE("integer add wraps; AND/OR/XOR/AX/SWAP") {
  CHECK(run(Op::kAdd, 8, ~0ull, 2) == 1);
  CHECK(run(Op::kAdd, 8, 5, uint64_t(-7)) == uint64_t(-2));
  CHECK(run(Op::kAdd, 4, 0xFFFFFFFF, 1) == 0);
  CHECK(run(Op::kAdd, 4, 0x7FFFFFFF, 0x100000001ull) == 0x80000000);
  CHECK(run(Op::kAnd, 4, 0xF0F0F0F0, ~0ull) == 0xF0F0F0F0);
  CHECK(run(Op::kOr, 8, 0, 0x8000000000000000ull) == 0x8000000000000000ull);
  CHECK(run(Op::kXor, 4, 0xFFFFFFFF, 0xFFFFFFFF) == 0);
  CHECK(run(Op::kAx, 8, 0xFF00, 0x0FF0, 0x1) == 0x0F01);  // (T & a) ^ b
  CHECK(run(Op::kAx, 8, 0xFF00, ~0ull, 0) == 0xFF00);     // identity: no store
  CHECK_FALSE(apply(cmd(Op::kAx, 8), 0xFF00, ~0ull, 0).store);
  CHECK(run(Op::kSwap, 4, 1, 0xAAAABBBBCCCCDDDDull) == 0xCCCCDDDD);
}

TEST_CASE("compare-and-swap compares the first operand and swaps in the second") {
  CHECK(run(Op::kCswap, 8, 42, 42, 99) == 99);
  CHECK(run(Op::kCswap, 8, 42, 41, 99) == 42);
  CHECK_FALSE(apply(cmd(Op::kCswap, 8), 42, 41, 99).store);
  // 32-bit: only the low halves of the operands count.
  CHECK(run(Op::kCswap, 4, 0x12345678, 0xFFFFFFFF12345678ull, 0xEEEEEEEE00000007ull) == 7);
  CHECK(run(Op::kCswap, 4, 0x12345678, 0x12345679, 7) == 0x12345678);
  // Swapping in the same value changes nothing.
  CHECK_FALSE(apply(cmd(Op::kCswap, 8), 5, 5, 5).store);
}

TEST_CASE("signed min/max, including the most negative value") {
  const uint64_t min64 = 0x8000000000000000ull, max64 = 0x7FFFFFFFFFFFFFFFull;
  CHECK(run(Op::kImin, 8, uint64_t(-1), 1) == uint64_t(-1));
  CHECK(run(Op::kImax, 8, uint64_t(-1), 1) == 1);
  CHECK(run(Op::kImin, 8, max64, min64) == min64);
  CHECK(run(Op::kImax, 8, min64, max64) == max64);
  CHECK(run(Op::kImin, 8, min64, max64) == min64);
  CHECK(run(Op::kImax, 8, 7, 7) == 7);
  CHECK_FALSE(apply(cmd(Op::kImax, 8), 7, 7, 0).store);
  CHECK(run(Op::kImin, 4, 0, 0xFFFFFFFF) == 0xFFFFFFFF);  // -1 in 32 bits, zero-extended result
  CHECK(run(Op::kImax, 4, 0, 0xFFFFFFFF) == 0);
  CHECK(run(Op::kImin, 4, 0x7FFFFFFF, 0x80000000) == 0x80000000);
  CHECK(run(Op::kImax, 4, 0x80000000, 0x7FFFFFFF) == 0x7FFFFFFF);
  // High garbage in a 32-bit operand does not make it negative or positive.
  CHECK(run(Op::kImin, 4, 5, 0xFFFFFFFF00000003ull) == 3);
  CHECK(run(Op::kImax, 4, 5, 0x0000000180000000ull) == 5);
}

TEST_CASE("FP min/max: IEEE minNum/maxNum, NaN operands ignored, -0 < +0") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(u2d(run(Op::kFpmin, 8, d2u(2.5), d2u(-1.0))) == -1.0);
  CHECK(u2d(run(Op::kFpmax, 8, d2u(2.5), d2u(-1.0))) == 2.5);
  CHECK(u2d(run(Op::kFpmin, 8, d2u(1.0), d2u(-inf))) == -inf);
  CHECK(u2d(run(Op::kFpmax, 8, d2u(1.0), d2u(inf))) == inf);
  // NaN operand: the target stays; NaN target: the number replaces it; both: unchanged.
  CHECK(run(Op::kFpmin, 8, d2u(3.0), d2u(nan)) == d2u(3.0));
  CHECK(run(Op::kFpmax, 8, d2u(3.0), d2u(nan)) == d2u(3.0));
  CHECK(run(Op::kFpmin, 8, d2u(nan), d2u(3.0)) == d2u(3.0));
  CHECK(run(Op::kFpmax, 8, d2u(nan), d2u(3.0)) == d2u(3.0));
  const uint64_t payload_nan = 0x7FF8000000000123ull;
  CHECK(run(Op::kFpmin, 8, payload_nan, d2u(nan)) == payload_nan);
  CHECK_FALSE(apply(cmd(Op::kFpmax, 8), payload_nan, d2u(nan), 0).store);
  // Signed zeros are ordered; equal values are not rewritten.
  CHECK(run(Op::kFpmin, 8, d2u(0.0), d2u(-0.0)) == d2u(-0.0));
  CHECK(run(Op::kFpmin, 8, d2u(-0.0), d2u(0.0)) == d2u(-0.0));
  CHECK(run(Op::kFpmax, 8, d2u(-0.0), d2u(0.0)) == d2u(0.0));
  CHECK(run(Op::kFpmax, 8, d2u(0.0), d2u(-0.0)) == d2u(0.0));
  CHECK_FALSE(apply(cmd(Op::kFpmin, 8), d2u(1.5), d2u(1.5), 0).store);
  // float for _S, zero-extended, high operand garbage ignored.
  const uint64_t junk = 0xABCD000000000000ull;
  CHECK(u2f(run(Op::kFpmin, 4, f2u(2.0f), junk | f2u(-3.5f))) == -3.5f);
  CHECK((run(Op::kFpmin, 4, f2u(2.0f), junk | f2u(-3.5f)) >> 32) == 0);
  CHECK(u2f(run(Op::kFpmax, 4, f2u(2.0f), f2u(-3.5f))) == 2.0f);
  CHECK(run(Op::kFpmax, 4, f2u(2.0f), f2u(std::nanf(""))) == f2u(2.0f));
  CHECK(run(Op::kFpmin, 4, f2u(std::nanf("")), f2u(-1.0f)) == f2u(-1.0f));
  CHECK(run(Op::kFpmin, 4, f2u(0.0f), f2u(-0.0f)) == f2u(-0.0f));
}

TEST_CASE("FP add: binary64, binary32 for _S") {
  CHECK(u2d(run(Op::kFpadd, 8, d2u(1.5), d2u(2.25))) == 3.75);
  volatile double x = 0.1, y = 0.2;  // the same rounding as the CPU's own addition
  CHECK(run(Op::kFpadd, 8, d2u(x), d2u(y)) == d2u(x + y));
  volatile float fx = 0.1f, fy = 0.2f;
  CHECK(run(Op::kFpadd, 4, f2u(fx), f2u(fy)) == f2u(fx + fy));
  CHECK(u2f(run(Op::kFpadd, 4, f2u(1e30f), 0xFFFF000000000000ull | f2u(1e30f))) == 2e30f);
  CHECK(std::isinf(u2f(run(Op::kFpadd, 4, f2u(3e38f), f2u(3e38f)))));  // float overflow, not double
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(std::isnan(u2d(run(Op::kFpadd, 8, d2u(inf), d2u(-inf)))));
  CHECK(std::isnan(u2d(run(Op::kFpadd, 8, d2u(std::nan("")), d2u(1.0)))));
  CHECK(run(Op::kFpadd, 8, d2u(-0.0), d2u(0.0)) == d2u(0.0));  // round-to-nearest: -0 + +0 = +0
  CHECK_FALSE(apply(cmd(Op::kFpadd, 8), d2u(5.0), d2u(0.0), 0).store);
}

TEST_CASE("fetching and non-fetching forms compute the same value") {
  for (const Row& r : kAll) {
    Command c = *decode(r.cmd);
    Command other = c;
    other.fetching = !c.fetching;
    auto x = apply(c, 0x1234, 0x5678, 0x9ABC), y = apply(other, 0x1234, 0x5678, 0x9ABC);
    CHECK(x.new_value == y.new_value);
    CHECK(x.fetched == y.fetched);
  }
  CHECK(std::string(nicemu::amo::op_name(Op::kFpadd)) == "FPADD");
}
