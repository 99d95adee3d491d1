// A BTE channel: one worker thread with its queue of RDMA requests, executed one at a time
// in queue order. The engine routes all outstanding requests of one EP to one channel, so
// they run in posting order (GNI_RDMAMODE_FENCE and IN_ORDER delivery hold trivially).
// Data moves in chunks through the channel's bounce buffer: process_vm_readv from the
// source process, process_vm_writev into the destination, both sides re-validated before
// every chunk. Idle channels help with the chunks of a large transfer, so one big post
// uses every channel. When the transfer ends, the completer posts the CQEs.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "nicemu/abi/bte_ring.h"
#include "nicemu/daemon/bte/bte_proxy.h"
#include "nicemu/daemon/bte/bte_regions.h"

namespace nicemu::daemon {

// The submission ring of one CDM of this node (read by the engine's dispatcher).
struct BteSource {
  std::shared_ptr<MappedRegion> region;
  abi::BteRingView view;
  uint64_t head = 0;                  // the dispatcher's private consumer index
  int doorbell = -1;                  // eventfd the CDM's library writes when `armed`
  std::atomic<uint32_t> inflight{0};  // taken from the ring, not completed yet
  ~BteSource();
};

// One request, copied out of the ring (untrusted until validated), or a post the engine
// runs for a CDM that may not reach its target itself (`proxy`, bte_proxy.h; no ring).
struct BteJob {
  abi::BteRequest req;
  std::shared_ptr<BteSource> source;
  std::shared_ptr<ProxyPost> proxy;
  std::pair<uint64_t, uint32_t> route;  // (attach id, EP id): the ordering domain
};

struct BteCounters {
  std::atomic<uint64_t> requests{0}, bytes{0}, errors{0}, dropped{0}, chunks{0}, helped_chunks{0}, inline_jobs{0},
      proxied{0};
};

class BteChannel;
struct BteTransfer;

// What the channels share; owned by the engine.
struct BteShared {
  BteShared(RegionDirectory& r, uint64_t chunk);
  RegionDirectory& regions;
  const uint64_t chunk_bytes;
  BteCounters counters;
  std::mutex mu;                    // queues, help board, routes, stopping
  std::vector<BteTransfer*> help;   // large transfers whose remaining chunks anyone may take
  std::vector<std::unique_ptr<BteChannel>> channels;
  bool stopping = false;
  std::function<void(const BteJob&)> finished;  // called under `mu` after each job
  ProxyCompleter proxies;                        // events of proxied posts and chains
  const uint64_t lock_owner;                     // this daemon's AMO lock owner value
};

class BteChannel {
 public:
  BteChannel(BteShared& shared, uint32_t index);
  ~BteChannel();
  BteChannel(const BteChannel&) = delete;
  BteChannel& operator=(const BteChannel&) = delete;

  void start();
  void join();
  // The engine's dispatcher runs a small job itself (this channel has no thread): executes
  // and completes it, then reports it finished, as a channel would.
  void run_inline(BteJob& job);
  // Under shared.mu: queue a job / how much work the channel has (for routing).
  void enqueue(BteJob job);
  size_t load() const { return queue_.size() + (busy_ ? 1 : 0); }
  void wake() { cv_.notify_one(); }
  uint32_t index() const { return index_; }

 private:
  void run();
  bool should_wake() const;  // under shared.mu
  BteTransfer* helpable() const;
  void execute(BteJob& job);
  void execute_proxy(const ProxyPost& p);
  uint64_t transfer(BteJob& job, MappedRegion& initiator, MappedRegion& target);
  void complete(const BteJob& job, MappedRegion& initiator, MappedRegion* target, uint64_t status, uint32_t dst_cq);

  BteShared& sh_;
  const uint32_t index_;
  std::deque<BteJob> queue_;   // under sh_.mu
  bool busy_ = false;          // under sh_.mu
  std::atomic<bool> has_work_{false};  // a helper returns to its own queue when set
  std::condition_variable cv_;
  std::vector<char> bounce_;
  std::thread thread_;
};

}  // namespace nicemu::daemon
