// SMSG over the ofi fabric (docs/ofi-fabric.md, "SMSG"): the frames one rank's libugni
// sends another host's rank over the CDMs' libfabric endpoints (FI_MSG) for an SMSG channel
// whose mailbox is on that host. The mailbox lives in the receiver's heap (shm_layout.h), not
// in memory the provider has registered, so messages are not written into it remotely: the
// receiver's progress thread writes each into its slot, as the daemons' relay does.
//
//   sender --Open (the mailbox's attributes, our credential, where to answer)--> receiver:
//       the receiver opens the mailbox at its daemon and answers OpenReply (its channel id,
//       the mailbox's sent and released counts: the sender resumes the numbering there)
//   sender --Msg (seq, tag, remote event data, payload)--> receiver: written into slot seq
//       (duplicates and messages without a credit are dropped), the remote SMSG event pushed
//   receiver --Note (released)--> sender: credits back, every quarter mailbox of releases,
//       when the sender asked (Ask, sent when it ran out) and at the next release after
//   sender --Ask--> receiver: answered with a Note now (also how a sender out of credits
//       learns its receiver is gone: the Ask's send fails)
//   sender --Batch (records: seq, tag, remote event data, payload)--> receiver: the messages
//       sent while the channel's earlier frames were still in flight, in one frame, each
//       handled as a Msg (one provider message and completion for many SMSG messages)
//
// Channels are named by an index and a 64-bit generation of the side that owns them: a frame
// naming a channel that does not exist (or no longer) is counted and dropped. Receivers check
// everything before use. All integers little-endian, fixed width.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nicemu/abi/ctl_header.h"

namespace nicemu::abi::ofismsg {

inline constexpr uint32_t kMagic = 0x4F534D47;  // "GMSO" on the wire: neither ofimsg nor ctl
inline constexpr uint16_t kVersion = 2;  // 2: Batch (a version-1 peer's Open goes unanswered: relay)
// The largest frame: what a receive buffer holds. A channel whose messages (header + data up
// to smsg_capacity(msg_maxsize), shm_layout.h) do not fit stays on the daemons' relay. Sized
// for Open MPI btl/ugni's largest mailbox (msg_maxsize 8192 below 512 ranks, capped at 16384:
// btl_ugni_add_procs.c, btl_ugni_component.c), so its channels go rank to rank too; the cost
// is the port's 64 posted receive buffers (about 1 MiB per CDM with an ofi port).
inline constexpr size_t kMaxFrame = 16896;

enum Type : uint16_t { kOpen = 1, kOpenReply = 2, kMsg = 3, kNote = 4, kAsk = 5, kBatch = 6 };

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;    // Type
  uint32_t length;  // bytes of the whole frame
  uint32_t chan;    // Open, OpenReply, Note: the sender's channel; Msg, Ask: the receiver's
  uint64_t gen;     // that channel's generation
};
static_assert(sizeof(Header) == 24);

struct Open {
  Header h;
  uint8_t ptag;  // the sender's credential: the receiver serves its own only
  uint8_t reserved[3];
  uint32_t cookie;
  uint64_t qword1;  // the mailbox's memory handle (the remote SMSG attributes)
  uint64_t qword2;
  uint64_t msg_buffer;
  uint32_t mbox_offset;
  uint32_t buff_size;
  uint32_t credits;
  uint32_t max_size;
  uint32_t reply_len;  // bytes of reply_addr: the sender's fi_getname
  uint32_t reserved2;
  uint8_t reply_addr[ctl::kOfiAddrMax];
};
static_assert(sizeof(Open) == 80 + ctl::kOfiAddrMax && offsetof(Open, reply_addr) == 80);

struct OpenReply {
  Header h;
  uint64_t status;  // a CQE status (cq_entry.h): 0 open
  uint64_t rx_gen;
  uint32_t rx_chan;
  uint32_t sent;      // the mailbox's counts: the sender's next sequence number and credits
  uint32_t released;
  uint32_t reserved;
};
static_assert(sizeof(OpenReply) == 56);

struct Msg {
  Header h;
  uint32_t seq;           // the message's index in the mailbox (its slot: seq % credits)
  uint32_t remote_event;  // the sending EP's remote event data
  uint32_t length;        // bytes of payload after this struct (header + data)
  uint8_t tag;
  uint8_t reserved[3];
};
static_assert(sizeof(Msg) == 40);

// A Batch frame is a Header, then records, each a BatchRec, its payload, and padding to the
// next multiple of 8 bytes (the last record's padding may be left out).
struct BatchRec {
  uint32_t seq;
  uint32_t remote_event;
  uint32_t length;  // bytes of payload after this struct
  uint8_t tag;
  uint8_t reserved[3];
};
static_assert(sizeof(BatchRec) == 16);
inline constexpr size_t batch_step(uint32_t length) { return (sizeof(BatchRec) + length + 7) & ~size_t{7}; }

struct Note {
  Header h;
  uint32_t released;      // the receiver's releases, on the mailbox's numbering
  uint32_t credit_event;  // the receiving EP's remote event data (MboxCtl::credit_event)
};
static_assert(sizeof(Note) == 32);

// Whether a received buffer is one of ours (else it is another kind of ofi message).
inline bool mine(const void* buf, size_t len) {
  uint32_t m;
  if (!buf || len < sizeof(Header)) return false;
  std::memcpy(&m, buf, sizeof m);
  return m == kMagic;
}

// The header, checked against the frame: version, length, a type of known size.
inline bool parse_header(const void* buf, size_t len, Header& h) {
  if (len < sizeof h || len > kMaxFrame) return false;
  std::memcpy(&h, buf, sizeof h);
  if (h.magic != kMagic || h.version != kVersion || h.length != len) return false;
  switch (h.type) {
    case kOpen: return len == sizeof(Open);
    case kOpenReply: return len == sizeof(OpenReply);
    case kMsg: return len >= sizeof(Msg);
    case kNote: return len == sizeof(Note);
    case kAsk: return len == sizeof(Header);
    case kBatch: return len >= sizeof(Header) + sizeof(BatchRec);
    default: return false;
  }
}

// The record at `off` of a Batch frame of `len` bytes (its payload follows it): false if the
// record or its payload would run past the frame.
inline bool batch_record(const void* buf, size_t len, size_t off, BatchRec& r) {
  if (off > len || len - off < sizeof r) return false;
  std::memcpy(&r, static_cast<const unsigned char*>(buf) + off, sizeof r);
  return r.length <= len - off - sizeof r;
}

inline Header header(Type t, uint32_t chan, uint64_t gen, uint32_t length) {
  return Header{kMagic, kVersion, t, length, chan, gen};
}

}  // namespace nicemu::abi::ofismsg
