// The ofi fabric's messages (nicemu/abi/ofi_msg.h): what parse() takes and what it drops.
// A receiver acts only on what parse() accepted; everything else is counted and dropped.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "nicemu/abi/ofi_msg.h"

namespace msg = nicemu::abi::ofimsg;

namespace {

msg::Request request(msg::Type t) {
  msg::Request q{};
  q.h = msg::header(t, 42, sizeof q);
  q.ptag = 7;
  q.cookie = 0x1234;
  q.amo_cmd = 0x008;
  q.length = 8;
  q.reply_len = 16;
  return q;
}

template <class M>
msg::Parsed parse_bytes(const M& m, size_t len = sizeof(M)) {
  msg::Request q;
  msg::Reply r;
  return msg::parse(&m, len, q, r);
}

}  // namespace

TEST_CASE("ofi_msg: well-formed requests and replies parse") {
  for (msg::Type t : {msg::kAmo, msg::kEvent, msg::kCqWrite}) {
    msg::Request in = request(t), out{};
    msg::Reply r;
    REQUIRE(msg::parse(&in, sizeof in, out, r) == msg::Parsed::kRequest);
    CHECK(std::memcmp(&in, &out, sizeof in) == 0);
  }
  msg::Reply rp{};
  rp.h = msg::header(msg::kReply, 9, sizeof rp);
  rp.status = 3;
  rp.fetched = 0xABCD;
  msg::Request q;
  msg::Reply out{};
  REQUIRE(msg::parse(&rp, sizeof rp, q, out) == msg::Parsed::kReply);
  CHECK(out.h.id == 9);
  CHECK(out.fetched == 0xABCD);
}

TEST_CASE("ofi_msg: malformed messages are refused") {
  {
    msg::Request rq;
    msg::Reply rp;
    CHECK(msg::parse(nullptr, 0, rq, rp) == msg::Parsed::kBad);
  }
  msg::Request q = request(msg::kAmo);
  CHECK(parse_bytes(q, 0) == msg::Parsed::kBad);
  CHECK(parse_bytes(q, sizeof q.h - 1) == msg::Parsed::kBad);  // shorter than a header
  CHECK(parse_bytes(q, sizeof q - 1) == msg::Parsed::kBad);    // length field says otherwise
  {
    auto m = q;
    m.h.magic ^= 1;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    auto m = q;
    m.h.version = msg::kVersion + 1;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    auto m = q;
    m.h.type = 0;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
    m.h.type = 99;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    auto m = q;
    m.reply_len = 0;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
    m.reply_len = sizeof m.reply_addr + 1;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    auto m = q;
    m.engine = 2;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    auto m = q;
    m.flags = 0x8000;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    auto m = q;
    m.length = 0;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
    m.length = 17;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    auto m = request(msg::kEvent);
    m.length = 0;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
  }
  {
    // A reply with a request's length, and a request with a reply's.
    auto m = q;
    m.h.type = msg::kReply;
    CHECK(parse_bytes(m) == msg::Parsed::kBad);
    msg::Reply r{};
    r.h = msg::header(msg::kAmo, 1, sizeof r);
    CHECK(parse_bytes(r) == msg::Parsed::kBad);
  }
  // Arbitrary bytes of every length up to a request's: never accepted unless well-formed.
  std::vector<uint8_t> junk(sizeof(msg::Request) + 8);
  uint64_t z = 0x9E3779B97F4A7C15ull;
  for (auto& b : junk) b = static_cast<uint8_t>((z = z * 6364136223846793005ull + 1) >> 56);
  for (size_t len = 0; len <= junk.size(); ++len) {
    msg::Request rq;
    msg::Reply rp;
    CHECK(msg::parse(junk.data(), len, rq, rp) == msg::Parsed::kBad);
  }
}

// SMSG over ofi (nicemu/abi/ofi_smsg.h): frames of a known type and exact size only.
#include "nicemu/abi/ofi_smsg.h"

namespace sm = nicemu::abi::ofismsg;

TEST_CASE("ofi_smsg: headers are checked against the frame") {
  sm::Note note{};
  note.h = sm::header(sm::kNote, 3, 99, sizeof note);
  sm::Header h;
  CHECK(sm::mine(&note, sizeof note));
  REQUIRE(sm::parse_header(&note, sizeof note, h));
  CHECK((h.chan == 3 && h.gen == 99 && h.type == sm::kNote));
  CHECK_FALSE(sm::parse_header(&note, sizeof note - 1, h));  // length disagrees
  note.h.length = sizeof note + 8;
  std::vector<unsigned char> longer(sizeof note + 8);
  std::memcpy(longer.data(), &note, sizeof note);
  CHECK_FALSE(sm::parse_header(longer.data(), longer.size(), h));  // a Note has one size
  note.h = sm::header(static_cast<sm::Type>(9), 0, 0, sizeof note);
  CHECK_FALSE(sm::parse_header(&note, sizeof note, h));  // unknown type
  note.h = sm::header(sm::kNote, 0, 0, sizeof note);
  note.h.version = sm::kVersion + 1;
  CHECK_FALSE(sm::parse_header(&note, sizeof note, h));
  // A message carries its payload; nothing above the largest frame.
  std::vector<unsigned char> m(sm::kMaxFrame + 1);
  sm::Msg msg{};
  msg.h = sm::header(sm::kMsg, 0, 0, static_cast<uint32_t>(sizeof msg + 100));
  std::memcpy(m.data(), &msg, sizeof msg);
  CHECK(sm::parse_header(m.data(), sizeof msg + 100, h));
  msg.h.length = static_cast<uint32_t>(m.size());
  std::memcpy(m.data(), &msg, sizeof msg);
  CHECK_FALSE(sm::parse_header(m.data(), m.size(), h));
  // A Batch holds at least one record; records are read only within the frame.
  std::vector<unsigned char> b(sizeof(sm::Header) + sm::batch_step(8) + sizeof(sm::BatchRec) + 3);
  sm::Header bh = sm::header(sm::kBatch, 0, 0, static_cast<uint32_t>(b.size()));
  std::memcpy(b.data(), &bh, sizeof bh);
  sm::BatchRec rec{7, 1, 8, 2, {}};
  std::memcpy(b.data() + sizeof bh, &rec, sizeof rec);
  rec = {8, 1, 3, 2, {}};
  std::memcpy(b.data() + sizeof bh + sm::batch_step(8), &rec, sizeof rec);
  REQUIRE(sm::parse_header(b.data(), b.size(), h));
  CHECK(h.type == sm::kBatch);
  CHECK_FALSE(sm::parse_header(b.data(), sizeof bh, h));  // no record
  sm::BatchRec got{};
  REQUIRE(sm::batch_record(b.data(), b.size(), sizeof bh, got));
  CHECK((got.seq == 7 && got.length == 8));
  REQUIRE(sm::batch_record(b.data(), b.size(), sizeof bh + sm::batch_step(got.length), got));
  CHECK((got.seq == 8 && got.length == 3));  // the last record's padding left out
  CHECK_FALSE(sm::batch_record(b.data(), b.size() - 1, sizeof bh + sm::batch_step(8), got));  // payload runs past
  CHECK_FALSE(sm::batch_record(b.data(), b.size(), b.size() - 4, got));
  CHECK_FALSE(sm::batch_record(b.data(), b.size(), b.size() + 8, got));
  // An ofi_msg request is not one of ours, nor are short buffers.
  msg::Request q = request(msg::kAmo);
  CHECK_FALSE(sm::mine(&q, sizeof q));
  CHECK_FALSE(sm::mine(&note, 3));
}
