// Messages between the daemons of emulated nodes, on this host (daemon_links.h) or across
// hosts (over the fabric, authenticated by the cluster key): datagram matching, DRC
// changes, SMSG relays. They share the header and the op registry with the client protocol
// (ctl_header.h); the memory operations and the collective engine's messages have their own
// headers (remote_ops.h, ce_ops.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "nicemu/abi/ctl_header.h"

namespace nicemu::abi::ctl {

// DRC credentials (ctl_protocol.h, Drc) are cluster-wide, as Cray's are: every daemon holds
// the same table. The daemon a client asked applies a change, then sends the credential's
// new state to every other daemon, of this host (by their sockets) and of the others (over
// the fabric, authenticated by the cluster key), each answering DrcAck. One that refuses
// (the credential's ptag and cookie are another credential's there) makes the origin restore
// the state from before, here and on every daemon that accepted, and tell the client.
// States carry a revision: a daemon takes a state only when it is newer than its own, so a
// repeated, late or crossed message changes nothing. A released credential is a state too
// (not kDrcLive), remembered as such, so a daemon that was away learns of the release.
// A daemon asks every other for its table at start (DrcTableAsk; the answer is a DrcState
// per credential and a DrcTableEnd) and admits no one to a credential before it has one
// answer from a daemon that had its table already, or every daemon asked answered, or none
// answered in time (docs/decisions.md, "DRC credentials across daemons").
inline constexpr uint32_t kDrcLive = 2;  // DrcState.flags: the credential exists (else released)
struct DrcState {
  Header h;
  uint64_t txn;     // the origin's change (answer with DrcAck); 0: no answer wanted
  uint64_t rev;     // the credential's revision (1 = acquired), newer wins
  uint32_t origin;  // NIC address of the sender
  uint32_t id;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t uid;     // the owner
  uint32_t flags;   // kDrcFlex, kDrcLive
  uint32_t ngrants;
  uint32_t reserved;
  // followed by ngrants (DrcGrant, value) pairs of uint32_t
};
static_assert(sizeof(DrcState) == 64);
static_assert(sizeof(DrcState) + kDrcMaxGrants * 8 <= kMaxMessage);
struct DrcAck {
  Header h;
  uint64_t txn;
  uint32_t origin;  // the answering daemon's NIC address
  int32_t rc;       // gni_return_t: kSuccess, or why the state was refused
};
static_assert(sizeof(DrcAck) == 32);
struct DrcTableAsk {
  Header h;
  uint32_t origin;
  uint32_t reserved;
};
static_assert(sizeof(DrcTableAsk) == 24);
struct DrcTableEnd {
  Header h;
  uint32_t origin;
  uint32_t count;   // DrcStates sent before it
  uint32_t synced;  // 1: the sender's table was current (it had converged itself)
  uint32_t reserved;
};
static_assert(sizeof(DrcTableEnd) == 32);

// Between daemons. `origin_key` names the post at the origin daemon.
struct DgramIncoming {
  Header h;
  uint64_t origin_key;
  uint32_t origin_node;
  uint32_t from_inst;   // poster (on origin_node)
  uint32_t to_inst;     // target CDM on the receiving daemon
  uint32_t ptag;
  uint32_t cookie;
  uint16_t data_len;
  uint16_t buf_size;
  uint8_t data[kDgramMaxSize];
};
struct DgramMatched {
  Header h;
  uint64_t origin_key;  // the post being completed (at the receiving daemon)
  uint64_t peer_key;    // the post it matched (at the sender), so a forwarded copy of it is dropped
  uint32_t peer_node;
  uint32_t peer_inst;
  uint16_t data_len;
  uint16_t reserved[3];
  uint8_t data[kDgramMaxSize];
};
// The origin's post `origin_key` is gone (cancelled, its CDM gone). Keys start at 1;
// `origin_key` 0 (kDgramResetKey) says the origin lost the receiver (silent past the retry
// budget, or restarted) and ended every datagram between the two: the receiver fails its own
// posts towards the origin and forgets the origin's announcements.
inline constexpr uint64_t kDgramResetKey = 0;
struct DgramRetract {
  Header h;
  uint64_t origin_key;
  uint32_t origin_node;
  uint32_t reserved;
};
static_assert(sizeof(DgramIncoming) <= kMaxMessage && sizeof(DgramMatched) <= kMaxMessage);

// Between daemons (over the fabric). `relay` is the sender daemon's name of the channel;
// the receiver's daemon keys its state by (sending node, relay).
struct SmsgOpen {
  Header h;
  uint32_t origin_node;  // must be the fabric sender
  uint32_t relay;
  uint32_t from_inst;    // sender CDM (on origin_node)
  uint32_t to_inst;      // receiver CDM, here
  uint32_t ptag;
  uint32_t cookie;
  MailboxAttrs mbox;
};


struct SmsgData {
  Header h;
  uint32_t relay;
  uint32_t seq;          // the relay's numbering, from 0
  uint32_t remote_event;
  uint32_t length;       // bytes following the struct
  uint8_t tag;
  uint8_t reserved[7];
};
// Receiver's daemon -> sender's daemon: messages [0, delivered) are in the mailbox, the
// receiver released [0, released); status != 0 (a cqe:: error status): the relay is dead.
struct SmsgAck {
  Header h;
  uint32_t relay;
  uint32_t delivered;
  uint32_t released;
  uint32_t status;
  uint32_t credit_event;   // what the sender's credit event carries (the receiver EP's remote event data)
  uint32_t reserved;
};
struct SmsgClose {
  Header h;
  uint32_t relay;
  uint32_t reserved;
};
// The ofi fabric (ctl_protocol.h, OfiLookup): the initiator's daemon asks the target's for
// the endpoint address of the CDM (route) in the credential (ptag, cookie) of the asking
// CDM; the answer echoes `id`. rc: GNI_RC_SUCCESS, or GNI_RC_NO_MATCH (no CDM of that
// credential there, or it published no address).
struct OfiAsk {
  Header h;
  uint64_t id;
  uint32_t route;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t reserved;
};
struct OfiAnswer {
  Header h;
  uint64_t id;
  int32_t rc;
  uint32_t addr_len;
  uint8_t addr[kOfiAddrMax];
};
static_assert(sizeof(OfiAsk) == 40 && sizeof(OfiAnswer) == 32 + kOfiAddrMax);

static_assert(sizeof(SmsgData) + kSmsgRelayMaxSize == 65536);
static_assert(sizeof(SmsgData) == 40 && sizeof(SmsgOpen) == 80 && sizeof(SmsgAck) == 40);

}  // namespace nicemu::abi::ctl
