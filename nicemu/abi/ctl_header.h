// The framing shared by the control protocols of nicemu: every message, between a client
// library or tool and its daemon (ctl_protocol.h) or between two daemons (daemon_protocol.h),
// starts with a Header naming its Op; the ops of both are numbered in the one registry here.
// On a Unix socket each message is one SOCK_SEQPACKET packet; across hosts it is the payload
// of a fabric message (wire_protocol.h). Also here: the vocabulary both directions carry.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nicemu::abi::ctl {

inline constexpr uint32_t kMagic = 0x4E43544C;  // "NCTL"
inline constexpr uint16_t kVersion = 9;  // 2: PeerLookup and MboxOpen name memory domains;
                                         // 3: the collective engine (ce_ops.h);
                                         // 4: the status reply comes in pages;
                                         // 5: virtual-MDH registrations, PeerLookup by route;
                                         // 6: DgramCancel names the post (lib_seq);
                                         // 7: DRC credentials (Drc, DrcReply);
                                         // 8: DRC changes acknowledged and undone across
                                         //    daemons, tables exchanged (DrcState, DrcAck,
                                         //    DrcTableAsk, DrcTableEnd); CredReply.created
                                         // 9: the ofi fabric (AttachReply names it; OfiPublish,
                                         //    OfiLookup, OfiAsk, OfiAnswer)
inline constexpr size_t kMaxMessage = 73728;    // every message but a status reply (the largest:
                                                // SmsgRelaySend of a 64 KiB SMSG message)

enum class Op : uint16_t {
  kHello = 1,         // -> HelloReply
  kAttach = 2,        // -> AttachReply + region memfd
  kMemRegister = 3,   // -> MemRegisterReply
  kMemDeregister = 4, // -> Reply
  kCqCreate = 5,      // -> CqCreateReply
  kCqDestroy = 6,     // -> Reply
  kPeerLookup = 7,    // -> PeerLookupReply + peer region memfd
  kMboxOpen = 8,      // -> MboxOpenReply
  kCredIssue = 9,     // -> CredReply
  kCredGrant = 10,    // -> CredReply
  kStatus = 11,       // -> StatusReply (JSON text follows the struct)
  kShutdown = 12,     // -> Reply, then the daemon stops
  kCredRevoke = 13,   // -> Reply
  // Datagrams (session management): matching is done by the daemons.
  // Finished datagrams come back through the CDM's ring (dgram_ring.h); 20-22 (a post,
  // test and probe that each waited for a reply) are retired.
  kDgramCancel = 23,    // -> Reply              cancel an EP's pending datagram
  kDgramIncoming = 24,  // daemon -> daemon, no reply: a directed post aimed at one of your CDMs
  kDgramMatched = 25,   // daemon -> daemon, no reply: your post matched; here is the peer's data
  kDgramRetract = 26,   // daemon -> daemon, no reply: a post forwarded earlier was cancelled
  kDgramOpen = 27,      // -> DgramOpenReply     find or create the CDM's datagram completion ring
  kDgramSubmit = 28,    // no reply: a CDM posts a datagram on one of its EPs (checked by the library)
  kDgramKick = 29,      // no reply: the library drained a ring the daemon had stalled on
  // BTE (GNI_PostRdma): requests travel through a ring in shared memory (bte_ring.h).
  kBteOpen = 40,        // -> BteOpenReply + the node's BTE doorbell eventfd
  kMemRegisterSegments = 60,  // -> MemRegisterReply (a variable-length request)
  kBiConfigSet = 61,          // -> Reply            bandwidth-injection settings of the NIC
  kBiConfigGet = 62,          // -> BiConfigReply
  kFaultSet = 63,             // -> FaultReply       fault injection settings (nicemuctl fault)
  kFaultGet = 64,             // -> FaultReply
  // MSGQ (msgq_layout.h): the node's segment of the domain, and its tables.
  kMsgqJoin = 50,         // -> MsgqJoinReply + segment memfd   GNI_MsgqInit
  kMsgqLeave = 51,        // -> Reply                           GNI_MsgqRelease
  kMsgqConnOpen = 52,     // -> MsgqConnReply                   GNI_MsgqGetConnAttrs
  kMsgqConnect = 53,      // -> MsgqConnReply                   GNI_MsgqConnect
  kMsgqConnRelease = 54,  // -> Reply                           GNI_MsgqConnRelease
  kMsgqLookup = 55,       // -> MsgqLookupReply + segment memfd  a sender maps a node's segment
  // SMSG to a node of another host (docs/fabric.md, "SMSG across hosts"): the sender's
  // daemon relays each message over the fabric to the receiver's daemon.
  kSmsgRelayOpen = 70,    // -> SmsgRelayOpenReply   GNI_SmsgInit towards another host
  kSmsgRelaySend = 71,    // a record of the relay ring (relay_ring.h), never on the socket
  kSmsgOpen = 72,         // daemon -> daemon, no reply: open the receiver's mailbox for a relay
  kSmsgData = 73,         // daemon -> daemon, no reply: one message (variable length)
  kSmsgAck = 74,          // daemon -> daemon, no reply: delivered / released / failure of a relay
  kSmsgClose = 75,        // daemon -> daemon, no reply: the sender's CDM is gone, forget the relay
  kSmsgRelayReleased = 76,  // no reply: a receiver released relayed messages; report credits now
  kSmsgRelayDoorbell = 77,  // no reply: the CDM's relay ring (relay_ring.h) has messages
  // Memory operations on NIC addresses of other hosts (remote_ops.h).
  kRemotePost = 80,   // no reply: a CDM's FMA/AMO/RDMA/CQ-write post for another host's node
  kRmaRequest = 81,   // daemon -> daemon over the fabric: execute one piece at the target
  kRmaReply = 82,     // daemon -> daemon over the fabric: its outcome
  kMsgqRemoteSend = 83,  // no reply: a CDM's GNI_MsgqSend to a node of another host
  kMsgqDeliver = 84,     // daemon -> daemon over the fabric: into the target node's segment
  kMsgqCredit = 85,      // daemon -> daemon over the fabric: ring slots freed, credits back
  kMsgqResult = 86,      // daemon -> daemon over the fabric: messages stored or refused, in order
  // The collective engine (Aries; ce_ops.h): VCE channels of the node and reductions.
  kCeCreate = 90,        // -> CeCreateReply    GNI_CeCreate
  kCeConfigure = 91,     // -> Reply            GNI_CeConfigure
  kCeDestroy = 92,       // -> Reply            GNI_CeDestroy
  kCePost = 93,          // no reply: a leaf's operand (GNI_PostFma, GNI_POST_CE)
  kCeContribute = 94,    // daemon -> daemon: an operand or partial result for a channel's child slot
  kCeResult = 95,        // daemon -> daemon: the result (or error) for a contribution
  kCeProbe = 96,         // daemon -> daemon: is this channel / process still there?
  kCeProbeReply = 97,    // daemon -> daemon: its answer
  kCeMember = 98,        // no reply: a leaf EP of this CDM names its channel (GNI_EpSetCeAttr)
  kCeLeafGone = 99,      // daemon -> daemon: that leaf's CDM is gone before it posted
  kDrc = 100,            // -> DrcReply         libdrc (rdmacred.h): DrcAction
  kRegBudget = 101,      // -> RegBudgetReply   room for registrations the library makes itself
  // 102 (DrcSync, a change without an answer) is retired.
  kCeOpen = 103,         // -> CeOpenReply + memfd  the job's CE post page on this node (ce_ops.h)
  kCeRing = 104,         // no reply: a CE channel's local posts of the round are in the post page
  // DRC credentials between daemons (this host's by their sockets, other hosts' over the
  // fabric; daemon_protocol.h): the state of one credential, its answer, and the table.
  kDrcState = 105,       // daemon -> daemon: a credential's state (a change: answered by DrcAck)
  kDrcAck = 106,         // daemon -> daemon: a change applied, or refused (rc)
  kDrcTableAsk = 107,    // daemon -> daemon: send me your table (answered by DrcStates, DrcTableEnd)
  kDrcTableEnd = 108,    // daemon -> daemon: the table sent is complete
  // The ofi fabric (docs/ofi-fabric.md): ranks move RMA data over libfabric
  // themselves; the daemons only hand out endpoint addresses, to CDMs of the same credential.
  kOfiPublish = 110,     // -> Reply            the CDM's libfabric endpoint address
  kOfiLookup = 111,      // -> OfiLookupReply   the address of (node, route) on another host
  kOfiAsk = 112,         // daemon -> daemon over the fabric: the address of one of your CDMs
  kOfiAnswer = 113,      // daemon -> daemon over the fabric: it, or why not (rc)
};

// Reply codes are gni_return_t values, so libugni can return them unchanged.
struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t op;        // Op
  uint32_t seq;       // echoed in the reply
  uint32_t length;    // bytes of the whole message
};
static_assert(sizeof(Header) == 16);

struct Reply {
  Header h;
  int32_t rc;         // gni_return_t
  uint32_t reserved;
};

template <typename T>
constexpr Header make_header(Op op, uint32_t seq) {
  return Header{kMagic, kVersion, static_cast<uint16_t>(op), seq, static_cast<uint32_t>(sizeof(T))};
}
static_assert(offsetof(Reply, rc) == 16);

inline constexpr uint32_t kDgramMaxSize = 128;  // GNI_DATAGRAM_MAXSIZE
// Grants one DRC credential may carry (a further grant is refused with
// GNI_RC_ERROR_RESOURCE): its whole state then fits in one daemon message (daemon_protocol.h, DrcState).
inline constexpr uint32_t kDrcMaxGrants = 1024;

// A receiver's mailbox as GNI_SmsgInit's remote attributes name it: the registration of its
// area, the area's address, the mailbox's offset and size, its credits and message size.
// SmsgRelayOpen and SmsgOpen carry it whole; MboxOpen has the same fields in another order.
struct MailboxAttrs {
  uint64_t qword1;
  uint64_t qword2;
  uint64_t msg_buffer;
  uint32_t mbox_offset;
  uint32_t buff_size;
  uint32_t credits;
  uint32_t max_size;
  bool operator==(const MailboxAttrs&) const = default;
};
static_assert(sizeof(MailboxAttrs) == 40);

// Mailbox attributes into MboxOpen's fields (or a MailboxAttrs): the receiver's daemon opens
// the mailbox an SmsgOpen names as its own library's GNI_SmsgInit would.
template <class Dst, class Src>
constexpr void copy_mailbox_attrs(Dst& d, const Src& s) {
  d.qword1 = s.qword1;
  d.qword2 = s.qword2;
  d.msg_buffer = s.msg_buffer;
  d.mbox_offset = s.mbox_offset;
  d.buff_size = s.buff_size;
  d.credits = s.credits;
  d.max_size = s.max_size;
}

// Longest libfabric endpoint address carried (fi_getname): a sockaddr_in6 is 28 bytes;
// providers with longer names (verbs' IB addresses are 32-48) fit too.
inline constexpr uint32_t kOfiAddrMax = 64;
// Which data plane a daemon's CDMs use across hosts (AttachReply::fabric_data).
inline constexpr uint32_t kFabricDataUdp = 0;  // through the daemons (UDP fabric)
inline constexpr uint32_t kFabricDataOfi = 1;  // PUT/GET rank to rank over libfabric
inline constexpr uint32_t kOfiProviderMax = 64;  // AttachReply::ofi_provider, NUL-terminated

// Largest SMSG message (header + data) carried across hosts: an SmsgData (daemon_protocol.h,
// 40 bytes, asserted there) and the message must fit one fabric message (wire::kMaxMessage,
// 64 KiB).
inline constexpr uint32_t kSmsgRelayMaxSize = 65536 - 40;

}  // namespace nicemu::abi::ctl
