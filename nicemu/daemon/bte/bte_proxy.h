// FMA PUT/GET and AMOs that the BTE engine executes for a CDM of this node whose process may
// not reach its same-host target by cross-memory attach: another user's process (jobs
// sharing a DRC credential), Yama ptrace_scope 2/3, a seccomp filter. libugni finds that
// out once per peer (xmem::probe) and sends such a post to its daemon as a RemotePost
// marked kFlagSameHost (abi/remote_ops.h), as it sends posts for other hosts; the engine
// runs it on a channel, in posting order per CDM, with the daemon's privilege
// (docs/decisions.md, "Where the kernel refuses cross-memory attach").
//
// The target is resolved as the BTE engine resolves it (this node's CDMs, or another
// daemon's of this host, under the initiator's protection domain from its daemon-written
// header) and validated against its read-only registration table; the initiator's own
// side (GET destination, fetching-AMO result, the source of a PUT that did not travel
// inline) is the initiator's memory, read and written by its pid, never an address of
// anyone else. AMOs hold the target's AMO lock, as every other initiator's do. Events: the
// remote event into the target registration's CQ, then the local/global events, or the
// chain's one event when its last member here is done.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "nicemu/abi/remote_ops.h"
#include "nicemu/daemon/bte/bte_regions.h"

namespace nicemu::daemon {

struct BteCounters;

// One post, copied out of the control message (untrusted until validated).
struct ProxyPost {
  abi::remote::RemotePost post{};
  std::vector<char> data;  // the PUT bytes that travelled inline
  std::shared_ptr<MappedRegion> initiator;
};

// Checks a post the library could have made (kind, engine, AMO command and length, chain
// fields): kOk or the status of its error event.
uint64_t proxy_check(const abi::remote::RemotePost& p);

// Runs one post that passed proxy_check, moving bytes through `bounce` (chunks of its size);
// pushes the remote event. Returns the CQE status of its local events, or kProxyDrop when
// the initiator is gone (nobody to tell).
inline constexpr uint64_t kProxyDrop = 0x100;
uint64_t proxy_execute(const ProxyPost& p, RegionDirectory& regions, std::vector<char>& bounce, uint64_t lock_owner);

// The local/global events of posts and chains (abi/remote_ops.h, RemotePost::chain_id).
// Thread-safe: the channels of several CDMs complete at once.
class ProxyCompleter {
 public:
  void complete(const ProxyPost& p, uint64_t status, BteCounters& ctr);

 private:
  struct Chain {
    std::shared_ptr<MappedRegion> initiator;
    abi::remote::RemotePost first{};
    uint32_t remaining = 0;
    uint32_t fail_index = abi::remote::kNoChainFailure;
    uint64_t fail_status = 0;
  };
  static constexpr size_t kMaxChains = 65536;  // as RemoteRequester: dead CDMs' chains go first
  std::mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, Chain> chains_;  // (attach id, chain id)
};

}  // namespace nicemu::daemon
