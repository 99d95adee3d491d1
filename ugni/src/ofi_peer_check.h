// The ofi fabric's verdict on a failed post (docs/ofi-fabric.md, "Errors"). A provider error
// for a peer (its connection reset or refused) or a message without reply says only that the
// path broke; the daemons' path says more: a target CDM that died completes PEER_GONE (not
// recoverable), a network that failed TRANSIENT. PeerCheck gathers the posts that failed
// towards one peer for a moment (a dying peer fails every post in flight to it at once),
// asks once per peer whether the target CDM still lives (the caller's `ask`: OfiLookup,
// which the target's daemon answers from its CDMs' leases), and hands the posts back with the
// answer (`finish`). One worker thread, started at the first suspect; the port's progress
// thread never waits for a daemon.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nicemu::ugni {

struct PeerAnswer {
  enum State : uint8_t {
    kLives,    // a CDM of that (node, route) and our credential lives, at `addr`
    kGone,     // none there now: the target's daemon knew it died (or never published)
    kUnknown,  // nobody answered (the target's daemon or ours unreachable)
    kDropped,  // the check stopped (the port closes): no answer, no events
  };
  State state = kUnknown;
  std::string addr;  // kLives: its endpoint address as published
};

class PeerCheck {
 public:
  using Ask = std::function<PeerAnswer(uint64_t peer)>;
  using Finish = std::function<void(uint64_t peer, const PeerAnswer&, std::vector<void*>& items)>;

  // `gather`: how long after a peer's first suspect its check waits for more of them.
  PeerCheck(Ask ask, Finish finish, std::chrono::nanoseconds gather);
  ~PeerCheck();  // stop()
  PeerCheck(const PeerCheck&) = delete;
  PeerCheck& operator=(const PeerCheck&) = delete;

  // An item (a post) that failed towards `peer`: finished once that peer was asked.
  void suspect(uint64_t peer, void* item);
  // Ends the worker: items not yet asked for are finished kDropped (in this thread).
  void stop();
  uint64_t asked() const;

 private:
  void run();
  struct Batch {
    std::vector<void*> items;
    std::chrono::steady_clock::time_point due;
  };
  Ask ask_;
  Finish finish_;
  const std::chrono::nanoseconds gather_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Batch> batches_;
  bool stop_ = false;
  uint64_t asked_ = 0;
  std::thread worker_;
};

}  // namespace nicemu::ugni
