// The bookkeeping of which peers a transport flushes (nicemu/fabric/peer_schedule.h): marked
// peers are taken once, in order; deadlines come due earliest first whatever the updates;
// and a loop that flushes only the peers it schedules does exactly what flushing every
// channel on every turn did, touching far fewer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nicemu/fabric/peer_schedule.h"
#include "nicemu/fabric/reliable_channel.h"
#include "channel_delivery.h"

using namespace nicemu::fabric;
using namespace nicemu::abi::wire;

TEST_CASE("peer schedule: a marked peer is taken once, an unmarked one not at all") {
  PeerSchedule s;
  std::vector<uint32_t> got;
  s.mark(3);
  s.mark(1);
  s.mark(3);  // already marked
  CHECK(s.marked(3));
  CHECK_FALSE(s.marked(2));
  s.set_deadline(2, 1000);
  s.take_due(999);  // 2 not due yet
  s.take(got);
  CHECK(got == std::vector<uint32_t>{3, 1});
  CHECK_FALSE(s.marked(3));
  s.take(got);
  CHECK(got.empty());
  CHECK(s.next_deadline() == 1000);
  s.take_due(1000);  // now it is, and its deadline is spent
  s.take(got);
  CHECK(got == std::vector<uint32_t>{2});
  CHECK(s.next_deadline() == PeerSchedule::kNever);
  CHECK(s.deadline(2) == PeerSchedule::kNever);
  // Marked while also due: taken once.
  s.mark(5);
  s.set_deadline(5, 10);
  s.take_due(20);
  s.take(got);
  CHECK(got == std::vector<uint32_t>{5});
}

TEST_CASE("peer schedule: deadlines come due in order through updates and removals") {
  std::mt19937_64 rng(7);
  PeerSchedule s;
  std::map<uint32_t, uint64_t> model;  // slot -> deadline
  uint64_t now = 0;
  for (int step = 0; step < 20000; ++step) {
    const uint32_t id = static_cast<uint32_t>(rng() % 300);
    switch (rng() % 4) {
      case 0:
      case 1: {  // set or move (earlier or later)
        const uint64_t at = now + rng() % 5000;
        s.set_deadline(id, at);
        model[id] = at;
        break;
      }
      case 2:  // none any more
        s.set_deadline(id, PeerSchedule::kNever);
        model.erase(id);
        break;
      case 3: {  // time passes: exactly the due ones, earliest first
        now += rng() % 800;
        s.take_due(now);
        std::vector<uint32_t> got;
        s.take(got);
        std::vector<std::pair<uint64_t, uint32_t>> want;
        for (auto it = model.begin(); it != model.end();) {
          if (it->second <= now) {
            want.emplace_back(it->second, it->first);
            it = model.erase(it);
          } else {
            ++it;
          }
        }
        REQUIRE(got.size() == want.size());
        std::sort(want.begin(), want.end());
        for (size_t i = 0; i < got.size(); ++i) CHECK(model.count(got[i]) == 0);
        // Taken earliest first (ties in any order).
        std::vector<uint32_t> sorted_ids;
        for (auto& w : want) sorted_ids.push_back(w.second);
        std::vector<uint32_t> a = got, b = sorted_ids;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        CHECK(a == b);
        break;
      }
    }
    uint64_t earliest = PeerSchedule::kNever;
    for (auto& [k, v] : model) earliest = std::min(earliest, v);
    REQUIRE(s.next_deadline() == earliest);
    REQUIRE(s.scheduled() == model.size());
  }
}

TEST_CASE("peer schedule: take_due marks in deadline order") {
  PeerSchedule s;
  const uint64_t at[] = {50, 10, 40, 20, 30};
  for (uint32_t i = 0; i < 5; ++i) s.set_deadline(i, at[i]);
  s.take_due(100);
  std::vector<uint32_t> got;
  s.take(got);
  CHECK(got == std::vector<uint32_t>{1, 3, 4, 2, 0});
}

namespace {

// One end of a channel over a lossy, delaying link (packets as records + the header's ack
// state, as the daemon's packets carry).
struct Packet {
  uint64_t at;
  uint32_t ack, base;
  uint64_t sack;
  uint16_t count;
  std::vector<uint8_t> records;
};

struct End {
  std::vector<std::string> got;
  ReliableChannel ch;
  uint64_t fills = 0;
  explicit End(ChannelConfig c)
      : ch(c, [this](RecordType, const uint8_t* d, size_t n) { got.emplace_back(reinterpret_cast<const char*>(d), n); }) {}
};

struct Link {
  std::mt19937_64 rng;
  double loss;
  std::deque<Packet> q;
  void send(uint64_t now, Packet p) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < loss) return;
    p.at = now + 200 + rng() % 300;
    q.push_back(std::move(p));
    std::stable_sort(q.begin(), q.end(), [](const Packet& a, const Packet& b) { return a.at < b.at; });
  }
};

// fill() until nothing more, as the daemon's flush does; true if anything was sent.
void pump(End& e, Link& l, uint64_t now) {
  uint8_t buf[kMaxPacket];
  ++e.fills;
  for (;;) {
    uint16_t count = 0;
    size_t used = e.ch.fill(now, buf, kMaxPacket - sizeof(PacketHeader) - kMacBytes, count);
    if (count == 0 && !e.ch.ack_owed()) return;
    l.send(now, Packet{0, e.ch.ack(), e.ch.send_base(), e.ch.sack(), count, std::vector<uint8_t>(buf, buf + used)});
    e.ch.ack_sent();
    if (count == 0) return;
  }
}

// Packets due at `now` into `e`; true if any arrived.
bool take(End& e, Link& l, uint64_t now) {
  bool any = false;
  while (!l.q.empty() && l.q.front().at <= now) {
    Packet p = std::move(l.q.front());
    l.q.pop_front();
    any = true;
    nicemu::fabric::test::deliver(e.ch, p, now);
  }
  return any;
}

struct HubRun {
  std::vector<ChannelStats> hub_stats;
  std::vector<std::vector<std::string>> hub_got, leaf_got;
  std::vector<uint64_t> hub_fills;
  uint64_t total_fills = 0;
};

// A hub daemon with a channel to each of `k` leaves; leaves 0..k/2 exchange bursts of
// messages with it over lossy links, the others never talk. The hub flushes either every
// channel on every turn (as before) or only those its PeerSchedule gives it.
HubRun run_hub(bool scheduled, int k, uint64_t seed) {
  ChannelConfig cfg;
  cfg.idle_release_us = 3000;  // idle releases happen within the run
  std::vector<std::unique_ptr<End>> hub, leaf;
  std::vector<Link> up, down;  // leaf -> hub, hub -> leaf
  for (int i = 0; i < k; ++i) {
    hub.push_back(std::make_unique<End>(cfg));
    leaf.push_back(std::make_unique<End>(cfg));
    up.push_back(Link{std::mt19937_64(seed * 100 + i), 0.05, {}});
    down.push_back(Link{std::mt19937_64(seed * 100 + 50 + i), 0.05, {}});
  }
  PeerSchedule sched;
  std::vector<uint32_t> work;
  std::mt19937_64 rng(seed);
  uint64_t now = 0;
  for (int turn = 0; turn < 8000; ++turn, now += 50) {
    // Bursts: a talking leaf and the hub each send a message now and then; quiet spells
    // long enough for idle releases.
    const bool burst = (turn / 1000) % 2 == 0;
    for (int i = 0; i < k / 2; ++i) {
      if (burst && rng() % 4 == 0) {
        std::string m = "to hub " + std::to_string(turn) + "/" + std::to_string(i) + std::string(rng() % 3000, 'x');
        leaf[i]->ch.send(RecordType::kCtl, m.data(), m.size());
      }
      if (burst && rng() % 5 == 0) {
        std::string m = "to leaf " + std::to_string(turn) + "/" + std::to_string(i) + std::string(rng() % 200, 'y');
        if (hub[i]->ch.send(RecordType::kCtl, m.data(), m.size())) sched.mark(i);
      }
    }
    for (int i = 0; i < k; ++i) {
      if (take(*hub[i], up[i], now)) sched.mark(i);
      take(*leaf[i], down[i], now);
      pump(*leaf[i], up[i], now);
    }
    if (scheduled) {
      sched.take_due(now);
      sched.take(work);
      for (uint32_t i : work) {
        pump(*hub[i], down[i], now);
        sched.set_deadline(i, hub[i]->ch.next_deadline());
      }
    } else {
      for (int i = 0; i < k; ++i) pump(*hub[i], down[i], now);
    }
  }
  HubRun r;
  for (int i = 0; i < k; ++i) {
    r.hub_stats.push_back(hub[i]->ch.stats());
    r.hub_got.push_back(hub[i]->got);
    r.leaf_got.push_back(leaf[i]->got);
    r.hub_fills.push_back(hub[i]->fills);
    r.total_fills += hub[i]->fills;
  }
  return r;
}

}  // namespace

TEST_CASE("peer schedule: flushing only scheduled channels does what flushing all did") {
  for (uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    const int k = 16;
    HubRun all = run_hub(false, k, seed), some = run_hub(true, k, seed);
    uint64_t retransmits = 0, releases = 0, delivered = 0;
    for (int i = 0; i < k; ++i) {
      CAPTURE(i);
      // Same messages, same order, same counts: retransmissions, duplicates, idle releases.
      CHECK(some.hub_got[i] == all.hub_got[i]);
      CHECK(some.leaf_got[i] == all.leaf_got[i]);
      const ChannelStats &a = all.hub_stats[i], &b = some.hub_stats[i];
      CHECK(b.messages_sent == a.messages_sent);
      CHECK(b.records_sent == a.records_sent);
      CHECK(b.retransmits == a.retransmits);
      CHECK(b.duplicates == a.duplicates);
      CHECK(b.out_of_window == a.out_of_window);
      CHECK(b.timeouts == a.timeouts);
      CHECK(b.releases == a.releases);
      CHECK(b.downs == a.downs);
      retransmits += b.retransmits;
      releases += b.releases;
      delivered += b.messages_received;
      // A channel that never had anything to do is never touched.
      if (i >= k / 2) CHECK(some.hub_fills[i] == 0);
    }
    // The run exercised what it compares.
    CHECK(delivered > 1000);
    CHECK(retransmits > 0);
    CHECK(releases > 0);
    CHECK(some.total_fills * 4 < all.total_fills);
  }
}
