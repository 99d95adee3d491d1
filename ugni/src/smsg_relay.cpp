// SMSG across hosts, the library's side (smsg_relay.h).
#include "smsg_relay.h"

#include <cstring>

using namespace nicemu;
namespace cqe = nicemu::abi::cqe;

namespace nicemu::ugni {

gni_return_t relay_open(Ep* ep, const gni_smsg_attr_t* a, uint32_t credit_cq, Mailbox& out) {
  Nic* n = ep->nic;
  abi::ctl::SmsgRelayOpen req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kSmsgRelayOpen);
  req.peer_addr = ep->remote_addr;
  req.peer_inst = ep->remote_id;
  req.mbox = mailbox_attrs(a);
  req.credit_cq = credit_cq;
  abi::ctl::SmsgRelayOpenReply rep{};
  if (gni_return_t rc = daemon_call(n, req, rep, GNI_RC_INVALID_STATE); rc != GNI_RC_SUCCESS) return rc;
  if (!n->self->in_heap(rep.ctl_offset, sizeof(abi::SmsgRelayCtl)) ||
      !n->self->in_heap(rep.ring_offset, abi::kRelayRingBytes))
    return GNI_RC_INVALID_STATE;
  auto* b = reinterpret_cast<abi::SmsgRelayCtl*>(n->self->base + rep.ctl_offset);
  if (b->magic != abi::kRelayMagic || b->credits != a->mbox_maxcredit || b->max_size != a->msg_maxsize)
    return GNI_RC_INVALID_STATE;
  auto* ring = reinterpret_cast<abi::RelayRingCtl*>(n->self->base + rep.ring_offset);
  if (ring->magic != abi::kRelayRingMagic || ring->capacity != abi::kRelayRingCapacity) return GNI_RC_INVALID_STATE;
  {
    std::lock_guard g(n->relay_mu);
    if (n->relay_ring && n->relay_ring != ring) return GNI_RC_INVALID_STATE;  // one ring per CDM
    n->relay_ring = ring;
  }
  out.region = nullptr;  // the mailbox is on another host; the block is in our own region
  out.relay = b;
  out.relay_id = rep.relay;
  out.view = MailboxView{};
  out.view.credits = a->mbox_maxcredit;
  out.view.max_size = a->msg_maxsize;
  out.view.released_seen = b->released.load(std::memory_order_acquire);
  return GNI_RC_SUCCESS;
}

gni_return_t remote_send_failed(Ep* ep, uint32_t msg_id, uint64_t status) {
  ep->tx_failed.store(true, std::memory_order_relaxed);
  if (!ep->src_cq) return GNI_RC_TRANSACTION_ERROR;
  ep->src_cq->ring.push(cqe::make(cqe::kSrcLocalRequest, cqe::kTypeSmsg, status, cqe::kInfoGlobal, 0, msg_id));
  return GNI_RC_SUCCESS;
}

gni_return_t relay_send(Ep* ep, const void* header, uint32_t header_length, const void* data, uint32_t data_length,
                        uint32_t msg_id, uint8_t tag) {
  Mailbox& m = ep->tx;
  Nic* n = ep->nic;
  auto failed = [&](uint64_t st) { return remote_send_failed(ep, msg_id, st); };
  if (n->nic_down.load(std::memory_order_relaxed)) return failed(cqe::kErrNicDown);
  if (uint32_t st = m.relay->state.load(std::memory_order_acquire)) return failed(st);
  const uint32_t s = m.relay->sent.load(std::memory_order_relaxed);
  if (s - m.view.released_seen >= m.view.credits) {
    m.view.released_seen = m.relay->released.load(std::memory_order_acquire);
    if (s - m.view.released_seen >= m.view.credits) {
      stat_add(n, GNI_STAT_SMSG_MBOX_CREDITS_STALL);
      count(n->counters, ctr::cdm::smsg_credit_stalls);
      // Our daemon raises an SMSG event in our receive CQ when credits come back
      // (SmsgRelayCtl::credit_wanted); unless they came back meanwhile.
      m.relay->credit_wanted.store(1, std::memory_order_seq_cst);
      m.view.released_seen = m.relay->released.load(std::memory_order_seq_cst);
      if (s - m.view.released_seen >= m.view.credits) return GNI_RC_NOT_DONE;
    }
  }
  const uint32_t total = header_length + data_length;  // <= smsg_capacity(max_size), checked by the caller
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
  req.posts_before = n->remote_posts_sent.load(std::memory_order_acquire);
  // Into the CDM's relay ring (abi/relay_ring.h); the daemon takes it from there, and only
  // a daemon that had gone idle needs the doorbell (a system call).
  bool ring_doorbell = false;
  {
    std::lock_guard g(n->relay_mu);
    abi::RelayRingCtl* r = n->relay_ring;
    if (!r) return GNI_RC_INVALID_STATE;
    const uint64_t cap = abi::kRelayRingCapacity, len = sizeof req + total;
    const uint64_t need = abi::relay_record_bytes(len);
    uint64_t tail = r->tail.load(std::memory_order_relaxed);  // ours alone to write
    const uint64_t head = r->head.load(std::memory_order_acquire);
    uint64_t off = tail % cap;
    const uint64_t pad = cap - off < need ? cap - off : 0;
    if (tail + pad + need - head > cap) {
      stat_add(n, GNI_STAT_SMSG_MBOX_CREDITS_STALL);
      return GNI_RC_NOT_DONE;  // the daemon is behind: like a credit stall, try again
    }
    char* d = abi::relay_ring_data(r);
    if (pad) {
      const uint32_t p32 = abi::kRelayPad;
      std::memcpy(d + off, &p32, sizeof p32);
      tail += pad;
      off = 0;
    }
    const uint32_t l32 = static_cast<uint32_t>(len);
    std::memcpy(d + off, &l32, sizeof l32);
    std::memcpy(d + off + 4, &req, sizeof req);
    if (header_length) std::memcpy(d + off + 4 + sizeof req, header, header_length);
    if (data_length) std::memcpy(d + off + 4 + sizeof req + header_length, data, data_length);
    r->tail.store(tail + need, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    ring_doorbell = r->armed.load(std::memory_order_relaxed) != 0 && r->armed.exchange(0) != 0;
    m.relay->sent.store(s + 1, std::memory_order_release);
  }
  if (ring_doorbell) {
    abi::ctl::SmsgRelayNote bell{};
    bell.h.op = static_cast<uint16_t>(abi::ctl::Op::kSmsgRelayDoorbell);
    bell.h.length = sizeof bell;
    if (!n->conn.send(&bell, sizeof bell)) {
      n->nic_down = true;
      return failed(cqe::kErrNicDown);
    }
  }
  stat_add(n, GNI_STAT_FMA_LAUNCH_COUNT);
  count(n->counters, ctr::cdm::smsg_sends);
  count(n->counters, ctr::cdm::smsg_send_bytes, total);
  return GNI_RC_SUCCESS;
}

}  // namespace nicemu::ugni
