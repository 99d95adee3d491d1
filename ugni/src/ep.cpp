// Endpoints: a local object naming one peer (NIC address + instance id).
#include "fault_engine.h"
#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;

extern "C" {

gni_return_t GNI_EpCreate(gni_nic_handle_t nic_hndl, gni_cq_handle_t src_cq_hndl, gni_ep_handle_t* ep_hndl) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !ep_hndl) return GNI_RC_INVALID_PARAM;
  Cq* cq = nullptr;
  if (src_cq_hndl) {
    cq = as_cq(src_cq_hndl);
    if (!cq || cq->nic != n) return GNI_RC_INVALID_PARAM;
  }
  auto* ep = new (std::nothrow) Ep;
  if (!ep) return GNI_RC_ERROR_NOMEM;
  ep->nic = n;
  ep->src_cq = cq;
  ep->dgram_key = n->ep_serial.fetch_add(1) + 1;
  if (cq) cq->users.fetch_add(1);
  *ep_hndl = reinterpret_cast<gni_ep_handle_t>(ep);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_EpBind(gni_ep_handle_t ep_hndl, uint32_t remote_addr, uint32_t remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  ep->bound = true;
  ep->remote_addr = remote_addr;
  ep->remote_id = remote_id;
  ep->host_route.store(-1, std::memory_order_relaxed);
  ep->local_event = remote_id;            // defaults per the API: what our CQ reports
  ep->remote_event = ep->nic->cdm->inst_id;  // and what the peer's CQ reports
  ep->peer.reset();
  ep->tx = Mailbox{};
  ep->rx = Mailbox{};
  ep->rx_holding = false;
  ce_announce_leaf(ep);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_EpUnbind(gni_ep_handle_t ep_hndl) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  // Same-host transactions complete before the post returns: nothing is ever outstanding.
  ep->bound = false;
  ep->peer.reset();
  ep->tx = Mailbox{};
  ep->rx = Mailbox{};
  ep->rx_holding = false;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_EpIdle(gni_ep_handle_t ep_hndl) {
  return as_ep(ep_hndl) ? GNI_RC_SUCCESS : GNI_RC_INVALID_PARAM;
}

gni_return_t GNI_EpDestroy(gni_ep_handle_t ep_hndl) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  if (ep->src_cq) ep->src_cq->users.fetch_sub(1);
  cancel_datagram_of(ep);  // a pending datagram is cancelled; probes then report it
  if (ep->nic->fault_state) fault_forget_ep(ep);  // transactions held for it are dropped
  ep->magic = 0;
  delete ep;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_EpSetEventData(gni_ep_handle_t ep_hndl, uint32_t local_event, uint32_t remote_event) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  ep->local_event = local_event;
  ep->remote_event = remote_event;
  if (ep->rx.view.ctl) ep->rx.view.ctl->credit_event.store(remote_event, std::memory_order_relaxed);  // smsg.cpp
  return GNI_RC_SUCCESS;
}

}  // extern "C"
