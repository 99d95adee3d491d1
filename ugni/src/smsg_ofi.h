// SMSG to another host's rank over the ofi fabric (docs/ofi-fabric.md, "SMSG"): when our CDM
// has an ofi port and the receiver's CDM has an address (the look-up posts use), the channel
// goes rank to rank instead of through the daemons' relay (smsg_relay.h). Frames and the
// protocol: nicemu/abi/ofi_smsg.h.
//
// Why messages, not writes into the mailbox: the mailbox is in the receiver's heap (the
// daemon's memory, shm_layout.h), not in memory registered with the provider, and its
// address there is not known to the sender. The receiver's progress thread writes each
// message into its slot (smsg_write_at, in order by sequence number, duplicates dropped, as
// the daemons' relay does) and pushes the remote SMSG event, so GetNext, Release and the
// receiver's CQ see what a same-host or relayed message gives. Local completions come in
// msg_id order when the provider says the frame is at the target (FI_DELIVERY_COMPLETE).
// Credits come back as Notes from the receiver's GNI_SmsgRelease. A send the provider fails
// fails the channel for good (as the relay's: state set, error CQE, later sends fail).
//
// Decided at GNI_SmsgInit, per direction: peers without an ofi address, vMDH mailboxes,
// mailboxes whose messages exceed an ofismsg::kMaxFrame frame, a CDM whose fault
// configuration is on, and a receiver that does not answer the Open within 3 s keep the relay.
#pragma once
#include <cstddef>
#include <cstdint>

#include "internal.h"
#include "ofi_order.h"

namespace nicemu::ugni {

// smsg.cpp: opens the mailbox `a` describes at NIC address `addr` through that node's daemon.
gni_return_t open_mailbox(Nic* n, uint32_t addr, const gni_smsg_attr_t* a, Mailbox& out);

// GNI_SmsgInit's send side towards another host: `taken` if the channel goes over ofi (then
// `out` is set, or the error returned); not taken: the caller opens the relay.
// `credit_cq`: our receive CQ slot, where the SMSG event of credits coming back goes.
gni_return_t smsg_ofi_open(Ep* ep, const gni_smsg_attr_t* remote, uint32_t credit_cq, Mailbox& out, bool& taken);
// GNI_SmsgSend[WTag] on such a channel (arguments checked by the caller).
gni_return_t smsg_ofi_send(Ep* ep, const void* header, uint32_t header_length, const void* data, uint32_t data_length,
                           uint32_t msg_id, uint8_t tag);
// The channel failed for good (a send of it failed).
bool smsg_ofi_failed(const Mailbox& m);
// After GNI_SmsgRelease of our mailbox: credits back to a sender over ofi, when due. False
// if our mailbox has no such sender.
bool smsg_ofi_released(Ep* ep);
// A frame of ours received by the port's progress thread (ofi_port.cpp).
void smsg_ofi_on_message(Nic* n, const void* buf, size_t len);
// A message the port's order held (smsg_ofi_send: a PUT or AMO to its receiver in flight
// that it may not pass) may go now, counted under `t`: into its channel, in order.
OfiIssue smsg_ofi_issue_held(Nic* n, void* item, const OfiOrderTicket& t);
// A held message fails with `status` unsent (its channel with it), or st 0: freed silently.
void smsg_ofi_drop_held(Nic* n, void* item, uint64_t status);
// The port is closed: the channels go (ofi_close).
void smsg_ofi_forget(Nic* n);
// By the thread driving the port's CQ, at each look: sends message frames a completion's flush
// found no room for in the provider.
void smsg_ofi_flush(Nic* n);

}  // namespace nicemu::ugni
