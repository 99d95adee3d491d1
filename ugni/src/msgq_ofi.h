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
// A member that dies: a frame the provider fails, or a reply overdue by 5 s, makes the stream
// suspect, and our daemon is asked whether the member still lives (as for RMA posts:
// ofi_peer_check.h; OfiLookup names the node's member now). It lives: the waiting messages
// complete TRANSIENT, the credits stay. It died (another member is named, or none):
// messages for the dead member's own instance complete PEER_GONE (as the relay says of a
// dead destination), the others TRANSIENT (stored or not, nobody can say); the node's
// credits come back once per dead member (TxCredit.lost: the first sender of our node to
// judge it gives back all; the others their own sent since), and the next send takes the
// new member, whose first frame is a sync Ask: it takes over the ring's unread slots and the
// sender takes their credits again, so the ring is never over-promised after a re-route.
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

// The ring of node `origin_pe` in our node's segment: its slots [head, tail) are taken
// (written, or being read). Nothing if there is no such ring.
struct MsgqRingSpan {
  uint32_t ring = 0, gen = 0;
  uint64_t head = 0, tail = 0;
};
std::optional<MsgqRingSpan> msgq_ring_span(Nic* n, uint32_t origin_pe);

// GNI_MsgqSend to node `pe`, credit number `ticket` of `cr` (its `sent` after taking it)
// already taken: true if sent over ofi (the local completion comes with the member's reply);
// false: the caller uses the relay.
bool msgq_ofi_send(Nic* n, abi::msgq::TxCredit* cr, uint64_t ticket, uint32_t pe, uint32_t inst, const void* hdr,
                   uint32_t hdr_len, const void* msg, uint32_t msg_len, uint32_t msg_id, uint8_t tag, Cq* snd_cq);
// Before a send to `pe` takes a credit: if the stream to it is being synchronised with a new
// member (the old one died), waits for the answer (1 s at most), driving the port.
void msgq_ofi_settle(Nic* n, uint32_t pe, abi::msgq::TxCredit* cr);
// A send to `pe` found no credit: ask its member for the freed slots (if we stream to one).
void msgq_ofi_ask(Nic* n, uint32_t pe);
// A frame of ours received by the port (ofi_port.cpp).
void msgq_ofi_on_message(Nic* n, const void* buf, size_t len);
// Replies overdue (the port's progress thread, every turn).
void msgq_ofi_tick(Nic* n);
// GNI_MsgqRelease: our segment (where the credits are) is about to be unmapped.
void msgq_ofi_release(Nic* n);
// The port is about to close (ofi_close): no more verdicts (they ask through the port).
void msgq_ofi_quiesce(Nic* n);
// The port is closed (ofi_close).
void msgq_ofi_forget(Nic* n);

}  // namespace nicemu::ugni
