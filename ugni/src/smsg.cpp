// SMSG channel: per-peer mailboxes with credits, in-order delivery and 8-bit tags. On one
// host the sender writes straight into the receiver's mailbox in the receiver's region and
// posts the remote event into the receiver's CQ; no daemon on the message path. Towards a
// node of another host the daemons relay the messages (smsg_relay.h).
#include <algorithm>
#include <cstring>

#include "fault_engine.h"
#include "internal.h"
#include "ofi_port.h"
#include "smsg_ofi.h"
#include "smsg_relay.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace cqe = nicemu::abi::cqe;

namespace {

bool attr_ok(const gni_smsg_attr_t* a) {
  return a && (a->msg_type == GNI_SMSG_TYPE_MBOX || a->msg_type == GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT) &&
         a->mbox_maxcredit > 0 && a->msg_maxsize > 0 && a->msg_maxsize <= GNI_SMSG_MAX_SIZE;
}

}  // namespace

// Opens the mailbox described by `a` at NIC address `addr`, through that node's daemon. It
// lives in the region of the CDM that registered it (the memory domain of its handle),
// whatever id the EP was bound with, so both ends find the same one.
gni_return_t nicemu::ugni::open_mailbox(Nic* n, uint32_t addr, const gni_smsg_attr_t* a, Mailbox& out) {
  uint64_t st = 0;
  std::shared_ptr<Region> r = n->resolve(addr, abi::mdh::route_of(a->mem_hndl.qword1, a->mem_hndl.qword2), st);
  if (!r) return st == cqe::kErrProtection ? GNI_RC_PERMISSION_ERROR : GNI_RC_INVALID_STATE;
  abi::ctl::MboxOpen req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kMboxOpen);
  req.ptag = n->cdm->ptag;
  req.cookie = n->cdm->cookie;
  abi::ctl::copy_mailbox_attrs(req, mailbox_attrs(a));
  abi::ctl::MboxOpenReply rep{};
  nicemu::ctl::Connection* c = addr == n->nic_addr ? &n->conn : nullptr;
  if (!c) {
    std::lock_guard<std::mutex> lk(n->peers_mu);
    auto it = n->daemons.find(addr);
    if (it == n->daemons.end() || !it->second->connected()) return GNI_RC_INVALID_STATE;
    c = it->second.get();
  }
  if (!c->call(req, rep)) return GNI_RC_INVALID_STATE;
  if (rep.r.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.r.rc);
  if (!r->in_heap(rep.ctl_offset, rep.bytes) ||
      rep.bytes != abi::mbox_bytes(a->mbox_maxcredit, a->msg_maxsize))
    return GNI_RC_INVALID_STATE;
  out.region = r;
  out.view.ctl = reinterpret_cast<abi::MboxCtl*>(r->base + rep.ctl_offset);
  out.view.slots = r->base + rep.ctl_offset + sizeof(abi::MboxCtl);
  out.view.credits = a->mbox_maxcredit;
  out.view.slot_size = abi::mbox_slot_size(a->msg_maxsize);
  out.view.max_size = a->msg_maxsize;
  out.dst_cq = rep.dst_cq;
  return GNI_RC_SUCCESS;
}

namespace {

// `tagged`: GNI_SmsgSendWTag, which may exceed msg_maxsize by a short header (shm_layout.h,
// smsg_fits).
gni_return_t send(Ep* ep, const void* header, uint32_t header_length, const void* data, uint32_t data_length,
                  uint32_t msg_id, uint8_t tag, bool tagged) {
  Mailbox& m = ep->tx;
  if (!m.valid()) return GNI_RC_INVALID_PARAM;
  if ((header_length && !header) || (data_length && !data)) return GNI_RC_INVALID_PARAM;
  if (!abi::smsg_fits(m.view.max_size, header_length, data_length, tagged)) return GNI_RC_ERROR_RESOURCE;
  if (m.ofi) return smsg_ofi_send(ep, header, header_length, data, data_length, msg_id, tag);
  if (m.relay) return relay_send(ep, header, header_length, data, data_length, msg_id, tag);
  if (!m.region->alive() || ep->nic->nic_down.load(std::memory_order_relaxed)) {
    // The receiver is gone: as a retransmit-exhausted send, an error event in our CQ.
    uint64_t st = ep->nic->nic_down ? cqe::kErrNicDown : cqe::kErrPeerGone;
    ep->tx_failed.store(true, std::memory_order_relaxed);
    if (!ep->src_cq) return GNI_RC_TRANSACTION_ERROR;
    ep->src_cq->ring.push(cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, st, cqe::kInfoGlobal, 0, msg_id));
    return GNI_RC_SUCCESS;
  }
  if (fault_path(ep->nic)) [[unlikely]]
    return fault_smsg_send(ep, header, header_length, data, data_length, msg_id, tag);  // fault_engine.cpp
  if (smsg_send(m.view, header, header_length, data, data_length, tag) == SendResult::kNoCredit) {
    stat_add(ep->nic, GNI_STAT_SMSG_MBOX_CREDITS_STALL);
    count(ep->nic->counters, ctr::cdm::smsg_credit_stalls);
    // The receiver raises an SMSG event in our receive CQ when it returns a credit, as the
    // hardware's credit message does: programs wait on that CQ before they retry.
    if (!smsg_want_credit(m.view, m.view.ctl->sent.load(std::memory_order_relaxed)) ||
        smsg_send(m.view, header, header_length, data, data_length, tag) == SendResult::kNoCredit)
      return GNI_RC_NOT_DONE;
  }
  // The receiver's event first: it is what the receiver polls for, so the bookkeeping
  // below (three locked increments) stays off the message's critical path.
  if (m.dst_cq != abi::kNoCq)
    push_remote_event(*m.region, m.dst_cq, cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, cqe::kOk, 0, 0, ep->remote_event),
                      &m.dst_cache);
  if (ep->src_cq)
    ep->src_cq->ring.push(cqe::make(cqe::kSrcLocalResponse, cqe::kTypeSmsg, cqe::kOk, cqe::kInfoGlobal, 0, msg_id));
  // On the hardware every SMSG message is an FMA PUT into the peer's mailbox.
  stat_add(ep->nic, GNI_STAT_FMA_LAUNCH_COUNT);
  count(ep->nic->counters, ctr::cdm::smsg_sends);
  count(ep->nic->counters, ctr::cdm::smsg_send_bytes, uint64_t{header_length} + data_length);
  return GNI_RC_SUCCESS;
}

gni_return_t get_next(Ep* ep, void** header, uint8_t* tag) {
  Mailbox& m = ep->rx;
  if (!m.valid()) return GNI_RC_INVALID_PARAM;
  abi::MboxSlotHeader* slot = smsg_peek(m.view);
  if (!slot && ep->nic->ofi && ep->other_host()) {
    // A sender over ofi may hold its local completion while the frame still waits in our
    // provider's queue: write what arrived into the mailbox, then look again.
    ofi_poll(ep->nic, true);
    slot = smsg_peek(m.view);
  }
  if (!slot) {
    // The connection is broken once a send of ours on it failed, or when a relayed channel
    // lost messages of ours or our NIC (its daemon) is down. A peer that merely left is not
    // seen here: on the hardware this mailbox is our own memory, and a departed peer shows
    // only when a transaction to it fails (docs/fabric.md, "Failure is final").
    if (ep->tx.valid() &&
        (ep->tx_failed.load(std::memory_order_relaxed) ||
         (ep->tx.relay && (relay_lost_sends(ep->tx) || ep->nic->nic_down.load(std::memory_order_relaxed))) ||
         smsg_ofi_failed(ep->tx)))
      return GNI_RC_INVALID_STATE;
    return GNI_RC_NOT_DONE;
  }
  uint8_t t = slot->tag;
  if (tag && *tag != GNI_SMSG_ANY_TAG && *tag != t) return GNI_RC_NO_MATCH;
  if (tag) *tag = t;
  *header = slot + 1;
  ep->rx_holding = true;
  return GNI_RC_SUCCESS;
}

}  // namespace

extern "C" {

gni_return_t GNI_SmsgBufferSizeNeeded(gni_smsg_attr_t* smsg_attr, unsigned int* size) {
  if (!attr_ok(smsg_attr) || !size) return GNI_RC_INVALID_PARAM;
  *size = static_cast<unsigned>(abi::smsg_buffer_size(smsg_attr->mbox_maxcredit, smsg_attr->msg_maxsize));
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_SmsgInit(gni_ep_handle_t ep_hndl, gni_smsg_attr_t* local_smsg_attr,
                          gni_smsg_attr_t* remote_smsg_attr) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !attr_ok(local_smsg_attr) || !attr_ok(remote_smsg_attr)) return GNI_RC_INVALID_PARAM;
  if (!ep->bound) return GNI_RC_INVALID_STATE;
  Mailbox rx, tx;
  Nic* n = ep->nic;
  gni_return_t rc = open_mailbox(n, n->nic_addr, local_smsg_attr, rx);
  if (rc != GNI_RC_SUCCESS) return rc;
  // A peer on another host: rank to rank over the ofi fabric (smsg_ofi.h), else our daemon
  // relays to its daemon (smsg_relay.h).
  if (ep->other_host()) {
    bool over_ofi = false;
    rc = smsg_ofi_open(ep, remote_smsg_attr, rx.dst_cq, tx, over_ofi);
    if (!over_ofi) rc = relay_open(ep, remote_smsg_attr, rx.dst_cq, tx);
  } else {
    rc = open_mailbox(n, ep->remote_addr, remote_smsg_attr, tx);
  }
  if (rc != GNI_RC_SUCCESS) return rc;
  ep->rx = std::move(rx);
  ep->tx = std::move(tx);
  // A sender on another host gets its credit events from its daemon, with our event data.
  ep->rx.view.ctl->credit_event.store(ep->remote_event, std::memory_order_relaxed);
  if (ep->tx.region) {
    ep->peer = ep->tx.region;
    ep->peer_domain = abi::mdh::route_of(remote_smsg_attr->mem_hndl.qword1, remote_smsg_attr->mem_hndl.qword2);
  }
  ep->rx_holding = false;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_SmsgSetMaxRetrans(gni_nic_handle_t nic_handle, uint16_t max_retrans) {
  Nic* n = as_nic(nic_handle);
  if (!n || max_retrans == 0) return GNI_RC_INVALID_PARAM;
  n->smsg_max_retrans = max_retrans;
  return GNI_RC_SUCCESS;
}

// Routing modes only change the order in which a real network delivers; same-host SMSG is
// always delivered in order, which every mode allows. Known bits are accepted and stored.
gni_return_t GNI_SmsgSetDeliveryMode(gni_nic_handle_t nic_handle, uint16_t dlvr_mode) {
  constexpr uint16_t kKnown = GNI_DLVMODE_NO_ADAPT | GNI_DLVMODE_NO_HASH | GNI_DLVMODE_NO_RADAPT |
                              GNI_DLVMODE_NMIN_HASH | GNI_DLVMODE_MIN_HASH | GNI_DLVMODE_ADAPTIVE1 |
                              GNI_DLVMODE_ADAPTIVE2 | GNI_DLVMODE_ADAPTIVE3 | GNI_DLVMODE_ORDERED_TAIL;
  Nic* n = as_nic(nic_handle);
  if (!n || (dlvr_mode & ~kKnown)) return GNI_RC_INVALID_PARAM;
  n->smsg_dlvr_mode = dlvr_mode;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_SmsgSend(gni_ep_handle_t ep_hndl, void* header, uint32_t header_length, void* data,
                          uint32_t data_length, uint32_t msg_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  return send(ep, header, header_length, data, data_length, msg_id, 0, false);
}

gni_return_t GNI_SmsgSendWTag(gni_ep_handle_t ep_hndl, void* header, uint32_t header_length, void* data,
                              uint32_t data_length, uint32_t msg_id, uint8_t tag) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  return send(ep, header, header_length, data, data_length, msg_id, tag, true);
}

gni_return_t GNI_SmsgGetNext(gni_ep_handle_t ep_hndl, void** header) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !header) return GNI_RC_INVALID_PARAM;
  return get_next(ep, header, nullptr);
}

gni_return_t GNI_SmsgGetNextWTag(gni_ep_handle_t ep_hndl, void** header, uint8_t* tag) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !header || !tag) return GNI_RC_INVALID_PARAM;
  return get_next(ep, header, tag);
}

gni_return_t GNI_SmsgRelease(gni_ep_handle_t ep_hndl) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !ep->rx.valid()) return GNI_RC_INVALID_PARAM;
  if (!ep->rx_holding) return GNI_RC_NOT_DONE;
  const bool credit_wanted = smsg_release(ep->rx.view);
  ep->rx_holding = false;
  // The sender (on this host: a relayed sender's daemon never asks) ran out of credits:
  // an SMSG event in its receive CQ, for which GetNext then finds no message.
  if (credit_wanted && ep->tx.region && ep->tx.dst_cq != abi::kNoCq)
    push_remote_event(*ep->tx.region, ep->tx.dst_cq,
                      cqe::make(cqe::kSrcRemoteRequest, cqe::kTypeSmsg, cqe::kOk, 0, 0, ep->remote_event),
                      &ep->tx.dst_cache);
  // The sender is on another host: its credits come back through the daemons, which report
  // releases with their acks while messages flow. Past MboxCtl::note_at the daemon has not
  // seen an eighth of a mailbox of releases (the sender may be waiting for credits): tell it now
  // instead of leaving the sender to the daemon's poll.
  // A sender over the ofi fabric gets its credits from us directly (smsg_ofi.h).
  if (ep->other_host() && !smsg_ofi_released(ep) && smsg_note_due(ep->rx.view, ep->rx_noted)) {
    abi::ctl::SmsgRelayNote note{};
    note.h.op = static_cast<uint16_t>(abi::ctl::Op::kSmsgRelayReleased);
    note.h.length = sizeof note;
    ep->nic->conn.send(&note, sizeof note);  // a lost note only delays the credits to the poll
  }
  count(ep->nic->counters, ctr::cdm::smsg_receives);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
