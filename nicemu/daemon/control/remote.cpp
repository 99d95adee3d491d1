// Control requests that start work on other hosts: memory operations (remote/remote_requester.h)
// and SMSG relays (remote/smsg_relay.h).
#include "nicemu/daemon/control/request.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

// A post of one of our CDMs for a node of another host (one-way: its outcome is CQ events).
void Node::on_remote_post(Request& q) {
  abi::remote::RemotePost p;
  CdmRegion* cdm = owned_cdm(q.peer);
  if (!cdm || q.len < sizeof p) {
    ++ctr_.malformed_messages;
    return;
  }
  std::memcpy(&p, q.msg, sizeof p);
  if (p.inline_length != q.len - sizeof p || p.inline_length > abi::remote::kInlineMax) {
    ++ctr_.malformed_messages;
    return;
  }
  auto region = bte_.regions().local(cdm->attach_id());
  if (!region) {
    ++ctr_.malformed_messages;
    return;
  }
  remote_out_.post(region, p, reinterpret_cast<const uint8_t*>(q.msg) + sizeof p);
}

int Node::on_smsg_relay_open(Request&, CdmRegion& cdm, const ctl::SmsgRelayOpen& req, ctl::SmsgRelayOpenReply& r) {
  return smsg_.open(cdm, req, r);
}

void Node::on_smsg_relay_note(Request& q) {
  ctl::SmsgRelayNote req;
  CdmRegion* cdm = owned_cdm(q.peer);
  if (!parse(q, req) || !cdm) return bad(q);
  if (static_cast<Op>(q.h.op) == Op::kSmsgRelayDoorbell)
    smsg_.doorbell(*cdm);
  else
    smsg_.released(*cdm);
}

}  // namespace nicemu::daemon
