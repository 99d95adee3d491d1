// Memory operations on a NIC address of another host: FMA PUT/GET, AMOs, RDMA (BTE) and CQ
// writes, defined once for the library, the initiating daemon and the target daemon.
//
//   library --RemotePost (one-way, attach socket)--> its daemon (the initiating NIC)
//   initiating daemon --RmaRequest (fabric)--> target daemon: validates against the target
//       CDM's registration table, moves the bytes with process_vm_readv/writev, runs the
//       AMO under the target's AMO lock, posts the remote event / the CQ write entry
//   target daemon --RmaReply (fabric)--> initiating daemon: status, GET bytes, the fetched
//       AMO value; when every piece is answered it posts the local/global events
//
// A transfer longer than kRmaPiece travels as several pieces (each its own request and
// reply), kept within a per-peer window of bytes in flight. The target validates the whole
// transfer ([base_addr, base_addr + total_length)) with every piece, so an access outside the
// registration writes nothing at all. The reliable channel under these messages delivers
// each exactly once and in order: a request is never executed twice, and an answer lost on
// the wire is retransmitted from the target's send window (the responder's cache), never
// recomputed.
//
// All integers little-endian, fixed width; every message starts with ctl::Header (its op
// and exact length are checked before anything else).
#pragma once
#include <cstddef>
#include <cstdint>

#include "nicemu/abi/ctl_header.h"

namespace nicemu::abi::remote {

// Ops: ctl::Op::kRemotePost (library -> its daemon, no reply), kRmaRequest and kRmaReply
// (daemon -> daemon, over the fabric).

enum Kind : uint16_t {
  kPut = 1,      // initiator bytes -> target registration (FMA PUT, PUT_W_SYNCFLAG, RDMA PUT)
  kGet = 2,      // target registration -> initiator registration (FMA GET, RDMA GET)
  kAmo = 3,      // GNI_POST_AMO: amo_cmd, operands; fetching forms write the old value back
  kCqWrite = 4,  // GNI_PostCqWrite: operand1's low 48 bits into the CQ of the target handle
};

enum Engine : uint16_t {
  kFma = 0,  // local events with the FMA sources, remote event as a remote request
  kBte = 1,  // local events with the BTE source, remote event as a remote DMA
};

enum Flags : uint16_t {
  kFlagSyncFlag = 1,     // PUT_W_SYNCFLAG: the 8-byte flag is written after the data
  kFlagRemoteEvent = 2,  // GNI_CQMODE_REMOTE_EVENT: an event into the target's CQ at the end
  kFlagLast = 4,         // (RmaRequest) the last piece of the transfer
  // (RemotePost) the target is a process of this host that the initiator may not reach by
  // cross-memory attach: the initiating daemon's BTE engine executes it (bte_proxy.h)
  kFlagSameHost = 8,
};

// Bytes of one piece: well inside the fabric's largest message (64 KiB).
inline constexpr uint64_t kRmaPiece = 32 * 1024;
// FMA PUT payloads up to this size travel inside RemotePost (copied when posted, so the
// caller may reuse its buffer at once, as with the hardware's FMA window); longer ones are
// read from the caller's memory when sent.
inline constexpr uint32_t kInlineMax = 16 * 1024;

struct RemotePost {
  ctl::Header h;
  uint16_t kind;          // Kind
  uint16_t engine;        // Engine
  uint16_t flags;         // Flags (kFlagSyncFlag, kFlagRemoteEvent)
  uint16_t cq_mode;       // GNI_CQMODE_* local/global bits
  uint32_t src_cq;        // initiator's CQ slot for the local events, or kNoCq
  uint32_t tid;           // CQE tid of the local events, or kBteNoTid (none requested)
  uint32_t local_event;
  uint32_t remote_event;
  uint32_t remote_nic;    // target NIC address (the EP's binding); the target CDM is the
  uint32_t reserved0;     // memory domain of remote_qword1, whatever id the EP was bound with
  uint32_t amo_cmd;       // gni_fma_cmd_type_t value (kAmo)
  uint32_t inline_length; // PUT bytes following this struct (0: read from local_addr)
  uint64_t local_addr;
  uint64_t local_qword1;  // initiator's registration (GET, RDMA PUT, fetching AMO)
  uint64_t local_qword2;
  uint64_t remote_addr;
  uint64_t remote_qword1;
  uint64_t remote_qword2;
  uint64_t length;
  uint64_t operand1;      // AMO first operand; CQ write value; sync flag value
  uint64_t operand2;      // AMO second operand (compare-and-swap)
  uint64_t sync_flag_addr;
  // A member of a chain (GNI_CtPostFma, GNI_CtPostCqWrite) whose target is on another host:
  // every such member is its own RemotePost with the same chain_id and the first
  // descriptor's event fields (src_cq, tid, cq_mode, local_event). The daemon posts the
  // chain's one local event when the last of them is answered, with the status of the
  // lowest-indexed member that failed: its own members' or the one the library reports for
  // the members it ran itself (same host). chain_id 0: not a chain member.
  uint64_t chain_id;           // unique among the CDM's chains
  uint32_t chain_members;      // members of the chain posted to the daemon, 1..kMaxChainMembers
  uint32_t chain_index;        // this member's place in the chain (0: the first descriptor)
  uint32_t chain_fail_index;   // the first member the library ran that failed, or kNoChainFailure
  uint32_t chain_fail_status;  // its CQE status
};
static_assert(sizeof(RemotePost) == 160);
static_assert(offsetof(RemotePost, local_addr) == 56 && offsetof(RemotePost, sync_flag_addr) == 128 &&
              offsetof(RemotePost, chain_id) == 136 && offsetof(RemotePost, chain_fail_status) == 156);
inline constexpr uint32_t kMaxChainMembers = 1u << 16;  // the library's longest chain
inline constexpr uint32_t kNoChainFailure = 0xFFFFFFFFu;
static_assert(sizeof(RemotePost) + kInlineMax <= ctl::kMaxMessage);

struct RmaRequest {
  ctl::Header h;
  uint64_t id;            // the initiating daemon's operation id, echoed in the reply
  uint16_t kind;          // Kind
  uint16_t engine;        // Engine
  uint16_t flags;         // Flags
  uint16_t reserved0;
  uint32_t reserved2;     // the target CDM is the memory domain of qword1
  uint32_t ptag;          // the initiator's protection domain (its daemon's word)
  uint32_t cookie;
  uint32_t remote_event;
  uint32_t amo_cmd;
  uint32_t reserved1;
  uint64_t base_addr;     // the whole transfer, validated with every piece
  uint64_t total_length;
  uint64_t offset;        // this piece: [base_addr + offset, + length)
  uint64_t length;        // PUT: this many bytes follow the struct
  uint64_t qword1;        // the target's registration
  uint64_t qword2;
  uint64_t operand1;
  uint64_t operand2;
  uint64_t sync_flag_addr;
};
static_assert(sizeof(RmaRequest) == 128);
static_assert(offsetof(RmaRequest, base_addr) == 56 && offsetof(RmaRequest, sync_flag_addr) == 120);

struct RmaReply {
  ctl::Header h;
  uint64_t id;
  uint64_t offset;   // the piece answered
  uint64_t status;   // a CQE status (cq_entry.h)
  uint64_t fetched;  // AMO: the target's old value
  uint64_t length;   // GET: this many bytes follow the struct
};
static_assert(sizeof(RmaReply) == 56);
static_assert(sizeof(RmaRequest) + kRmaPiece <= 64 * 1024 && sizeof(RmaReply) + kRmaPiece <= 64 * 1024);

// MSGQ across hosts. GNI_MsgqSend to a node of another host: the library sends
// MsgqRemoteSend to its daemon (it checked the connection and the size); the daemon checks
// the sender is a member connected to that node and forwards MsgqDeliver; the target's
// daemon puts the entry into its segment's ring for the origin node, for the destination
// instance, as a same-host sender would, and wakes it. Its outcomes go back in order, as
// MsgqResult runs per origin node, and the sender's daemon posts each message's local
// completion then, as the hardware's FMA PUT completes when the target answers: a message
// nobody can take (no queue of the domain, no ring for the origin, no such destination)
// completes with an error. Senders take a credit per message (msgq_layout.h, TxCredit: at
// most the ring's depth in flight per node pair, GNI_RC_NOT_DONE beyond); the target's
// daemon sends MsgqCredit back as receivers free ring slots (and for every message it could
// not store). A ring full anyway (credits forged, depths that differ) holds the message at
// the target's daemon, in order, until there is room.
inline constexpr uint32_t kMsgqMaxPayload = 128;  // msgq::kMaxMsgSize (GNI_MSGQ_MSG_SZ_MAX)

struct MsgqRemoteSend {
  ctl::Header h;
  uint32_t dst_pe;
  uint32_t dst_inst;
  uint16_t hdr_len;
  uint16_t msg_len;
  uint8_t tag;
  uint8_t reserved[3];
  uint32_t snd_cq;   // the sender's CQ slot for the local completion, or kNoCq
  uint32_t msg_id;   // the completion's msg_id
  uint8_t payload[kMsgqMaxPayload];  // header then message
};
static_assert(sizeof(MsgqRemoteSend) == 168 && offsetof(MsgqRemoteSend, payload) == 40);

struct MsgqDeliver {
  ctl::Header h;
  uint32_t origin_pe;  // the sending node (must be the fabric peer it came from)
  uint32_t src_inst;   // the sender's instance (its daemon's word)
  uint32_t dst_inst;
  uint32_t ptag;       // the sender's protection domain: selects the target's segment
  uint32_t cookie;
  uint16_t hdr_len;
  uint16_t msg_len;
  uint8_t tag;
  uint8_t reserved[7];
  uint8_t payload[kMsgqMaxPayload];
};
static_assert(sizeof(MsgqDeliver) == 176);
static_assert(offsetof(MsgqDeliver, payload) == 48);

// The target's outcomes of an origin's messages, in the order they arrived: `count`
// messages with CQE status `status` (0: stored), run after run.
struct MsgqResultRun {
  uint32_t count;
  uint32_t status;
};
inline constexpr uint32_t kMsgqMaxRuns = 256;
struct MsgqResult {
  ctl::Header h;
  uint32_t origin_pe;  // the node whose daemon stored them (must be the fabric peer it came from)
  uint32_t runs;       // MsgqResultRun entries following the struct, 1..kMsgqMaxRuns
};
static_assert(sizeof(MsgqResult) == 24 && sizeof(MsgqResultRun) == 8);

struct MsgqCredit {
  ctl::Header h;
  uint32_t origin_pe;  // the node whose ring freed slots (must be the fabric peer it came from)
  uint32_t ptag;       // the domain: selects the receiving daemon's segment
  uint32_t cookie;
  uint32_t freed;      // slots freed since the last MsgqCredit: added to TxCredit::returned
};
static_assert(sizeof(MsgqCredit) == 32);

}  // namespace nicemu::abi::remote
