// SMSG channel on plain memory: credits, in-order delivery, tags, wrap-around, size limits,
// and a sender and receiver running concurrently on two threads.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nicemu/abi/smsg_channel.h"

using namespace nicemu;
using namespace nicemu::abi;

namespace {
struct Channel {
  Channel(uint32_t credits, uint32_t max_size) : mem(abi::mbox_bytes(credits, max_size) + 64) {
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) & ~uintptr_t{63});
    v.ctl = new (base) abi::MboxCtl{};
    v.slots = base + sizeof(abi::MboxCtl);
    v.credits = credits;
    v.slot_size = abi::mbox_slot_size(max_size);
    v.max_size = max_size;
  }
  std::vector<char> mem;
  MailboxView v;
};
}  // namespace

TEST_CASE("credits: at most `credits` unreleased messages, returned by release") {
  Channel c(4, 64);
  uint32_t x = 0;
  for (uint32_t i = 0; i < 4; ++i) CHECK(smsg_send(c.v, &i, 4, nullptr, 0, 1) == SendResult::kSent);
  CHECK(smsg_send(c.v, &x, 4, nullptr, 0, 1) == SendResult::kNoCredit);
  REQUIRE(smsg_peek(c.v));
  smsg_release(c.v);
  CHECK(smsg_send(c.v, &x, 4, nullptr, 0, 1) == SendResult::kSent);
  CHECK(smsg_send(c.v, &x, 4, nullptr, 0, 1) == SendResult::kNoCredit);
}

TEST_CASE("messages arrive in order with their tags, header then data, across wrap-around") {
  Channel c(3, 32);
  for (uint32_t i = 0; i < 100; ++i) {
    uint32_t hdr = i;
    char data[8];
    std::memset(data, int(i), sizeof data);
    REQUIRE(smsg_send(c.v, &hdr, sizeof hdr, data, sizeof data, uint8_t(i)) == SendResult::kSent);
    abi::MboxSlotHeader* s = smsg_peek(c.v);
    REQUIRE(s);
    CHECK(s->tag == uint8_t(i));
    CHECK(s->length == 12);
    const char* p = reinterpret_cast<const char*>(s + 1);
    uint32_t got;
    std::memcpy(&got, p, 4);
    CHECK(got == i);
    CHECK(p[4] == char(i));
    CHECK(reinterpret_cast<uintptr_t>(p) % 8 == 0);
    smsg_release(c.v);
    CHECK(smsg_peek(c.v) == nullptr);
  }
}

TEST_CASE("a message larger than the slot is refused without consuming a credit") {
  Channel c(2, 16);
  constexpr uint32_t cap = abi::smsg_capacity(16);
  static char big[cap + 1] = {};
  CHECK(smsg_send(c.v, big, 8, big + 8, cap - 7, 0) == SendResult::kTooBig);
  CHECK(smsg_send(c.v, big, 8, big + 8, cap - 8, 0) == SendResult::kSent);
  CHECK(smsg_send(c.v, big, 16, nullptr, 0, 0) == SendResult::kSent);
  CHECK(smsg_send(c.v, big, 1, nullptr, 0, 0) == SendResult::kNoCredit);
}

TEST_CASE("what the API lets into a slot: msg_maxsize, plus a short header for tagged sends") {
  // GNI_SmsgSend: header + data <= msg_maxsize.
  CHECK(abi::smsg_fits(256, 4, 252, false));
  CHECK_FALSE(abi::smsg_fits(256, 4, 253, false));
  // GNI_SmsgSendWTag: also data <= msg_maxsize under a header of up to kSmsgTagHeaderRoom
  // (libfabric's gni provider: a 32-byte header with up to msg_maxsize - 1 bytes of data).
  CHECK(abi::smsg_fits(16384, 32, 16383, true));
  CHECK(abi::smsg_fits(256, abi::kSmsgTagHeaderRoom, 256, true));
  CHECK_FALSE(abi::smsg_fits(256, abi::kSmsgTagHeaderRoom + 1, 256, true));
  CHECK_FALSE(abi::smsg_fits(256, 4, 257, true));
}

TEST_CASE("a full-capacity message fills its slot and leaves the next one intact") {
  Channel c(2, 100);
  constexpr uint32_t cap = abi::smsg_capacity(100);
  std::vector<char> hdr(abi::kSmsgTagHeaderRoom, 'h'), data(100, 'd');
  uint32_t next = 0xC0FFEE;
  REQUIRE(smsg_send(c.v, hdr.data(), uint32_t(hdr.size()), data.data(), uint32_t(data.size()), 7) == SendResult::kSent);
  REQUIRE(smsg_send(c.v, &next, 4, nullptr, 0, 8) == SendResult::kSent);
  abi::MboxSlotHeader* s = smsg_peek(c.v);
  REQUIRE(s);
  CHECK(s->length == cap);
  const char* p = reinterpret_cast<const char*>(s + 1);
  CHECK(std::string(p, hdr.size()) == std::string(hdr.size(), 'h'));
  CHECK(std::string(p + hdr.size(), data.size()) == std::string(data.size(), 'd'));
  smsg_release(c.v);
  s = smsg_peek(c.v);
  REQUIRE(s);
  uint32_t got = 0;
  std::memcpy(&got, s + 1, 4);
  CHECK(got == next);
  CHECK(s->tag == 8);
}

TEST_CASE("concurrent sender and receiver: every message once, in order") {
  Channel c(8, 64);
  constexpr uint32_t kN = 200000;
  std::thread sender([&] {
    for (uint32_t i = 0; i < kN;) {
      if (smsg_send(c.v, &i, 4, nullptr, 0, 0) == SendResult::kSent) ++i;
    }
  });
  for (uint32_t i = 0; i < kN;) {
    abi::MboxSlotHeader* s = smsg_peek(c.v);
    if (!s) continue;
    uint32_t got;
    std::memcpy(&got, s + 1, 4);
    REQUIRE(got == i);
    smsg_release(c.v);
    ++i;
  }
  sender.join();
}
