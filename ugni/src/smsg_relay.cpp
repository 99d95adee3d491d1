// SMSG across hosts, the library's side (smsg_relay.h).
#include "smsg_relay.h"

#include <cstring>

using namespace nicemu;
namespace cqe = nicemu::abi::cqe;

namespace nicemu::ugni {

gni_return_t relay_open(Ep* ep, const gni_smsg_attr_t* a, Mailbox& out) {
  Nic* n = ep->nic;
  abi::ctl::SmsgRelayOpen req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kSmsgRelayOpen);
  req.peer_addr = ep->remote_addr;
  req.peer_inst = ep->remote_id;
  req.qword1 = a->mem_hndl.qword1;
  req.qword2 = a->mem_hndl.qword2;
  req.msg_buffer = reinterpret_cast<uint64_t>(a->msg_buffer);
  req.mbox_offset = a->mbox_offset;
  req.buff_size = a->buff_size;
  req.credits = a->mbox_maxcredit;
  req.max_size = a->msg_maxsize;
  abi::ctl::SmsgRelayOpenReply rep{};
  if (!n->conn.call(req, rep)) return GNI_RC_INVALID_STATE;
  if (rep.r.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.r.rc);
  if (!n->self->in_heap(rep.ctl_offset, sizeof(abi::SmsgRelayCtl))) return GNI_RC_INVALID_STATE;
  auto* b = reinterpret_cast<abi::SmsgRelayCtl*>(n->self->base + rep.ctl_offset);
  if (b->magic != abi::kRelayMagic || b->credits != a->mbox_maxcredit || b->max_size != a->msg_maxsize)
    return GNI_RC_INVALID_STATE;
  out.region = nullptr;  // the mailbox is on another host; the block is in our own region
  out.relay = b;
  out.relay_id = rep.relay;
  out.view = MailboxView{};
  out.view.credits = a->mbox_maxcredit;
  out.view.max_size = a->msg_maxsize;
  out.view.released_seen = b->released.load(std::memory_order_acquire);
  out.relay_buf.assign(sizeof(abi::ctl::SmsgRelaySend) + a->msg_maxsize, 0);
  return GNI_RC_SUCCESS;
}

gni_return_t relay_send(Ep* ep, const void* header, uint32_t header_length, const void* data, uint32_t data_length,
                        uint32_t msg_id, uint8_t tag) {
  Mailbox& m = ep->tx;
  Nic* n = ep->nic;
  auto failed = [&](uint64_t st) {
    // As a send to a dead receiver on this host: an error event in our CQ.
    if (!ep->src_cq) return GNI_RC_TRANSACTION_ERROR;
    ep->src_cq->ring.push(cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, st, cqe::kInfoGlobal, 0, msg_id));
    return GNI_RC_SUCCESS;
  };
  if (n->nic_down.load(std::memory_order_relaxed)) return failed(cqe::kErrNicDown);
  if (uint32_t st = m.relay->state.load(std::memory_order_acquire)) return failed(st);
  const uint32_t s = m.relay->sent.load(std::memory_order_relaxed);
  if (s - m.view.released_seen >= m.view.credits) {
    m.view.released_seen = m.relay->released.load(std::memory_order_acquire);
    if (s - m.view.released_seen >= m.view.credits) {
      n->stats[GNI_STAT_SMSG_MBOX_CREDITS_STALL].fetch_add(1, std::memory_order_relaxed);
      count(n->counters, ctr::cdm::smsg_credit_stalls);
      return GNI_RC_NOT_DONE;
    }
  }
  const uint32_t total = header_length + data_length;  // <= max_size, checked by the caller
  abi::ctl::SmsgRelaySend req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kSmsgRelaySend);
  req.h.length = static_cast<uint32_t>(sizeof req + total);
  req.relay = m.relay_id;
  req.seq = s;
  req.msg_id = msg_id;
  req.remote_event = ep->remote_event;
  req.src_cq = ep->src_cq ? ep->src_cq->slot : abi::kNoCq;
  req.length = total;
  req.tag = tag;
  char* p = m.relay_buf.data();
  std::memcpy(p, &req, sizeof req);
  if (header_length) std::memcpy(p + sizeof req, header, header_length);
  if (data_length) std::memcpy(p + sizeof req + header_length, data, data_length);
  if (!n->conn.send(p, sizeof req + total)) {
    n->nic_down = true;
    return failed(cqe::kErrNicDown);
  }
  m.relay->sent.store(s + 1, std::memory_order_release);
  n->stats[GNI_STAT_FMA_LAUNCH_COUNT].fetch_add(1, std::memory_order_relaxed);
  count(n->counters, ctr::cdm::smsg_sends);
  count(n->counters, ctr::cdm::smsg_send_bytes, total);
  return GNI_RC_SUCCESS;
}

}  // namespace nicemu::ugni
