// Control protocol between client libraries / tools and the nicemu daemon: one fixed-size
// binary message per SOCK_SEQPACKET packet on a Unix socket, request then reply. File
// descriptors (the region memfd) travel as SCM_RIGHTS with the reply. The attach
// connection of a CDM lives as long as the CDM: its closure is how the daemon learns that
// a client died. Other connections (peer lookups, tools) are short-lived or cached.
// The messages of the daemon with other daemons are in daemon_protocol.h; both share the
// header and the op registry (ctl_header.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "nicemu/abi/ctl_header.h"
#include "nicemu/abi/msgq_layout.h"

namespace nicemu::abi::ctl {

// A status document can be megabytes on a busy node (hundreds of CDMs), more than one
// seqpacket message may carry (the socket buffer bounds it), so it is read in pages.
inline constexpr uint32_t kStatusPage = 65536;

struct Hello {
  Header h;
};
struct HelloReply {
  Reply r;
  uint32_t nic_addr;
  uint32_t device_type;
  uint32_t daemon_pid;
  uint16_t abi_version;
  uint16_t reserved;
};

struct Attach {
  Header h;
  uint32_t inst_id;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t modes;
  uint32_t pid;
  uint16_t abi_version;
  uint16_t reserved;
};
struct AttachReply {
  Reply r;
  uint32_t nic_addr;
  uint32_t device_type;
  uint64_t attach_id;
  uint64_t region_size;
  uint64_t ro_size;
  uint32_t mem_domain;  // the MDH of the CDM's handles (also in its region's header)
  uint32_t fabric_data;  // kFabricDataUdp / kFabricDataOfi (the daemon's fabric_data setting)
  char ofi_provider[kOfiProviderMax];  // with ofi: the provider (fi_info -p syntax), NUL-terminated
};
static_assert(sizeof(AttachReply) == 64 + kOfiProviderMax);

// GNI_MEM_USE_VMDH: `vmdh_index` is the entry of the node's vMDH block to take ((uint32_t)-1:
// the first free one below `mdd_block`, the size the caller gave GNI_SetMddResources).
// GNI_MEM_UPDATE_REGION: (qword1, qword2) is the handle of the reserved registration whose
// pages [address, address + length) are filled in.
// Only registrations that need the daemon come here (vMDH, reserved, updates; plain ones the
// library writes into its MDD table itself, process_mdd.h): `slot` is the free entry of the
// process's MDD table the library chose for it.
struct MemRegister {
  Header h;
  uint64_t address;
  uint64_t length;
  uint32_t flags;
  uint32_t dst_cq;    // CQ slot or kNoCq
  uint32_t vmdh_index;
  uint32_t mdd_block;
  uint64_t qword1;
  uint64_t qword2;
  uint32_t slot;
  uint32_t reserved;
};
struct MemRegisterReply {
  Reply r;
  uint64_t qword1;
  uint64_t qword2;
};

// GNI_MemRegisterSegments: the message ends after `count` segments (it is
// offsetof(MemRegisterSegments, segments) + count * sizeof(MemSegment) bytes long).
struct MemSegment {
  uint64_t address;
  uint64_t length;
};
inline constexpr uint32_t kMaxMemSegments = 1024;  // = abi::kMaxRegSegments
struct MemRegisterSegments {
  Header h;
  uint32_t flags;
  uint32_t dst_cq;    // CQ slot or kNoCq
  uint32_t count;
  uint32_t vmdh_index;  // as in MemRegister
  uint32_t mdd_block;
  uint32_t slot;        // as in MemRegister
  MemSegment segments[kMaxMemSegments];
};

struct MemDeregister {
  Header h;
  uint64_t qword1;
  uint64_t qword2;
};

// Room for registrations: the library asks for `want` more (it counts the registrations it
// makes itself against what it was granted) and gives `give_back` back. The daemon grants
// what the process's and credential's limits leave (resource_limits.h); `granted` is the
// process's total afterwards, `added` what this request added.
struct RegBudget {
  Header h;
  uint32_t want;
  uint32_t give_back;
};
struct RegBudgetReply {
  Reply r;
  uint32_t added;
  uint32_t granted;
};

struct CqCreate {
  Header h;
  uint32_t entry_count;
  uint32_t mode;
};
struct CqCreateReply {
  Reply r;
  uint32_t cq_index;
  uint32_t capacity;
  uint64_t ctl_offset;
  uint64_t entries_offset;
};

struct CqDestroy {
  Header h;
  uint32_t cq_index;
  uint32_t reserved;
};

// Sent to the daemon of the target NIC (which may be another emulated node on this host).
// The target is named by its memory domain (the MDH of a handle it issued), as the
// hardware reaches memory by (NIC address, MDH) whatever id an EP was bound with.
struct PeerLookup {
  Header h;
  uint32_t nic_addr;
  uint32_t mem_domain;  // a route (mem_handle.h): the memory domain, or a vMDH index | kVmdhRoute
  uint32_t ptag;
  uint32_t cookie;
};
struct PeerLookupReply {
  Reply r;
  uint32_t pid;
  uint32_t mem_domain;  // of the CDM found
  uint64_t attach_id;
  uint64_t region_size;
  uint64_t ro_size;
};

// Finds or creates the mailbox of a channel in the receiver's region. Sent by the receiver
// (for its local attr) and by the sender (for its remote attr); both get the same mailbox.
struct MboxOpen {
  Header h;
  uint32_t reserved0;  // the receiver is the memory domain of qword1 (mem_handle.h)
  uint32_t ptag;
  uint32_t cookie;
  uint32_t mbox_offset;
  uint64_t qword1;    // receiver's registration of the mailbox area
  uint64_t qword2;
  uint64_t msg_buffer;  // receiver's VA of the area
  uint32_t buff_size;
  uint32_t credits;
  uint32_t max_size;
  uint32_t reserved;
};
struct MboxOpenReply {
  Reply r;
  uint64_t ctl_offset;   // MboxCtl in the receiver's heap; slots follow it
  uint64_t bytes;        // mbox_bytes(credits, max_size)
  uint32_t dst_cq;       // receiver's CQ slot for remote SMSG events, or kNoCq
  uint32_t reserved;
};

// Job credentials (ptag/cookie): issued by a daemon to a Unix user (and optionally to the
// members of one group), granted on the other daemons of a job. ptag/cookie 0 in a request
// means "choose". A process may use a credential if its uid (SO_PEERCRED) is `uid`, or
// kCredGid is set and its effective gid is `gid`, or it is root.
inline constexpr uint32_t kCredGid = 1;  // Cred.flags: `gid` is valid
struct Cred {
  Header h;
  uint32_t uid;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t flags;     // kCredGid
  uint32_t gid;
  uint32_t reserved;
};
static_assert(sizeof(Cred) == 40);
struct CredReply {
  Reply r;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t created;   // 1: this request created the credential here (0: it was held already),
                      // so a launcher that must undo a partial grant revokes only what it made
  uint32_t reserved;
};
static_assert(sizeof(CredReply) == 40);

// Cray DRC credentials (libdrc): a job credential with a numeric id, an owner (the uid that
// acquired it) and grants (uids, gids, workload-manager job ids) naming who else may attach
// with it. Only the owner (or root) acquires with given values, grants, revokes or releases.
// kDrcAcquire with id, ptag and cookie 0 chooses all three. libdrc asks this node's daemon
// only: that daemon applies the change and passes the credential's new state to every other
// daemon (this host's and the other hosts'), and answers when they have all accepted it or
// cannot be reached; one that refuses undoes it everywhere (daemon_protocol.h, DrcState).
enum class DrcAction : uint32_t {
  kAcquire = 1,  // -> id, ptag, cookie
  kGrant = 2,    // kind (DrcGrant) + value
  kRevoke = 3,   // kind + value
  kAccess = 4,   // -> ptag, cookie, if the caller may use credential `id`
  kRelease = 5,  // forget the credential and its grants (attached CDMs keep running)
  kLookup = 6,   // -> ptag of the credential with `cookie` that the caller may use (GNI_GetPtag)
};
enum class DrcGrant : uint32_t { kUid = 1, kGid = 2, kWlm = 3 };
inline constexpr uint32_t kDrcFlex = 1;  // Drc.flags on kAcquire: DRC_FLAGS_FLEX_CREDENTIAL
struct Drc {
  Header h;
  uint32_t action;  // DrcAction
  uint32_t id;
  uint32_t kind;    // DrcGrant (grant, revoke)
  uint32_t value;   // uid, gid or job id (grant, revoke)
  uint32_t ptag;
  uint32_t cookie;
  uint32_t flags;   // kDrcFlex
  uint32_t reserved;
};
static_assert(sizeof(Drc) == 48);
// DrcReply.refused_by when no other daemon refused (the rc is this daemon's own).
inline constexpr uint32_t kDrcNoNode = 0xFFFFFFFFu;
struct DrcReply {
  Reply r;
  uint32_t id;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t refused_by;  // the NIC address whose daemon refused the change (undone everywhere), or kDrcNoNode
};
static_assert(sizeof(DrcReply) == 40);

// Page `offset` of the status JSON. Offset 0 takes a snapshot, which later pages of the
// same connection read, so the pages of one document are consistent.
struct Status {
  Header h;
  uint32_t offset;
  uint32_t reserved;
};
struct StatusReply {
  Reply r;
  uint32_t json_length;   // bytes of JSON following this struct (at most kStatusPage)
  uint32_t total_length;  // bytes of the whole document
};
static_assert(sizeof(StatusReply) + kStatusPage <= kMaxMessage);


// GNI_EpPostData[WId] on the attach connection, one-way: the library has already checked
// what the API reports synchronously (sizes, one outstanding datagram per EP), and learns
// the outcome from the completion ring, where the event echoes `lib_seq`, `ep` and `id`.
// `ep` is the library's name for the endpoint. A post the daemon refuses all the same
// comes back at once as TERMINATED.
struct DgramSubmit {
  Header h;
  uint64_t lib_seq;     // the library's name for this post
  uint64_t ep;
  uint64_t id;          // datagram_id, valid if has_id
  uint32_t has_id;
  uint32_t wildcard;    // 1: unbound EP, matches directed posts aimed at this CDM
  uint32_t peer_addr;   // directed: the bound peer
  uint32_t peer_inst;
  uint16_t data_len;
  uint16_t buf_size;
  uint32_t reserved;
  uint8_t data[kDgramMaxSize];
};

// Sent on the attach connection: finds or creates the CDM's datagram completion ring
// (dgram_ring.h) in its heap.
struct DgramOpen {
  Header h;
};
struct DgramOpenReply {
  Reply r;
  uint64_t ctl_offset;  // DgramRingCtl in the heap, then the events
  uint32_t capacity;
  uint32_t post_limit;  // datagram posts one process may have outstanding; 0 = no limit
};

struct DgramKick {
  Header h;
};

// `lib_seq` names the post the caller means (DgramSubmit::lib_seq): another thread may have
// consumed it and posted anew on the same EP while the cancel was on its way, and that new
// post must not be the one cancelled.
struct DgramCancel {
  Header h;
  uint64_t ep;
  uint64_t id;
  uint32_t by_id;
  uint32_t reserved;
  uint64_t lib_seq;
};
static_assert(sizeof(DgramCancel) == 48 && offsetof(DgramCancel, lib_seq) == 40);


// Sent on the attach connection: finds or creates the CDM's BTE submission ring in its
// heap. Every reply of a node passes the same doorbell (an eventfd the BTE engine sleeps on).
struct BteOpen {
  Header h;
};
struct BteOpenReply {
  Reply r;
  uint64_t ctl_offset;      // BteRingCtl in the CDM's heap; the slots follow it
  uint32_t capacity;        // slots, a power of two
  uint32_t reserved;
};

// nicemuctl fault: a configuration in its text form (nicemu/fault/fault_spec.h), applied on
// top of the current one (`replace` = 0) or on the defaults. The daemon parses and checks
// it, publishes it in its fault page and answers with the canonical text now in force.
inline constexpr uint32_t kFaultSpecMax = 2048;
struct FaultSet {
  Header h;
  uint32_t replace;
  uint32_t spec_length;  // bytes of spec used (no terminator needed)
  char spec[kFaultSpecMax];
};
struct FaultGet {
  Header h;
};
struct FaultReply {
  Reply r;
  uint64_t seed;
  uint32_t spec_length;
  uint32_t error_length;
  char spec[kFaultSpecMax];  // the configuration in force (canonical text)
  char error[256];           // why a FaultSet was refused
};

// GNI_SetBIConfig / GNI_GetBIConfig: the fields of gni_bi_desc_t, in its order.
struct BiConfigSet {
  Header h;
  uint16_t bw;
  uint16_t aot_bw;
  uint16_t modes;     // GNI_BI_FLAG_*
  uint16_t reserved;
};
struct BiConfigGet {
  Header h;
};
struct BiConfigReply {
  Reply r;
  uint16_t current_bw, current_aot_bw, current_norbs, flags, sys_def_bw, sys_def_aot_bw, cle_seqnum, hss_seqnum;
};

// On the attach connection: join (or create) the node's MSGQ segment of the CDM's domain.
struct MsgqJoin {
  Header h;
  msgq::Attrs attrs;
};
struct MsgqJoinReply {
  Reply r;              // INVALID_STATE: attributes differ from the segment's, or no room
  uint64_t segment_id;
  uint64_t size;        // segment_layout(attrs).total_size
  uint32_t member;      // our index in the member table
  uint32_t member_gen;
};

struct MsgqLeave {
  Header h;
};

// Receive side (ConnOpen) or send side (Connect) of the connection with node remote_pe.
struct MsgqConn {
  Header h;
  uint32_t remote_pe;
  uint32_t remote_insts;  // Connect: num_insts of the remote node's attributes
};
struct MsgqConnReply {
  Reply r;
  uint32_t conn;          // index in the RxConn / TxConn table
  uint32_t gen;
};

// Sent to the daemon of node nic_addr by a process of another node (or of the same one).
struct MsgqLookup {
  Header h;
  uint32_t nic_addr;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t reserved;
};
struct MsgqLookupReply {
  Reply r;              // NO_MATCH: no segment for that domain on the node
  uint64_t segment_id;
  uint64_t size;
};

// On the attach connection: GNI_SmsgInit towards a NIC address of another host. The daemon
// finds or creates the relay of (this CDM, peer, mailbox) and its SmsgRelayCtl in our heap
// (shm_layout.h); the same attributes give the same relay, which resumes where it was.
struct SmsgRelayOpen {
  Header h;
  uint32_t peer_addr;   // receiver's NIC address (on another host)
  uint32_t peer_inst;
  MailboxAttrs mbox;    // the receiver's (its remote attrs)
  uint32_t credit_cq;   // our CQ slot for the SMSG event of credits coming back (kNoCq: none)
  uint32_t reserved;
};
struct SmsgRelayOpenReply {
  Reply r;
  uint64_t ctl_offset;   // SmsgRelayCtl in our heap
  uint32_t relay;        // names the relay in SmsgRelaySend
  uint32_t reserved;
  uint64_t ring_offset;  // the CDM's relay ring (relay_ring.h) in our heap: every relay's sends
};

// One message, a record of the CDM's relay ring (relay_ring.h); `length` bytes (header then data) follow
// the struct. The library sends message `seq` only with a credit (seq - released <
// credits) and in sequence order; the local completion (msg_id, into CQ slot `src_cq`)
// is pushed by the daemon once the receiver's daemon has written the message.
struct SmsgRelaySend {
  Header h;
  uint32_t relay;
  uint32_t seq;
  uint32_t msg_id;
  uint32_t remote_event;  // the EP's remote event data: the receiver's CQE carries it
  uint32_t src_cq;        // our CQ slot for the local completion, or kNoCq
  uint32_t length;
  uint8_t tag;
  uint8_t reserved[3];
  // RemotePosts this CDM had sent on its attach connection when it wrote this message (mod
  // 2^32): the daemon relays the message only after it has taken that many, so a message
  // does not pass the CDM's earlier posts, which take the other way (docs/ordering.md).
  uint32_t posts_before;
};
static_assert(offsetof(SmsgRelaySend, posts_before) % 4 == 0 && sizeof(SmsgRelaySend) == sizeof(Header) + 32);

// Library -> its daemon, one-way notes about a CDM's relays (ops kSmsgRelayReleased and
// kSmsgRelayDoorbell): it released relayed messages up to the mailbox's note_at (shm_layout.h,
// MboxCtl), so the daemon reports the credits at once instead of at its next poll of the
// receivers, or its relay ring has records and the daemon had armed the doorbell
// (relay_ring.h).
struct SmsgRelayNote {
  Header h;
  uint32_t reserved[2];
};
static_assert(sizeof(SmsgRelaySend) + kSmsgRelayMaxSize <= kMaxMessage);
static_assert(sizeof(SmsgRelayNote) == sizeof(Header) + 8);

// The ofi fabric: a CDM publishes its endpoint's address (fi_getname) to its daemon, which
// gives it to CDMs of other hosts with the same credential only (OfiAsk at the target's
// daemon checks it as an RMA request's region look-up does). OfiLookup asks for the CDM
// that (node, route) names, route as in a memory handle (mem_handle.h, route_of); answered
// once the target's daemon has (GNI_RC_NO_MATCH: no such CDM, or it published none;
// GNI_RC_ERROR_RESOURCE: that daemon is unreachable).
struct OfiPublish {
  Header h;
  uint32_t addr_len;
  uint32_t reserved;
  uint8_t addr[kOfiAddrMax];
};
struct OfiLookup {
  Header h;
  uint32_t node;
  uint32_t route;
};
struct OfiLookupReply {
  Reply r;
  uint32_t addr_len;
  uint32_t reserved;
  uint8_t addr[kOfiAddrMax];
};
static_assert(sizeof(OfiPublish) == 24 + kOfiAddrMax && sizeof(OfiLookup) == 24);
static_assert(sizeof(OfiLookupReply) == 32 + kOfiAddrMax);

static_assert(sizeof(Attach) <= kMaxMessage && sizeof(MboxOpen) <= kMaxMessage);
static_assert(sizeof(MemRegisterSegments) <= kMaxMessage);
static_assert(sizeof(DgramSubmit) <= kMaxMessage);
static_assert(sizeof(MboxOpen) == 72);

}  // namespace nicemu::abi::ctl
