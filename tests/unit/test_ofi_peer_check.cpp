// The ofi fabric's verdict on failed posts (ugni/src/ofi_peer_check.h): posts failing towards
// one peer are gathered, the peer asked once, every post handed back with the answer; a stop
// gives back what was not asked for, without an answer.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "ofi_peer_check.h"

using nicemu::ugni::PeerAnswer;
using nicemu::ugni::PeerCheck;
using namespace std::chrono_literals;

namespace {

struct Seen {
  std::mutex mu;
  std::vector<std::pair<uint64_t, int>> asks;                  // peer, count
  std::vector<std::tuple<uint64_t, PeerAnswer::State, size_t>> finished;  // peer, state, items
  size_t items() {
    std::lock_guard<std::mutex> lk(mu);
    size_t n = 0;
    for (auto& f : finished) n += std::get<2>(f);
    return n;
  }
};

bool wait_for(const std::function<bool()>& f) {
  for (int i = 0; i < 500; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_CASE("PeerCheck: a peer's failed posts share one question, each peer its own answer") {
  Seen s;
  std::atomic<int> asked{0};
  PeerCheck c(
      [&](uint64_t peer) {
        ++asked;
        PeerAnswer a;
        a.state = peer == 1 ? PeerAnswer::kGone : PeerAnswer::kLives;
        if (peer == 2) a.addr = "live";
        return a;
      },
      [&](uint64_t peer, const PeerAnswer& a, std::vector<void*>& items) {
        std::lock_guard<std::mutex> lk(s.mu);
        s.finished.emplace_back(peer, a.state, items.size());
        if (peer == 2) CHECK(a.addr == "live");
      },
      30ms);
  int x[5];
  c.suspect(1, &x[0]);
  c.suspect(1, &x[1]);
  c.suspect(2, &x[2]);
  c.suspect(1, &x[3]);
  CHECK(wait_for([&] { return s.items() == 4; }));
  CHECK(asked.load() == 2);
  CHECK(c.asked() == 2);
  {
    std::lock_guard<std::mutex> lk(s.mu);
    REQUIRE(s.finished.size() == 2);
    for (auto& [peer, state, n] : s.finished) {
      CHECK(state == (peer == 1 ? PeerAnswer::kGone : PeerAnswer::kLives));
      CHECK(n == (peer == 1 ? 3u : 1u));
    }
  }
  // Later failures are asked about again (a peer may die after it was found alive).
  c.suspect(2, &x[4]);
  CHECK(wait_for([&] { return s.items() == 5; }));
  CHECK(c.asked() == 3);
}

TEST_CASE("PeerCheck: stop gives back what waits, without an answer, and later suspects at once") {
  Seen s;
  PeerCheck c([&](uint64_t) { return PeerAnswer{PeerAnswer::kLives, "a"}; },
              [&](uint64_t peer, const PeerAnswer& a, std::vector<void*>& items) {
                std::lock_guard<std::mutex> lk(s.mu);
                s.finished.emplace_back(peer, a.state, items.size());
              },
              10s);  // never due before the stop
  int x[3];
  c.suspect(7, &x[0]);
  c.suspect(7, &x[1]);
  c.stop();
  CHECK(s.items() == 2);
  c.suspect(7, &x[2]);
  CHECK(s.items() == 3);
  CHECK(c.asked() == 0);
  std::lock_guard<std::mutex> lk(s.mu);
  for (auto& f : s.finished) CHECK(std::get<1>(f) == PeerAnswer::kDropped);
}

TEST_CASE("PeerCheck: a slow question does not hold up another peer's finished posts") {
  Seen s;
  std::atomic<bool> release{false};
  PeerCheck c(
      [&](uint64_t peer) {
        while (peer == 1 && !release.load()) std::this_thread::sleep_for(1ms);
        return PeerAnswer{PeerAnswer::kUnknown, {}};
      },
      [&](uint64_t peer, const PeerAnswer& a, std::vector<void*>& items) {
        std::lock_guard<std::mutex> lk(s.mu);
        s.finished.emplace_back(peer, a.state, items.size());
      },
      1ms);
  int x[3];
  c.suspect(1, &x[0]);
  CHECK(wait_for([&] { return c.asked() == 1; }));
  c.suspect(1, &x[1]);  // joins the question in progress
  release = true;
  CHECK(wait_for([&] { return s.items() == 2; }));
  c.suspect(3, &x[2]);
  CHECK(wait_for([&] { return s.items() == 3; }));
}
