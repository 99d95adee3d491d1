// MSGQ over the ofi fabric (nicemu/abi/ofi_msgq.h): what parse() takes and what it drops. A
// member rank stores only what parse() accepted; everything else is counted and dropped.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "nicemu/abi/ofi_msgq.h"

namespace mf = nicemu::abi::ofimsgq;

namespace {

// A Send (or Ask) with `payload` bytes after it, as the sender builds it.
std::vector<uint8_t> frame(mf::Type t, uint32_t hdr_len, uint32_t msg_len) {
  std::vector<uint8_t> b(sizeof(mf::Send) + hdr_len + msg_len, 0xA5);
  mf::Send s{};
  s.h = mf::header(t, 0x1122334455667788ull, 9, static_cast<uint32_t>(b.size()));
  s.ptag = 7;
  s.tag = 3;
  s.hdr_len = static_cast<uint8_t>(hdr_len);
  s.msg_len = static_cast<uint8_t>(msg_len);
  s.cookie = 0x1234;
  s.origin_pe = 10;
  s.src_inst = 1;
  s.dst_inst = 3;
  s.reply_len = 16;
  std::memcpy(b.data(), &s, sizeof s);
  return b;
}

mf::Parsed parse(const std::vector<uint8_t>& b) {
  mf::Send s;
  mf::Reply r;
  return mf::parse(b.data(), b.size(), s, r);
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}

}  // namespace

TEST_CASE("ofi_msgq: well-formed sends, asks and replies parse") {
  for (auto [h, m] : {std::pair{0u, 0u}, {8u, 8u}, {16u, 112u}, {128u, 0u}}) {
    auto b = frame(mf::kSend, h, m);
    mf::Send s;
    mf::Reply r;
    REQUIRE(mf::parse(b.data(), b.size(), s, r) == mf::Parsed::kSend);
    CHECK(s.h.seq == 9);
    CHECK(s.hdr_len == h);
    CHECK(s.msg_len == m);
    CHECK(s.origin_pe == 10);
  }
  CHECK(parse(frame(mf::kAsk, 0, 0)) == mf::Parsed::kAsk);
  for (uint32_t ask : {0u, 1u}) {
    mf::Reply in{};
    in.h = mf::header(mf::kReply, 5, ask ? 0 : 4, sizeof in);
    in.freed = 3;
    in.ask = ask;
    in.member_inst = 20;
    in.adopted = ask ? 7 : 0;  // a sync Ask's answer
    mf::Send s;
    mf::Reply out{};
    REQUIRE(mf::parse(&in, sizeof in, s, out) == mf::Parsed::kReply);
    CHECK(std::memcmp(&in, &out, sizeof in) == 0);
  }
  CHECK(mf::mine(frame(mf::kSend, 0, 1).data(), sizeof(mf::Header)));
}

TEST_CASE("ofi_msgq: malformed frames are refused") {
  mf::Send s;
  mf::Reply r;
  CHECK(mf::parse(nullptr, 64, s, r) == mf::Parsed::kBad);
  auto good = frame(mf::kSend, 8, 8);
  CHECK(mf::parse(good.data(), sizeof(mf::Header) - 1, s, r) == mf::Parsed::kBad);  // short
  {
    auto b = good;
    poke<uint32_t>(b, 0, 0x4F534D47);  // another kind of frame (SMSG's magic)
    CHECK(parse(b) == mf::Parsed::kBad);
    CHECK_FALSE(mf::mine(b.data(), b.size()));
  }
  {
    auto b = good;
    poke<uint16_t>(b, 4, mf::kVersion + 1);
    CHECK(parse(b) == mf::Parsed::kBad);
  }
  {
    auto b = good;
    poke<uint16_t>(b, 6, 9);  // unknown type
    CHECK(parse(b) == mf::Parsed::kBad);
  }
  {
    auto b = good;
    b.push_back(0);  // length field no longer the frame's
    CHECK(parse(b) == mf::Parsed::kBad);
  }
  {
    auto b = good;
    poke<uint8_t>(b, offsetof(mf::Send, msg_len), 9);  // payload lengths disagree with the frame
    CHECK(parse(b) == mf::Parsed::kBad);
  }
  // Payload over the largest message, even with a consistent length field.
  CHECK(parse(frame(mf::kSend, 128, 1)) == mf::Parsed::kBad);
  {
    auto b = good;
    poke<uint32_t>(b, offsetof(mf::Send, reply_len), 0);
    CHECK(parse(b) == mf::Parsed::kBad);
    poke<uint32_t>(b, offsetof(mf::Send, reply_len), nicemu::abi::ctl::kOfiAddrMax + 1);
    CHECK(parse(b) == mf::Parsed::kBad);
  }
  CHECK(parse(frame(mf::kAsk, 0, 4)) == mf::Parsed::kBad);  // an Ask carries no message
  {
    mf::Reply in{};
    in.h = mf::header(mf::kReply, 5, 0, sizeof in);
    in.ask = 2;
    CHECK(mf::parse(&in, sizeof in, s, r) == mf::Parsed::kBad);
    in.ask = 1;
    in.status = 4;  // an Ask's answer carries no error
    CHECK(mf::parse(&in, sizeof in, s, r) == mf::Parsed::kBad);
    in.status = 0;
    CHECK(mf::parse(&in, sizeof in - 1, s, r) == mf::Parsed::kBad);
    in.adopted = mf::kMaxSlots + 1;  // more than a ring holds
    CHECK(mf::parse(&in, sizeof in, s, r) == mf::Parsed::kBad);
    in.adopted = 1;
    in.ask = 0;  // slots taken over answer a sync Ask only
    in.h.seq = 4;
    CHECK(mf::parse(&in, sizeof in, s, r) == mf::Parsed::kBad);
  }
}
