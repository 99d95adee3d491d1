// The ordering model (docs/ordering.md) on the ofi fabric. A CDM reaches a peer on two
// paths: RMA (fi_write / fi_read, delivery complete) and messages (AMOs, CQ writes, GETs'
// remote events), which the target's port executes when it reads its CQ. Each path keeps
// its own order, not the order between them: an AMO's message may wait in the target's CQ
// while a later PUT's data lands. So per (CDM, peer) this counts what is in flight on each
// path until it took effect (an RMA's delivery-complete completion, a message's reply), and
// a post waits, driving the provider, until nothing it may not pass is in flight.
//
// The initiator does not see the target registration's PI flags (they live in the target's
// table), so a post in the default class is ordered as a strict one would be against the
// other path and where the provider does not order its RMA (a default post may pass less,
// never more). Relaxed posts (fault configuration `ordering=relaxed`) never wait, and only
// strict posts wait for them. Within the RMA path the provider's order bits (msg_order)
// keep the order; where one is missing the post waits for the earlier operations of that
// kind (a fence). Within the message path one connection delivers in send order
// (FI_ORDER_SAS) and the target executes in its CQ's order. SMSG messages are counted from
// their send until their frame completes (delivery complete); messages of one channel keep
// their order by sequence number, those of different channels need none.
#pragma once
#include <atomic>
#include <cstdint>

#include "ordering_model.h"

namespace nicemu::ugni {

struct Nic;

// SMSG messages are a path of their own: a message is counted from GNI_SmsgSend, but may
// wait in a batch until a frame of its channel completes, so the port's other messages, sent
// at once, are not behind it on the connection.
enum class OfiPath : uint8_t { kWrite, kRead, kMsg, kSmsg };
constexpr int kOfiPaths = 4;

// What the provider orders within its endpoint: a bit of tx_attr->msg_order whose
// max_order_*_size covers any post (max_msg_size).
struct OfiOrderCaps {
  bool raw = false, war = false, waw = false, rar = false, sas = false;
};

// A post counted in flight (taken by ofi_order_enter, given back by ofi_order_leave once).
struct OfiOrderTicket {
  uint16_t slot = 0;
  uint8_t path = 0;
  uint8_t relaxed = 0;
  bool held = false;
};

class OfiOrder {
 public:
  explicit OfiOrder(const OfiOrderCaps& caps) : caps_(caps) {}
  // Before a post on `path` to `peer` (its AV address) is issued: waits until what it may
  // not pass has taken effect, calling `drive(n)` (the provider's progress) meanwhile, then
  // counts it. The caller gives the ticket back when it took effect.
  OfiOrderTicket enter(Nic* n, uint64_t peer, OfiPath path, ordering::Class cls, void (*drive)(Nic*));
  void leave(const OfiOrderTicket& t);
  const OfiOrderCaps& caps() const { return caps_; }

 private:
  // Peers share slots by AV address modulo kSlots: a collision only makes a post wait for
  // another peer's (more order than asked, never less).
  static constexpr uint32_t kSlots = 256;
  struct Slot {
    std::atomic<int32_t> n[kOfiPaths][2] = {};  // [path][relaxed]
  };
  bool must_wait(const Slot& s, OfiPath path, ordering::Class cls) const;
  OfiOrderCaps caps_;
  Slot slots_[kSlots];
};

// The port's order (nullptr without a port): SMSG over ofi counts its messages there.
OfiOrder* ofi_order(Nic* n);

}  // namespace nicemu::ugni
