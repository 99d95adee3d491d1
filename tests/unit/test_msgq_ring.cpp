// MSGQ receive ring and segment layout on plain memory: order per receiver, flow control,
// recycling, voiding entries of departed receivers and slots of dead writers, garbage in the
// ring, GNI_MsgqSize, producers and consumers running concurrently on threads, and a consumer
// whose scan gives up on a moving ring saying so (busy) instead of "empty".
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gni_pub.h"
#include "nicemu/abi/msgq_ring.h"

namespace mq = nicemu::abi::msgq;

namespace {

struct Ring {
  Ring(uint32_t capacity, uint32_t max_msg) {
    size_t bytes = sizeof(mq::RingCtl) + size_t{capacity} * mq::slot_size(max_msg);
    mem = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    std::memset(mem, 0xAB, bytes);  // init() must not depend on zeroed memory
    v = mq::RingView::at(mem, capacity, mq::slot_size(max_msg));
    v.init();
  }
  ~Ring() { std::free(mem); }
  char* mem;
  mq::RingView v;
};

mq::EntryHeader to(uint16_t member, uint32_t inst, uint32_t src = 7) {
  mq::EntryHeader e{};
  e.dst_member = member;
  e.dst_inst = inst;
  e.dst_gen = 1;
  e.src_inst = src;
  e.src_pe = 42;
  return e;
}

auto for_member(uint16_t m) {
  return [m](const mq::EntryHeader& e) { return e.dst_member == m; };
}
auto all_live = [](const mq::EntryHeader&) { return true; };
using Take = mq::RingView::Take;

// Takes one message for member m; returns its first payload word, -1 if the ring holds
// nothing for m, -2 if the scan gave up (busy).
long take_one(const mq::RingView& v, uint16_t m, mq::EntryHeader* out = nullptr) {
  alignas(8) char buf[192];
  mq::EntryHeader e;
  const Take t = v.take(for_member(m), e, buf);
  if (t == Take::kEmpty) return -1;
  if (t == Take::kBusy) return -2;
  if (out) *out = e;
  uint32_t x;
  std::memcpy(&x, buf, 4);
  return long(x);
}

}  // namespace

TEST_CASE("segment layout: sizes follow the attributes, GNI_MsgqSize reports them") {
  mq::Attrs charm{128, 1, 1, 2, 8, 0, 16, 0};  // what Charm++'s gni layer asks for
  mq::Layout l = mq::segment_layout(charm);
  CHECK(l.ro_size == 2 * mq::kPageSize);
  CHECK(l.slot_size == 192);
  CHECK(l.total_size == 3 * mq::kPageSize);
  gni_msgq_attr_t a{128, 1, 1, 2, 8, 0, 16};
  uint32_t size = 0;
  REQUIRE(GNI_MsgqSize(&a, &size) == GNI_RC_SUCCESS);
  CHECK(size == l.total_size);

  // Memory grows with the connected nodes, not with the instances behind them.
  gni_msgq_attr_t big{64, 64, 1, 1024, 32, GNI_MSGQ_MODE_BLOCKING, 16};
  REQUIRE(GNI_MsgqSize(&big, &size) == GNI_RC_SUCCESS);
  CHECK(size == mq::segment_layout(mq::Attrs{64, 64, 1, 1024, 32, 1, 16, 0}).total_size);
  CHECK(size > 1024u * 64 * 128);
  CHECK(size < 1024u * 64 * 128 + 2 * 1024 * 1024);
  gni_msgq_attr_t more_insts = big;
  more_insts.nloc_insts = 64;
  uint32_t size2 = 0;
  REQUIRE(GNI_MsgqSize(&more_insts, &size2) == GNI_RC_SUCCESS);
  CHECK(size2 - size < 8192);  // 32 more instances: a few KiB of tables

  gni_msgq_attr_t bad = a;
  bad.max_msg_sz = GNI_MSGQ_MSG_SZ_MAX + 1;
  CHECK(GNI_MsgqSize(&bad, &size) == GNI_RC_INVALID_PARAM);
  bad = a;
  bad.nloc_insts = GNI_MSGQ_NODE_INSTS_MAX + 1;
  CHECK(GNI_MsgqSize(&bad, &size) == GNI_RC_INVALID_PARAM);
  bad = a;
  bad.smsg_q_sz = 0;
  CHECK(GNI_MsgqSize(&bad, &size) == GNI_RC_INVALID_PARAM);
  bad = a;
  bad.modes = 0x80;
  CHECK(GNI_MsgqSize(&bad, &size) == GNI_RC_INVALID_PARAM);
  bad = a;
  bad.num_msgq_eps = 65536;
  bad.smsg_q_sz = 65536;  // 12 TiB: refused, not truncated into 32 bits
  CHECK(GNI_MsgqSize(&bad, &size) == GNI_RC_INVALID_PARAM);
  CHECK(GNI_MsgqSize(nullptr, &size) == GNI_RC_INVALID_PARAM);
  CHECK(GNI_MsgqSize(&a, nullptr) == GNI_RC_INVALID_PARAM);
}

TEST_CASE("ring: in order per receiver, full at capacity, room again after take and recycle") {
  Ring r(4, 32);
  for (uint32_t i = 0; i < 4; ++i)
    REQUIRE(r.v.push(to(0, 100), &i, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  uint32_t x = 99;
  CHECK(r.v.push(to(0, 100), &x, 4, nullptr, 0, 1) == mq::RingView::Push::kFull);
  CHECK(take_one(r.v, 0) == 0);
  // Taken but not recycled: still no room (recycling is what hands slots back).
  CHECK(r.v.push(to(0, 100), &x, 4, nullptr, 0, 1) == mq::RingView::Push::kFull);
  CHECK(r.v.recycle(all_live, mq::claimer_unknown) == 1);
  CHECK(r.v.push(to(0, 100), &x, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  CHECK(take_one(r.v, 0) == 1);
  CHECK(take_one(r.v, 0) == 2);
  CHECK(take_one(r.v, 0) == 3);
  CHECK(take_one(r.v, 0) == 99);
  CHECK(take_one(r.v, 0) == -1);
  CHECK(r.v.recycle(all_live, mq::claimer_unknown) == 4);
}

TEST_CASE("ring: two receivers each take only their own entries, header and message joined, across laps") {
  Ring r(3, 128);
  for (uint32_t i = 0; i < 300; ++i) {
    uint16_t m = uint16_t(i % 2);
    uint32_t hdr = i;
    char msg[100];
    std::memset(msg, int(i & 0x7F), sizeof msg);
    mq::EntryHeader e = to(m, 100 + m);
    e.tag = uint8_t(i);
    REQUIRE(r.v.push(e, &hdr, 4, msg, sizeof msg, 1) == mq::RingView::Push::kOk);
    alignas(8) char buf[192];
    mq::EntryHeader got;
    CHECK(r.v.take(for_member(uint16_t(1 - m)), got, buf) == Take::kEmpty);
    REQUIRE(r.v.take(for_member(m), got, buf) == Take::kTaken);
    CHECK(got.length == 104);
    CHECK(got.tag == uint8_t(i));
    CHECK(got.src_inst == 7);
    uint32_t h;
    std::memcpy(&h, buf, 4);
    CHECK(h == i);
    CHECK(buf[4] == char(i & 0x7F));
    CHECK(buf[103] == char(i & 0x7F));
    r.v.recycle(all_live, mq::claimer_unknown);
  }
}

TEST_CASE("ring: a receiver behind another does not block it; recycling waits for the slow one") {
  Ring r(4, 16);
  uint32_t v0 = 0, v1 = 1;
  REQUIRE(r.v.push(to(0, 100), &v0, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);  // for the slow one
  REQUIRE(r.v.push(to(1, 101), &v1, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  CHECK(take_one(r.v, 1) == 1);
  CHECK(r.v.recycle(all_live, mq::claimer_unknown) == 0);  // head holds member 0's entry
  CHECK(take_one(r.v, 0) == 0);
  CHECK(r.v.recycle(all_live, mq::claimer_unknown) == 2);
}

TEST_CASE("ring: entries of a departed receiver are voided so they cannot block the ring") {
  Ring r(2, 16);
  uint32_t v = 5;
  REQUIRE(r.v.push(to(3, 103), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  REQUIRE(r.v.push(to(3, 103), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  CHECK(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kFull);
  auto member3_gone = [](const mq::EntryHeader& e) { return e.dst_member != 3; };
  CHECK(r.v.recycle(member3_gone, mq::claimer_unknown) == 2);
  CHECK(r.v.ctl->voided.load() == 2);
  CHECK(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  CHECK(take_one(r.v, 3) == -1);
  CHECK(take_one(r.v, 0) == 5);
}

TEST_CASE("ring: a writer that died between claim and publish is skipped, then voided") {
  Ring r(4, 16);
  // Simulate the dead writer: position 0 claimed by pid 4242, tail never moved.
  r.v.slot(0)->word.store(mq::slot_word(0, 4242, mq::kClaimed));
  uint32_t v = 8;
  REQUIRE(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);  // helps tail past it
  CHECK(r.v.ctl->tail.load() == 2);
  CHECK(take_one(r.v, 0) == 8);  // delivery does not wait for the dead slot
  CHECK(r.v.recycle(all_live, mq::claimer_unknown) == 0);  // but recycling must
  CHECK(r.v.recycle(all_live, [](uint32_t pid) { return pid == 4242; }) == 2);
  CHECK(r.v.ctl->voided.load() == 1);
  CHECK(r.v.ctl->head.load() == 2);
  for (uint32_t i = 0; i < 4; ++i) CHECK(r.v.push(to(0, 100), &i, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
}

TEST_CASE("ring: a writer that died after claim but before moving tail leaves no hole once voided") {
  Ring r(2, 16);
  r.v.slot(0)->word.store(mq::slot_word(0, 4242, mq::kClaimed));  // tail still 0
  CHECK(r.v.recycle(all_live, [](uint32_t) { return true; }) == 1);
  CHECK(r.v.ctl->head.load() == 1);
  CHECK(r.v.ctl->tail.load() >= 1);  // recycling helped tail past the voided slot
  uint32_t v = 3;
  CHECK(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  CHECK(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  CHECK(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kFull);
}

TEST_CASE("ring: garbage written into the ring never hangs or overruns anybody") {
  Ring r(8, 64);
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (int round = 0; round < 200; ++round) {
    for (uint32_t i = 0; i < 8; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      mq::Slot* s = r.v.slot(i);
      s->word.store(round % 3 == 0 ? mq::slot_word(seed >> 20, seed, mq::SlotState(seed & 3)) : seed);
      std::memset(&s->entry, int(seed >> 56), sizeof s->entry);
    }
    r.v.ctl->tail.store(seed >> 7);
    r.v.ctl->head.store(round % 2 ? seed >> 9 : seed >> 7);
    uint32_t v = 1;
    auto rc = r.v.push(to(0, 100), &v, 4, nullptr, 0, 1);
    CHECK((rc == mq::RingView::Push::kOk || rc == mq::RingView::Push::kFull || rc == mq::RingView::Push::kCorrupt));
    alignas(8) char buf[192];
    mq::EntryHeader e;
    for (int k = 0; k < 10; ++k) {
      const Take t = r.v.take([](const mq::EntryHeader&) { return true; }, e, buf);
      CHECK((t == Take::kTaken || t == Take::kEmpty || t == Take::kBusy));
      if (t != Take::kTaken) break;
    }
    r.v.recycle([](const mq::EntryHeader& x) { return x.dst_member % 2 == 0; }, [](uint32_t p) { return p % 2; });
  }
}

TEST_CASE("ring: concurrent producers and receivers: exactly once, in order per sender") {
  constexpr uint32_t kProducers = 3, kReceivers = 2, kPerPair = 3000;
  Ring r(8, 32);
  std::vector<std::thread> threads;
  std::atomic<uint32_t> full_count{0};
  for (uint32_t p = 0; p < kProducers; ++p)
    threads.emplace_back([&, p] {
      for (uint32_t n = 0; n < kPerPair; ++n)
        for (uint16_t m = 0; m < kReceivers; ++m) {
          uint32_t payload[2] = {p, n};
          while (r.v.push(to(m, 100 + m, p), payload, sizeof payload, nullptr, 0, 1) != mq::RingView::Push::kOk) {
            full_count.fetch_add(1, std::memory_order_relaxed);
            r.v.recycle(all_live, mq::claimer_unknown);
            std::this_thread::yield();
          }
        }
    });
  std::vector<std::vector<uint32_t>> next(kReceivers, std::vector<uint32_t>(kProducers, 0));
  std::atomic<bool> ok{true};
  std::mutex failure_mutex;
  std::string failure;  // the first violation, for the failure message
  for (uint16_t m = 0; m < kReceivers; ++m)
    threads.emplace_back([&, m] {
      uint32_t got = 0;
      while (got < kProducers * kPerPair) {
        alignas(8) char buf[192];
        mq::EntryHeader e;
        if (r.v.take(for_member(m), e, buf) != Take::kTaken) {
          r.v.recycle(all_live, mq::claimer_unknown);
          std::this_thread::yield();
          continue;
        }
        uint32_t payload[2];
        std::memcpy(payload, buf, sizeof payload);
        const char* what = nullptr;
        if (e.dst_member != m)
          what = "entry for another member";
        else if (e.src_inst != payload[0] || payload[0] >= kProducers || e.length != 8)
          what = "garbled entry";
        else if (payload[1] < next[m][payload[0]])
          what = "duplicate (or older) message";
        else if (payload[1] > next[m][payload[0]])
          what = "message skipped or taken out of order";
        if (what) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (ok.exchange(false))
            failure = std::string(what) + ": receiver " + std::to_string(m) + ", sender " +
                      std::to_string(payload[0]) + ", expected #" +
                      std::to_string(payload[0] < kProducers ? next[m][payload[0]] : 0) + ", got #" +
                      std::to_string(payload[1]);
        }
        if (e.dst_member == m && payload[0] < kProducers) next[m][payload[0]] = payload[1] + 1;
        ++got;
        r.v.recycle(all_live, mq::claimer_unknown);
      }
    });
  for (auto& t : threads) t.join();
  INFO(failure);
  CHECK(ok.load());
  for (uint16_t m = 0; m < kReceivers; ++m)
    for (uint32_t p = 0; p < kProducers; ++p) CHECK(next[m][p] == kPerPair);
  CHECK(take_one(r.v, 0) == -1);
  CHECK(take_one(r.v, 1) == -1);
  MESSAGE("ring full " << full_count.load() << " times");
}

// Another receiver of the node takes its own entries and recycles while our scan goes on:
// each time it moves head past the slot the scan reaches next, the scan starts over from the
// new head. After RingView::kTakeScans of those, take() gives up. It must say so (busy), not
// report the ring empty: the entry for us is still there, and a receiver told "empty" goes to
// sleep on its futex with a message waiting (the sender's wakeup came before it slept).
TEST_CASE("ring: a scan that keeps being overtaken by recycling reports busy, not empty") {
  constexpr uint32_t kOthers = 2 * mq::RingView::kTakeScans;  // two per scan
  Ring r(16, 16);
  for (uint32_t i = 0; i < kOthers; ++i)
    REQUIRE(r.v.push(to(1, 101), &i, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  uint32_t mine = 4242;
  REQUIRE(r.v.push(to(0, 100), &mine, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);  // at kOthers

  // Runs inside our scan, when it looks at member 1's entry at head: member 1 takes that one
  // and the next and recycles both, so the slot the scan looks at next is a lap ahead.
  uint32_t overtaken = 0, others_taken = 0;
  bool hook = true;
  auto mine_moving = [&](const mq::EntryHeader& e) {
    if (e.dst_member == 1 && hook) {
      ++overtaken;
      for (int k = 0; k < 2; ++k)
        if (take_one(r.v, 1) >= 0) ++others_taken;
      r.v.recycle(all_live, mq::claimer_unknown);
    }
    return e.dst_member == 0;
  };
  alignas(8) char buf[192];
  mq::EntryHeader e;
  CHECK(r.v.take(mine_moving, e, buf) == Take::kBusy);
  CHECK(overtaken == mq::RingView::kTakeScans);
  CHECK(others_taken == kOthers);
  CHECK(r.v.ctl->head.load() == kOthers);  // only our entry left, at head

  // Looked at again, the ring is still: the entry is taken.
  hook = false;
  std::memset(buf, 0, sizeof buf);
  REQUIRE(r.v.take(mine_moving, e, buf) == Take::kTaken);
  uint32_t x;
  std::memcpy(&x, buf, 4);
  CHECK(x == 4242);
  CHECK(e.dst_member == 0);
  CHECK(take_one(r.v, 0) == -1);
  CHECK(take_one(r.v, 1) == -1);
}

// A recycler frees the slot at head for the next lap, then moves head: a scan that comes in
// between (the recycler preempted) sees head's slot a lap ahead with head unmoved. It moves
// head itself, as recycle() does, and finds the entry behind it.
TEST_CASE("ring: a recycler stopped between freeing the head slot and moving head hides nothing") {
  Ring r(4, 16);
  uint32_t v0 = 0, v1 = 7;
  REQUIRE(r.v.push(to(1, 101), &v0, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  REQUIRE(r.v.push(to(0, 100), &v1, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  CHECK(take_one(r.v, 1) == 0);
  r.v.slot(0)->word.store(mq::slot_word(4, 0, mq::kFree));  // the recycler's first CAS only
  CHECK(r.v.ctl->head.load() == 0);
  CHECK(take_one(r.v, 0) == 7);
  CHECK(r.v.ctl->head.load() == 1);
  CHECK(take_one(r.v, 0) == -1);
  CHECK(r.v.recycle(all_live, mq::claimer_unknown) == 1);
  CHECK(r.v.ctl->head.load() == 2);
  for (uint32_t i = 0; i < 4; ++i) CHECK(r.v.push(to(0, 100), &i, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  for (uint32_t i = 0; i < 4; ++i) CHECK(take_one(r.v, 0) == long(i));
}

TEST_CASE("ring: a slot at a position no honest ring has, head not moving, is garbage: empty, not busy") {
  Ring r(4, 16);
  uint32_t v = 3;
  REQUIRE(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  REQUIRE(r.v.push(to(0, 100), &v, 4, nullptr, 0, 1) == mq::RingView::Push::kOk);
  // Position 1's slot claims to be published for position 1 + 3 laps.
  r.v.slot(1)->word.store(mq::slot_word(1 + 3 * 4, 1, mq::kPublished));
  CHECK(take_one(r.v, 0) == 3);   // position 0 is fine
  CHECK(take_one(r.v, 0) == -1);  // then nothing that can be delivered
  CHECK(r.v.ctl->head.load() == 0);
}

// The same on threads: while an entry for member 0 waits in the ring, its take() never says
// "empty", however fast member 1's traffic moves the ring around it.
TEST_CASE("ring: concurrent traffic of another receiver never makes a waiting entry look absent") {
  constexpr uint32_t kRounds = 3000;
  Ring r(4, 16);
  std::atomic<bool> stop{false};
  std::thread other([&] {
    alignas(8) char buf[192];
    mq::EntryHeader e;
    for (uint32_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
      if (r.v.push(to(1, 101), &n, 4, nullptr, 0, 1) != mq::RingView::Push::kOk)
        r.v.recycle(all_live, mq::claimer_unknown);
      (void)r.v.take(for_member(1), e, buf);
      r.v.recycle(all_live, mq::claimer_unknown);
    }
  });
  uint32_t empty = 0, busy = 0, wrong = 0, lost = 0;
  for (uint32_t round = 0; round < kRounds; ++round) {
    while (r.v.push(to(0, 100), &round, 4, nullptr, 0, 1) != mq::RingView::Push::kOk) {
      r.v.recycle(all_live, mq::claimer_unknown);
      std::this_thread::yield();
    }
    alignas(8) char buf[192];
    mq::EntryHeader e;
    bool taken = false;
    for (uint32_t tries = 0; tries < 1000000 && !taken; ++tries) {
      const Take t = r.v.take(for_member(0), e, buf);
      if (t == Take::kEmpty) ++empty;
      if (t == Take::kBusy) ++busy;
      taken = t == Take::kTaken;
    }
    if (!taken) {
      ++lost;
      break;
    }
    uint32_t x;
    std::memcpy(&x, buf, 4);
    if (x != round) ++wrong;
    r.v.recycle(all_live, mq::claimer_unknown);
  }
  stop = true;
  other.join();
  CHECK(empty == 0);
  CHECK(wrong == 0);
  CHECK(lost == 0);
  MESSAGE("take() gave up " << busy << " times in " << kRounds << " rounds");
}
