// MSGQ over the ofi fabric (docs/ofi-fabric.md, "MSGQ"): the frames one rank's libugni sends
// a member rank of another host's node's MSGQ segment (msgq_layout.h) over the CDMs'
// libfabric endpoints (FI_MSG), instead of MsgqRemoteSend through the daemons.
//
//   sender --Send (credential, origin node, src/dst instance, tag, seq, payload)--> member:
//       checked as the target daemon's relay checks MsgqDeliver (our credential, a ring for
//       the origin node, a live destination), put into the ring for the origin node, the
//       destination woken; answered with a Reply (seq, status, credits)
//   sender --Ask (a sender of that node is out of credits)--> member: answered with a Reply
//       (status kOk, seq 0, `ask` set) carrying the credits freed since the last report
//   sender --Ask with `tag` kSyncAsk (its first frame to a member that took over from a dead
//       one)--> member: takes over the ring slots of the origin node it does not yet track
//       (stored by the dead member, still unread) and says how many (`adopted`): their credits,
//       which the sender gave back when the old member died, are taken again, and come back
//       as those slots are read
//
// Credits are the origin node's (TxCredit): the member remembers the ring position of every
// message it stored per (credential, origin node) and, in each Reply, hands out once the
// slots the ring's head has passed since its last report, whichever sender of that node it
// answers. A sender names its stream by a 64-bit `chan` it chose; `seq` counts that stream's
// Sends from 0, so the member stores them in order however the provider delivers them.
// Receivers check everything with parse() before use. All integers little-endian.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nicemu/abi/ctl_header.h"

namespace nicemu::abi::ofimsgq {

inline constexpr uint32_t kMagic = 0x4F514D47;  // "GMQO" on the wire: not ofimsg, ofismsg or ctl
inline constexpr uint16_t kVersion = 2;  // 2: Reply.member_inst, adopted; the sync Ask
inline constexpr uint32_t kMaxPayload = 128;  // msgq::kMaxMsgSize: header + message
inline constexpr uint32_t kMaxSlots = 65536;   // msgq::kMaxQueueSlots: a ring's depth
// The route (OfiLookup) that names "a member of the MSGQ segment of the asker's credential"
// on a node, instead of a memory domain (mem_handle.h: domains < 4096, kVmdhRoute 0x80000000).
inline constexpr uint32_t kMsgqRoute = 0x40000000u;

enum Type : uint16_t { kSend = 1, kAsk = 2, kReply = 3 };
inline constexpr uint8_t kSyncAsk = 1;  // Send.tag of an Ask that asks for the ring's unread slots

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;    // Type
  uint32_t length;  // bytes of the whole frame
  uint32_t seq;     // Send: its index in the stream; Reply: the Send's (0 for an Ask's)
  uint64_t chan;    // the sender's stream
};
static_assert(sizeof(Header) == 24 && offsetof(Header, seq) == 12 && offsetof(Header, chan) == 16);

// Send and Ask (an Ask has no payload: hdr_len = msg_len = 0).
struct Send {
  Header h;
  uint8_t ptag;  // the sender's credential: the member serves its own only
  uint8_t tag;
  uint8_t hdr_len;
  uint8_t msg_len;  // hdr_len + msg_len bytes of payload follow this struct
  uint32_t cookie;
  uint32_t origin_pe;  // the sender's node (NIC address)
  uint32_t src_inst;
  uint32_t dst_inst;
  uint32_t reply_len;  // bytes of reply_addr: the sender's fi_getname
  uint8_t reply_addr[ctl::kOfiAddrMax];
};
static_assert(sizeof(Send) == 48 + ctl::kOfiAddrMax && offsetof(Send, cookie) == 28 &&
              offsetof(Send, reply_addr) == 48);

struct Reply {
  Header h;
  uint64_t status;  // a CQE status (cq_entry.h): 0 stored
  uint32_t freed;   // ring slots of the origin node freed since the member's last report
  uint32_t ask;     // 1: answers an Ask (seq 0), 0: a Send
  uint32_t member_inst;  // the member's own instance: a sender tells its messages to it apart
  uint32_t adopted;      // a sync Ask's answer: unread slots of the origin node taken over
};
static_assert(sizeof(Reply) == 48 && offsetof(Reply, status) == 24 && offsetof(Reply, adopted) == 44);

inline constexpr size_t kMaxFrame = sizeof(Send) + kMaxPayload;

// Whether a received buffer is one of ours (else another kind of ofi message).
inline bool mine(const void* buf, size_t len) {
  uint32_t m;
  if (!buf || len < sizeof(Header)) return false;
  std::memcpy(&m, buf, sizeof m);
  return m == kMagic;
}

inline Header header(Type t, uint64_t chan, uint32_t seq, uint32_t length) {
  return Header{kMagic, kVersion, t, length, seq, chan};
}

// What a received frame is, checked: magic, version, type, exact length (a Send's payload
// within kMaxPayload, an Ask without one), a reply address that fits. kBad: count, drop.
enum class Parsed { kBad, kSend, kAsk, kReply };
inline Parsed parse(const void* buf, size_t len, Send& s, Reply& r) {
  Header h;
  if (!buf || len < sizeof h || len > kMaxFrame) return Parsed::kBad;
  std::memcpy(&h, buf, sizeof h);
  if (h.magic != kMagic || h.version != kVersion || h.length != len) return Parsed::kBad;
  switch (h.type) {
    case kSend:
    case kAsk: {
      if (len < sizeof s) return Parsed::kBad;
      std::memcpy(&s, buf, sizeof s);
      const uint32_t payload = uint32_t{s.hdr_len} + s.msg_len;
      if (payload > kMaxPayload || len != sizeof s + payload) return Parsed::kBad;
      if (s.reply_len == 0 || s.reply_len > sizeof s.reply_addr) return Parsed::kBad;
      if (h.type == kAsk && payload != 0) return Parsed::kBad;
      return h.type == kSend ? Parsed::kSend : Parsed::kAsk;
    }
    case kReply:
      if (len != sizeof r) return Parsed::kBad;
      std::memcpy(&r, buf, sizeof r);
      if (r.ask > 1 || (r.ask && (h.seq != 0 || r.status != 0))) return Parsed::kBad;
      if (r.adopted > kMaxSlots || (r.adopted && !r.ask)) return Parsed::kBad;
      return Parsed::kReply;
    default:
      return Parsed::kBad;
  }
}

}  // namespace nicemu::abi::ofimsgq
