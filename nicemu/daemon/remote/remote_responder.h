// The target side of memory operations from other hosts (abi/remote_ops.h): one RmaRequest
// piece at a time, in the order the fabric delivers them (exactly once, in order per peer).
// Every piece is validated against the target CDM's registration table before a byte
// moves: the CDM must be of this node and of the initiator's protection domain, the handle
// must name a live registration covering the whole transfer, writable for a PUT or an AMO.
// Bytes move with process_vm_readv/writev; AMOs run under the target region's AMO lock, so
// they are atomic with respect to same-host initiators' AMOs too. The answer goes back
// through the fabric; when the peer's send backlog is full it waits in a queue here and is
// retried, never recomputed.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/remote_ops.h"
#include "nicemu/daemon/bte/bte_regions.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

class RemoteResponder : public FabricService {
 public:
  RemoteResponder(uint32_t self, RegionDirectory& regions, FabricSend send);

  // A request from the daemon of `from` (authenticated; header, op and length checked).
  // False if the message is malformed (counted and dropped by the caller).
  bool request(uint32_t from, const uint8_t* msg, size_t len);
  // FabricService: RmaRequest messages.
  const char* receive(uint32_t from, const abi::ctl::Header&, const uint8_t* msg, size_t len) override {
    return request(from, msg, len) ? nullptr : "bad RmaRequest";
  }
  // Retries answers that could not be sent (called on every fabric delivery and by a timer).
  void retry();
  // The initiator's daemon restarted or went silent: its queued answers are dropped.
  void peer_lost(uint32_t node) override;
  bool backlog() const { return !pending_.empty(); }
  void progress() override {
    if (backlog()) retry();
  }

  nlohmann::json status() const;

 private:
  uint64_t execute(const abi::remote::RmaRequest& q, const uint8_t* data, MappedRegion& target, uint64_t& fetched,
                   std::vector<char>& out, uint32_t& dst_cq);
  void answer(uint32_t to, const std::vector<char>& msg);

  const uint32_t self_;
  RegionDirectory& regions_;
  FabricSend send_;
  const uint64_t lock_owner_;  // this daemon's AMO lock owner value
  std::vector<char> buf_;      // GET bytes of the piece being answered
  std::vector<char> out_;      // the answer being sent
  // Transfers with a failed piece, until their last piece: no remote event for them.
  static constexpr size_t kMaxFailed = 4096;
  std::set<std::pair<uint32_t, uint64_t>> failed_;
  std::map<uint32_t, std::deque<std::vector<char>>> pending_;  // unsent answers per peer
  struct {
    uint64_t requests = 0, bytes_in = 0, bytes_out = 0, amos = 0, cq_writes = 0, errors = 0, deferred = 0;
  } ctr_;
};

}  // namespace nicemu::daemon
