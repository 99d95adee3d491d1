// The ofi fabric's small messages (docs/ofi-fabric.md): what one rank's libugni sends to
// another host's rank over the CDMs' libfabric endpoints (FI_MSG), for the operations the
// target's own progress thread executes rather than the provider:
//
//   initiator --Request (kAmo, kEvent, kCqWrite)--> target CDM's endpoint: checked against
//       the target's registration table as the daemons' responder checks an RmaRequest;
//       kAmo runs under the target's AMO lock with nicemu's AMO ALU, kEvent pushes the
//       remote event of a GET whose fi_read completed, kCqWrite pushes a CQ write entry
//   target --Reply--> the address the request names: status (a CQE status), fetched value
//   initiator --Request (kKey)--> target: the provider key of the handle qword1/qword2, for
//       providers whose keys are their own (FI_MR_PROV_KEY): the reply's `fetched` is the key
//       (64 bits), or status PROTECTION when the target has no registration of that handle
//
// A reply answers the request of the same id; an id the initiator is not waiting for is
// dropped. Receivers check everything with parse() before use: a malformed or unexpected
// message is counted and dropped, never trusted. All integers little-endian, fixed width.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nicemu/abi/ctl_header.h"

namespace nicemu::abi::ofimsg {

inline constexpr uint32_t kMagic = 0x4F464D47;  // "GMFO" on the wire: not a ctl::Header
inline constexpr uint16_t kVersion = 2;  // 2: kKey

enum Type : uint16_t {
  kAmo = 1,      // GNI_POST_AMO: amo_cmd, operands; the fetched value comes back
  kEvent = 2,    // the remote event of a GET (FMA or RDMA) whose data the initiator has read
  kCqWrite = 3,  // GNI_PostCqWrite: operand1's low 48 bits into the CQ of the handle
  kReply = 4,
  kKey = 5,      // the provider key of the target's registration (FI_MR_PROV_KEY)
};
static_assert(kAmo == 1 && kEvent == 2 && kCqWrite == 3 && kReply == 4 && kKey == 5);  // wire values

enum Flags : uint16_t {
  kFlagRemoteEvent = 1,  // kAmo: the remote event into the registration's CQ once done
};
inline constexpr uint16_t kFlagsKnown = kFlagRemoteEvent;

enum Engine : uint8_t { kFma = 0, kBte = 1 };  // the remote event's source (kEvent)

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;     // Type
  uint32_t length;   // bytes of the whole message
  uint32_t reserved;
  uint64_t id;       // the initiator's, echoed by the reply
};
static_assert(sizeof(Header) == 24 && offsetof(Header, type) == 6 && offsetof(Header, id) == 16);

struct Request {
  Header h;
  uint8_t ptag;           // the initiator's credential: the target serves its own only
  uint8_t engine;         // Engine
  uint16_t flags;         // Flags
  uint32_t cookie;
  uint32_t amo_cmd;       // gni_fma_cmd_type_t value (kAmo)
  uint32_t remote_event;  // the initiating EP's remote event data
  uint64_t qword1;        // the target's memory handle
  uint64_t qword2;
  uint64_t addr;          // remote address (kAmo: the word; kEvent: the GET's start)
  uint64_t length;        // kAmo: the descriptor's length; kEvent: the GET's
  uint64_t operand1;      // kAmo: first operand; kCqWrite: the value
  uint64_t operand2;
  uint32_t reply_len;     // bytes of reply_addr: the initiator's fi_getname
  uint32_t reserved;
  uint8_t reply_addr[ctl::kOfiAddrMax];
};
static_assert(sizeof(Request) == 96 + ctl::kOfiAddrMax);
static_assert(offsetof(Request, ptag) == 24 && offsetof(Request, cookie) == 28 && offsetof(Request, qword1) == 40 &&
              offsetof(Request, operand2) == 80 && offsetof(Request, reply_len) == 88 &&
              offsetof(Request, reply_addr) == 96);

struct Reply {
  Header h;
  uint64_t status;   // a CQE status (nicemu/abi/cq_entry.h): 0 done
  uint64_t fetched;  // kAmo: the old value, zero-extended; kKey: the key
};
static_assert(sizeof(Reply) == 40 && offsetof(Reply, status) == 24 && offsetof(Reply, fetched) == 32);

// Receive buffers hold the largest message.
inline constexpr size_t kMaxMessage = sizeof(Request);

inline Header header(Type t, uint64_t id, uint32_t length) { return Header{kMagic, kVersion, t, length, 0, id}; }

// What a received message is, checked: magic, version, type, exact length, and for a request
// its fields' ranges. kBad: count it and drop it.
enum class Parsed { kBad, kRequest, kReply };
inline Parsed parse(const void* buf, size_t len, Request& rq, Reply& rp) {
  Header h;
  if (!buf || len < sizeof h) return Parsed::kBad;
  std::memcpy(&h, buf, sizeof h);
  if (h.magic != kMagic || h.version != kVersion || h.length != len) return Parsed::kBad;
  switch (h.type) {
    case kAmo:
    case kEvent:
    case kCqWrite:
    case kKey:
      if (len != sizeof rq) return Parsed::kBad;
      std::memcpy(&rq, buf, sizeof rq);
      if (rq.reply_len == 0 || rq.reply_len > sizeof rq.reply_addr) return Parsed::kBad;
      if (rq.engine != kFma && rq.engine != kBte) return Parsed::kBad;
      if (rq.flags & ~kFlagsKnown) return Parsed::kBad;
      if (h.type == kEvent && rq.length == 0) return Parsed::kBad;
      if (h.type == kAmo && (rq.length == 0 || rq.length > 16)) return Parsed::kBad;
      return Parsed::kRequest;
    case kReply:
      if (len != sizeof rp) return Parsed::kBad;
      std::memcpy(&rp, buf, sizeof rp);
      return Parsed::kReply;
    default:
      return Parsed::kBad;
  }
}

}  // namespace nicemu::abi::ofimsg
