// MSGQ to another host's node over the ofi fabric (docs/ofi-fabric.md, "MSGQ"): when our
// CDM has an ofi port with FI_MSG, no fault configuration is on, and the target node's
// segment of our credential has a member whose CDM published an address (OfiLookup with
// route ofimsgq::kMsgqRoute: the target's daemon names its first such member), GNI_MsgqSend
// sends the message to that member rank as a frame (nicemu/abi/ofi_msgq.h) instead of
// MsgqRemoteSend through the daemons. Else the daemons' relay (msgq_relay.h), as before.
//
// The member's port checks it as the target daemon's relay checks MsgqDeliver (our
// credential, a ring for the origin node, a live destination), puts it into the ring for
// the origin node (msgq_store_remote), wakes the receiver and answers the status: the
// sender posts the local completion then, in send order per target node. Credits stay the
// origin node's TxCredit, taken by GNI_MsgqSend as on the relay path: the member remembers
// each stored message's ring position per origin node and hands out, in every reply, the
// slots the ring's head has passed since its last report, to whichever sender of that node
// it answers; a sender out of credits asks (at most one ask in flight). So a node's credits
// come back while any of its senders sends or asks, whichever receiver freed the slots.
//
// A member that dies: frames the provider fails complete PEER_GONE, and so do the earlier
// messages of the stream still waiting for their reply (they may have been stored); a reply
// overdue by 5 s completes TRANSIENT. Either way the stream is dropped, every credit of the
// node's connection comes back (as the relay does for a lost peer), and the next send asks
// for a member again (another live one, else the daemons' path).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "internal.h"
#include "nicemu/abi/msgq_layout.h"

namespace nicemu::ugni {

// msgq.cpp, the member's side: a message of node `origin_pe` into our node's ring for it
// (as the daemon's MsgqSegment::deliver_remote). A CQE status: kOk (stored at `ring`/`gen`,
// position `pos`), kErrPeerGone (no MSGQ of ours here, no ring for that node, no such
// destination), kErrTransient (the ring is full: credits were forged or given back early).
struct MsgqRingPos {
  uint32_t ring = 0, gen = 0;
  uint64_t pos = 0;
};
uint64_t msgq_store_remote(Nic* n, uint32_t origin_pe, uint32_t src_inst, uint32_t dst_inst, uint8_t tag,
                           const uint8_t* payload, uint32_t hdr_len, uint32_t msg_len, MsgqRingPos& at);
// Recycles ring `ring` of our node's segment (if still generation `gen`) and returns its
// head; nothing if the ring or segment is gone (every position it held is free).
std::optional<uint64_t> msgq_ring_head(Nic* n, uint32_t ring, uint32_t gen);

// GNI_MsgqSend to node `pe`, a credit of `cr` already taken: true if sent over ofi (the
// local completion comes with the member's reply); false: the caller uses the relay.
bool msgq_ofi_send(Nic* n, abi::msgq::TxCredit* cr, uint32_t depth, uint32_t pe, uint32_t inst, const void* hdr,
                   uint32_t hdr_len, const void* msg, uint32_t msg_len, uint32_t msg_id, uint8_t tag, Cq* snd_cq);
// A send to `pe` found no credit: ask its member for the freed slots (if we stream to one).
void msgq_ofi_ask(Nic* n, uint32_t pe);
// A frame of ours received by the port (ofi_port.cpp).
void msgq_ofi_on_message(Nic* n, const void* buf, size_t len);
// Replies overdue (the port's progress thread, every turn).
void msgq_ofi_tick(Nic* n);
// GNI_MsgqRelease: our segment (where the credits are) is about to be unmapped.
void msgq_ofi_release(Nic* n);
// The port is closed (ofi_close).
void msgq_ofi_forget(Nic* n);

}  // namespace nicemu::ugni
