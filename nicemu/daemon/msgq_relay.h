// MSGQ across hosts (abi/remote_ops.h, MsgqRemoteSend / MsgqDeliver): the sending node's
// daemon checks and forwards a member's message over the fabric; the target node's daemon
// puts it into its segment's ring for the origin node. A full ring holds messages here, in
// arrival order, until a retry finds room (on every delivery, fabric progress and the
// daemon's periodic tick); at most kMaxHeld, beyond which messages are dropped and counted.
// Runs on the daemon's event loop.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>

#include <nlohmann/json.hpp>

#include "nicemu/abi/remote_ops.h"
#include "nicemu/daemon/cdm_region.h"
#include "nicemu/daemon/msgq_segment.h"

namespace nicemu::daemon {

class MsgqRelay {
 public:
  using Send = std::function<bool(uint32_t node, const void* msg, size_t len)>;
  using FindSegment = std::function<MsgqSegment*(const Credential&)>;
  static constexpr size_t kMaxHeld = 65536;

  MsgqRelay(uint32_t self, Send send, FindSegment find);

  // GNI_MsgqSend of `cdm`, a member of `seg`, for a node of another host. False if the
  // request is malformed or not allowed (not connected to that node): counted by the caller.
  bool forward(const CdmRegion& cdm, const MsgqSegment& seg, const abi::remote::MsgqRemoteSend& m);
  // MsgqDeliver from the daemon of `from`. False if malformed or about another node.
  bool deliver(uint32_t from, const uint8_t* msg, size_t len);
  // Puts held messages into their rings while there is room.
  void retry();
  bool holding() const { return !held_.empty(); }
  nlohmann::json status() const;

 private:
  // kSuccess, kNotDone (ring full) or kInvalidState (nobody will take it).
  int put(const abi::remote::MsgqDeliver& d);

  const uint32_t self_;
  Send send_;
  FindSegment find_;
  std::deque<abi::remote::MsgqDeliver> held_;
  struct {
    uint64_t forwarded = 0, send_failed = 0, delivered = 0, held = 0, undeliverable = 0, overflow = 0;
  } ctr_;
};

}  // namespace nicemu::daemon
