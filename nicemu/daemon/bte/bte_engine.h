// The BTE engine of one emulated node: the offload DMA block that executes GNI_PostRdma.
// Libraries queue requests in their CDM's submission ring (abi/bte_ring.h) and ring the
// CDM's doorbell eventfd only when the dispatcher sleeps; the dispatcher thread copies
// requests out and routes them to the channels (bte_channel.h), keeping each EP's
// outstanding requests on one channel and otherwise choosing the least loaded. A small
// request whose EP has nothing outstanding runs in the dispatcher itself: handing it to a
// channel costs a thread wake-up, many times its copy. After its last request the
// dispatcher may keep looking at the rings for `poll_us` before it arms the doorbells and
// sleeps, so a client posting back to back rings no doorbell and waits for no wake-up
// (off by default: on a small host it takes the CPU the spinning ranks need). Without work every thread of the engine sleeps.
//
// Called from the control thread (attach, reclaim, kBteOpen, status); its own threads do
// the rest. Lives as long as the Node.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/daemon/bte/bte_channel.h"
#include "nicemu/daemon/bte/bte_regions.h"

namespace nicemu::daemon {

struct BteConfig {
  uint32_t nic_addr = 0;
  std::string rundir;              // other daemons' sockets (targets on other nodes)
  uint32_t channels = 2;           // worker threads
  uint64_t chunk_bytes = 256 << 10;  // bounce-buffer chunk: fits the L2 cache, so the
                                     // second copy reads from cache (docs/performance.md)
  uint32_t poll_us = 0;            // dispatcher's polling window after work (0: sleep at once)
};

class BteEngine {
 public:
  explicit BteEngine(BteConfig cfg);
  ~BteEngine();
  BteEngine(const BteEngine&) = delete;
  BteEngine& operator=(const BteEngine&) = delete;

  // A CDM of this node attached (its region's two memfds) / was reclaimed.
  void region_attached(int ro_fd, int mdd_fd, int heap_fd, uint64_t size, pid_t owner);
  void region_gone(uint64_t attach_id);
  // kBteOpen: starts serving the CDM's ring at `ctl_offset` of its region. Returns a
  // gni_return_t value and the doorbell eventfd to pass (still owned by the engine).
  int open_ring(uint64_t attach_id, uint64_t ctl_offset, uint32_t capacity, int& doorbell);
  // A post of the CDM mapped as `initiator` for a same-host target its process may not
  // reach by cross-memory attach (bte_proxy.h): queued on a channel, in posting order per
  // CDM; at most kMaxProxied outstanding per CDM, beyond which it completes at once with a
  // recoverable error (the client reposts). `inline_data` holds post.inline_length bytes.
  // Called from the control thread, which it never blocks.
  static constexpr uint32_t kMaxProxied = 4096;
  void proxy(const std::shared_ptr<MappedRegion>& initiator, const abi::remote::RemotePost& post,
             const uint8_t* inline_data);
  // Stops the threads (SIGTERM). Requests still queued are dropped.
  void stop();

  nlohmann::json status() const;
  uint32_t channels() const { return cfg_.channels; }
  uint64_t proxied() const { return shared_.counters.proxied.load(std::memory_order_relaxed); }
  // The engine's mappings of this node's CDM regions (also used for other hosts' operations).
  RegionDirectory& regions() { return regions_; }

 private:
  void dispatch_loop();
  bool drain(BteSource& s, const std::shared_ptr<BteSource>& sp);
  void route(const std::shared_ptr<BteSource>& s, const abi::BteRequest& req);
  void finished(const BteJob& job);  // under shared_.mu
  void kick();
  bool poll_window_open(uint64_t last_work_ns) const;

  BteConfig cfg_;
  RegionDirectory regions_;
  BteShared shared_;
  int epoll_ = -1;
  int kick_ = -1;  // eventfd: stop, or a ring got room again

  mutable std::mutex sources_mu_;
  std::map<uint64_t, std::shared_ptr<BteSource>> sources_;  // attach id -> ring
  std::atomic<uint64_t> sources_gen_{0};
  std::map<std::pair<uint64_t, uint32_t>, std::pair<uint32_t, uint32_t>> routes_;  // -> (channel, outstanding); under shared_.mu
  std::atomic<bool> stop_{false};
  std::unique_ptr<BteChannel> inline_;  // the dispatcher's own executor (no thread)
  std::thread dispatcher_;
};

}  // namespace nicemu::daemon
