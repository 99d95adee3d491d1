// Memory-handle encoding: round trips, CRC protection, field widths.
#include <doctest/doctest.h>

#include "nicemu/abi/mem_handle.h"

using namespace nicemu::abi::mdh;

TEST_CASE("memory handle round-trips every field") {
  Fields f;
  f.va = 0x7f12'3456'7000ull;
  f.npages = 123;
  f.domain = 0xABC;
  f.slot = 16383;
  f.flags = kFlagReadOnly;
  uint64_t q1, q2;
  encode(f, q1, q2);
  auto d = decode(q1, q2);
  REQUIRE(d);
  CHECK(d->va == f.va);
  CHECK(d->npages == 123);
  CHECK(d->domain == 0xABC);
  CHECK(domain_of(q1) == 0xABC);
  CHECK(d->slot == 16383);
  CHECK(d->flags == kFlagReadOnly);
}

TEST_CASE("a flipped bit anywhere is caught by the CRC") {
  Fields f{0x1000, 1, 7, 42, 0};
  uint64_t q1, q2;
  encode(f, q1, q2);
  for (int bit = 0; bit < 64; ++bit) {
    CHECK_FALSE(decode(q1 ^ (uint64_t{1} << bit), q2));
    if (bit < 56) CHECK_FALSE(decode(q1, q2 ^ (uint64_t{1} << bit)));
  }
  CHECK_FALSE(decode(0, 0));
}

TEST_CASE("CRC-8 matches the reflected Dallas/Maxim polynomial") {
  // Bitwise reference implementation of CRC-8/MAXIM (poly 0x8C reflected, init 0).
  auto ref = [](uint64_t q1, uint64_t q2) {
    uint8_t crc = 0;
    for (int i = 0; i < 15; ++i) {
      uint8_t byte = i < 8 ? uint8_t(q1 >> (8 * i)) : uint8_t(q2 >> (8 * (i - 8)));
      crc ^= byte;
      for (int b = 0; b < 8; ++b) crc = (crc & 1) ? uint8_t((crc >> 1) ^ 0x8C) : uint8_t(crc >> 1);
    }
    return crc;
  };
  for (uint64_t x : {0x0ull, 0x123456789abcdefull, ~0ull, 0x8000000000000001ull})
    CHECK(crc8(x, x >> 3) == ref(x, x >> 3));
}

TEST_CASE("registration handles: page-truncated VA, pages covered, read-only flag") {
  // 100 bytes before a page boundary plus 5000 bytes spans three pages.
  Fields f = registration_fields(0x10000 + 4096 - 100, 5000, 0x123, 77, true);
  CHECK(f.va == 0x10000);
  CHECK(f.npages == 3);
  CHECK(f.domain == 0x123);
  CHECK(f.slot == 77);
  CHECK(f.flags == kFlagReadOnly);
  CHECK(registration_fields(0x20000, 4096, 1, 2, false).npages == 1);
  CHECK(registration_fields(0x20000, 4096, 1, 2, false).flags == 0);
  uint64_t q1, q2;
  encode(f, q1, q2);
  auto d = decode(q1, q2);
  REQUIRE(d);
  CHECK(d->va == 0x10000);
  CHECK(d->npages == 3);
}
