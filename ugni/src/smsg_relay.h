// SMSG to a node of another host (docs/fabric.md, "SMSG across hosts"): the library cannot
// store into a mailbox it cannot map, so it hands each message to its own daemon, which
// relays it over the fabric (nicemu/daemon/remote/smsg_relay.h). Credits and failure come back
// through a SmsgRelayCtl block in our own heap (shm_layout.h), so a send makes one one-way
// write on the attach socket and no call; the local completion CQE is pushed by the daemon
// once the receiver's daemon has the message in the mailbox.
#pragma once
#include "internal.h"

namespace nicemu::ugni {

// The remote mailbox's attributes as GNI_SmsgInit gives them, as the daemons take them: to
// the daemon that owns it (same host, MboxOpen) or to ours that relays to it.
inline abi::ctl::MailboxAttrs mailbox_attrs(const gni_smsg_attr_t* a) {
  return {.qword1 = a->mem_hndl.qword1,
          .qword2 = a->mem_hndl.qword2,
          .msg_buffer = reinterpret_cast<uint64_t>(a->msg_buffer),
          .mbox_offset = a->mbox_offset,
          .buff_size = a->buff_size,
          .credits = a->mbox_maxcredit,
          .max_size = a->msg_maxsize};
}

// GNI_SmsgInit's send side towards another host (Nic::on_other_host): the relay of (this CDM, peer, mailbox).
// `credit_cq`: our receive CQ slot (kNoCq: none), where our daemon raises the SMSG event of
// credits coming back after a send found none.
gni_return_t relay_open(Ep* ep, const gni_smsg_attr_t* remote, uint32_t credit_cq, Mailbox& out);
// A send to another host that failed (channel broken, NIC down), on either path: as a send
// to a dead receiver on this host, an error event in our CQ (TRANSACTION_ERROR without one),
// and the channel is marked broken.
gni_return_t remote_send_failed(Ep* ep, uint32_t msg_id, uint64_t status);
// GNI_SmsgSend[WTag] on a relayed channel (arguments already checked).
gni_return_t relay_send(Ep* ep, const void* header, uint32_t header_length, const void* data, uint32_t data_length,
                        uint32_t msg_id, uint8_t tag);
// The channel failed for good (receiver gone, peer silent): nothing more will come.
inline bool relay_failed(const Mailbox& m) { return m.relay && m.relay->state.load(std::memory_order_acquire) != 0; }
// Failed with messages of ours unacknowledged: they completed with errors. The daemon stores
// `delivered` before `state`, so a failure read here sees the last ack.
inline bool relay_lost_sends(const Mailbox& m) {
  return relay_failed(m) && m.relay->delivered.load(std::memory_order_acquire) != m.relay->sent.load(std::memory_order_relaxed);
}

}  // namespace nicemu::ugni
