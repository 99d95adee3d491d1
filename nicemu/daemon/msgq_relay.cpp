#include "nicemu/daemon/msgq_relay.h"

#include <cstring>

#include <spdlog/spdlog.h>

#include "nicemu/abi/gni_values.h"

namespace nicemu::daemon {

using namespace nicemu::abi::remote;
namespace rc = nicemu::abi::gni;

MsgqRelay::MsgqRelay(uint32_t self, Send send, FindSegment find)
    : self_(self), send_(std::move(send)), find_(std::move(find)) {}

bool MsgqRelay::forward(const CdmRegion& cdm, const MsgqSegment& seg, const MsgqRemoteSend& m) {
  if (uint32_t{m.hdr_len} + m.msg_len > seg.attrs().max_msg_sz || m.dst_pe == self_) return false;
  // As for a same-host send: only to a node this node connected to (GNI_MsgqConnect).
  if (!seg.connected_to(m.dst_pe)) return false;
  MsgqDeliver d{};
  d.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, static_cast<uint16_t>(abi::ctl::Op::kMsgqDeliver), 0,
                         sizeof d};
  d.origin_pe = self_;
  d.src_inst = cdm.inst_id();
  d.dst_inst = m.dst_inst;
  d.ptag = cdm.credential().ptag;
  d.cookie = cdm.credential().cookie;
  d.hdr_len = m.hdr_len;
  d.msg_len = m.msg_len;
  d.tag = m.tag;
  std::memcpy(d.payload, m.payload, uint32_t{m.hdr_len} + m.msg_len);
  if (send_(m.dst_pe, &d, sizeof d)) {
    ++ctr_.forwarded;
  } else {
    // Peer down or its backlog full: the message is lost, counted (logged the first time and
    // every 1000th, so a dead peer cannot flood the log).
    if (ctr_.send_failed++ % 1000 == 0)
      spdlog::warn("nic {}: MSGQ message for node {} inst {} could not be sent (fabric refused)", self_, m.dst_pe,
                 m.dst_inst);
  }
  return true;
}

int MsgqRelay::put(const MsgqDeliver& d) {
  MsgqSegment* seg = find_(Credential{d.ptag, d.cookie});
  if (!seg) return rc::kInvalidState;
  return seg->deliver_remote(d.origin_pe, d.src_inst, d.dst_inst, d.tag, d.payload, d.hdr_len,
                             d.payload + d.hdr_len, d.msg_len);
}

bool MsgqRelay::deliver(uint32_t from, const uint8_t* msg, size_t len) {
  MsgqDeliver d;
  if (len != sizeof d) return false;
  std::memcpy(&d, msg, sizeof d);
  if (d.origin_pe != from || uint32_t{d.hdr_len} + d.msg_len > kMsgqMaxPayload) return false;
  // Behind held messages: order per origin is kept by never overtaking them.
  if (held_.empty()) {
    const int r = put(d);
    if (r == rc::kSuccess) {
      ++ctr_.delivered;
      return true;
    }
    if (r != rc::kNotDone) {
      if (ctr_.undeliverable++ % 1000 == 0)
        spdlog::warn("nic {}: MSGQ message from node {} inst {} for inst {} dropped: no ring for that node or no such "
                   "destination here",
                   self_, d.origin_pe, d.src_inst, d.dst_inst);
      return true;
    }
  }
  if (held_.size() >= kMaxHeld) {
    ++ctr_.overflow;
    return true;
  }
  ++ctr_.held;
  held_.push_back(d);
  retry();
  return true;
}

void MsgqRelay::retry() {
  while (!held_.empty()) {
    const int r = put(held_.front());
    if (r == rc::kNotDone) return;
    if (r == rc::kSuccess)
      ++ctr_.delivered;
    else
      ++ctr_.undeliverable;
    held_.pop_front();
  }
}

nlohmann::json MsgqRelay::status() const {
  return nlohmann::json{{"forwarded", ctr_.forwarded}, {"send_failed", ctr_.send_failed},
                        {"delivered", ctr_.delivered}, {"held", ctr_.held},
                        {"holding", held_.size()},     {"undeliverable", ctr_.undeliverable},
                        {"overflow", ctr_.overflow}};
}

}  // namespace nicemu::daemon
