// The collective engine (Aries, fact sheet §16), defined once for libugni and the daemons.
//
//   library --CeCreate / CeConfigure / CeDestroy (attach socket, request/reply)--> its daemon
//   library --CePost (attach socket, one-way)--> its daemon: a leaf's operand; the daemon
//       hands it to the channel it names (its own node's engine, or the daemon of that node
//       as a CeContribute)
//   daemon --CeContribute--> daemon of the parent channel: a leaf's operand, or a channel's
//       partial result once all its children contributed
//   daemon --CeResult--> daemon of each contributor: the reduction's result (or its error),
//       sent down the tree the way the contributions came up
//   daemon --CeProbe / CeProbeReply--> daemon: is a channel or a process we wait for still
//       there (a member that died, a host gone silent: an error completion, not a hang)
//
// Daemon-to-daemon messages travel over the daemon links on one host and over the fabric
// (authenticated, reliable, in order) between hosts; every one names its sender
// (origin_node), which the receiver checks against the link or fabric peer it came from.
// All integers little-endian and fixed width; every message starts with ctl::Header, and its
// op and exact length are checked before anything else.
#pragma once
#include <cstddef>
#include <cstdint>

#include "nicemu/abi/ctl_header.h"

namespace nicemu::abi::ce {

inline constexpr uint32_t kMaxChildren = 32;      // GNI_CE_MAX_CHILDREN
inline constexpr uint32_t kMaxChannels = 256;     // VCE channels one node hands out
inline constexpr uint32_t kNoTid = 0xFFFFFFFF;    // CePost: no local event requested

// gni_ce_child_t values.
inline constexpr uint32_t kChildUnused = 0, kChildVce = 1, kChildPe = 2;

// Status of a reduction (the status field of the result's control word, ugni ce_result.h).
enum Status : uint32_t {
  kOk = 0,
  kErrPeer = 1,      // a member, a channel of the tree or its host is gone (or silent)
  kErrConfig = 2,    // no such channel, not configured, child slot not configured for it,
                     // another job's channel
  kErrMismatch = 3,  // children of one reduction posted different commands or modes
};

// The control word of a gni_ce_result_t as the NIC writes it and the exported
// gni_ce_res_* accessors read it. Cray's layout is not public; this one is the project's:
//   bits 3..0   floating-point exceptions (GNI_CE_FPE_*)
//   bits 15..8  status (Status; 0 = OK)
//   bit  16     done: the result is in (GNI_CeCheckResult says NOT_DONE before; clients
//               zero the structure before posting, as Cray's examples do)
//   bits 63..32 reduction id (low 32 bits of the descriptor's ce_red_id)
// The NIC writes result1/result2 first and the control word last.
inline constexpr uint64_t kResFpeMask = 0xF;
inline constexpr unsigned kResStatusShift = 8;
inline constexpr uint64_t kResStatusMask = 0xFF;
inline constexpr uint64_t kResDone = 1ull << 16;
inline constexpr unsigned kResRedIdShift = 32;
inline constexpr uint64_t kResRedIdMask = 0xFFFFFFFF;
constexpr uint64_t make_control(uint64_t status, uint64_t fpe, uint64_t red_id) {
  return (fpe & kResFpeMask) | ((status & kResStatusMask) << kResStatusShift) | kResDone |
         ((red_id & kResRedIdMask) << kResRedIdShift);
}

// One tree edge of a channel as GNI_CeConfigure describes it: the EP's binding and its CE
// attributes (GNI_EpSetCeAttr).
struct Edge {
  uint32_t node;       // NIC address the EP is bound to
  uint32_t ce_id;      // VCE: that channel's id; PE: unused
  uint32_t child_id;   // child: our slot for it; parent: its slot for us
  uint32_t type;       // kChildVce / kChildPe
  uint32_t remote_id;  // the EP's bound id
  uint32_t reserved;
};
static_assert(sizeof(Edge) == 24);

struct CeCreate {
  ctl::Header h;
};
struct CeCreateReply {
  ctl::Reply r;
  uint32_t ce_id;
  uint32_t reserved;
};

struct CeConfigure {
  ctl::Header h;
  uint32_t ce_id;
  uint32_t modes;         // GNI_CE_MODE_*
  uint32_t cq;            // our CQ slot for channel events, or kNoCq
  uint32_t num_children;
  uint32_t has_parent;
  uint32_t reserved;
  Edge parent;
  Edge children[kMaxChildren];
};
static_assert(sizeof(CeConfigure) == 16 + 24 + 24 + 24 * kMaxChildren);

struct CeDestroy {
  ctl::Header h;
  uint32_t ce_id;
  uint32_t reserved;
};

struct CePost {
  ctl::Header h;
  uint32_t target_node;   // the EP's binding: node of the parent channel
  uint32_t ce_id;         // the EP's CE attributes: parent channel and our slot in it
  uint32_t child_id;
  uint32_t cmd;           // gni_ce_cmd_type_t
  uint32_t mode;          // GNI_CEMODE_*
  uint32_t src_cq;        // our CQ slot for the local events, or kNoCq
  uint32_t tid;           // CQE tid of those events, or kNoTid
  uint32_t local_event;
  uint16_t cq_mode;       // GNI_CQMODE_LOCAL_EVENT / GLOBAL_EVENT bits
  uint16_t reserved0;
  uint32_t reserved1;
  uint64_t red_id;
  uint64_t first;
  uint64_t second;
  uint64_t result_addr;   // gni_ce_result_t in our memory (checked against its registration)
};
static_assert(sizeof(CePost) == 88);

struct CeContribute {
  ctl::Header h;
  uint32_t origin_node;   // the sender (where the result goes)
  uint32_t to_ce;         // channel on the receiving node
  uint32_t child_id;      // its slot
  uint32_t kind;          // kChildPe (a leaf) / kChildVce (a channel's partial result)
  uint32_t from_ce;       // kChildVce: the sending channel
  uint32_t ptag;          // the job (a channel only combines operands of its own job)
  uint32_t cookie;
  uint32_t cmd;
  uint32_t mode;          // GNI_CEMODE_TWO_OP (exception bits travel in fpe)
  uint32_t status;        // Status: an error travels up like an operand
  uint32_t fpe;           // GNI_CE_FPE_* accumulated so far
  uint32_t reserved;
  uint64_t token;         // names the contribution at origin_node (echoed in CeResult)
  uint64_t red_id;
  uint64_t a, b;
  uint64_t origin_attach; // kChildPe: the leaf's CDM (probed while we wait for it again)
};
static_assert(sizeof(CeContribute) == 104);

struct CeResult {
  ctl::Header h;
  uint32_t origin_node;   // the sender
  uint32_t status;
  uint32_t fpe;
  uint32_t reserved;
  uint64_t token;
  uint64_t red_id;
  uint64_t a, b;
};
static_assert(sizeof(CeResult) == 64);

enum ProbeWhat : uint32_t { kProbeNode = 0, kProbeChannel = 1, kProbeProcess = 2 };
struct CeProbe {
  ctl::Header h;
  uint32_t origin_node;
  uint32_t what;          // ProbeWhat
  uint32_t ce_id;         // kProbeChannel
  uint32_t reserved;
  uint64_t attach_id;     // kProbeProcess
  uint64_t probe_id;      // echoed
};
struct CeProbeReply {
  ctl::Header h;
  uint32_t origin_node;
  uint32_t alive;
  uint64_t probe_id;
};
static_assert(sizeof(CeProbe) == 48 && sizeof(CeProbeReply) == 32);

// A leaf EP of the sending CDM is bound to `target_node` with CE attributes (ce_id,
// child_id, GNI_CE_CHILD_PE): its daemon remembers it, so that if the CDM goes away it can
// tell that channel (CeLeafGone), which otherwise would only learn of the leaf from its
// first operand and wait for it for ever.
struct CeMember {
  ctl::Header h;
  uint32_t target_node;
  uint32_t ce_id;
  uint32_t child_id;
  uint32_t reserved;
};
static_assert(sizeof(CeMember) == 32);

// The CDM `attach_id` of `origin_node`, a leaf of slot `child_id` of channel `ce_id`, is
// gone. The channel fails that slot of the reduction waiting for it (and of the next one,
// until another leaf posts there), unless a different CDM has posted there since.
struct CeLeafGone {
  ctl::Header h;
  uint32_t origin_node;
  uint32_t ce_id;
  uint32_t child_id;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t reserved;
  uint64_t attach_id;
};
static_assert(sizeof(CeLeafGone) == 48);
static_assert(sizeof(CeConfigure) <= ctl::kMaxMessage);

// The post page: a leaf on the node of its parent channel does not send its operand, it
// writes it here, and only the leaf whose post completes the channel's local posts of the
// round rings the daemon (CeRing), so the daemon is woken once per channel and round rather
// than once per leaf. One page per job (ptag/cookie) per node, a memfd the daemon creates
// and seals against resizing, mapped read-write by the job's CDMs there (CeOpen) and by the
// daemon; another job has no way to it. Everything in it is written by clients, so the
// daemon copies a post out under its sequence number and checks it as it checks a CePost,
// takes the CDM a slot belongs to from its own table (never from the page), and checks the
// result address against that CDM's registrations. What a hostile process of the job can do
// by writing here is what it can do with its own posts: wrong operands, and rings missed or
// spurious, which the daemon's scans on every CE message and every 100 ms tick make up for.
//
//   leaf:   slot.post = ...; slot.seq = s + 1 (release)
//           old = chan[ce_id].posted.fetch_or(1 << child_id)
//           ring (CeRing) if (old | 1 << child_id) covers chan[ce_id].local
//   daemon: on any CE wake, for each slot with seq != taken: copy the post, taken = seq;
//           once it has taken every local slot of a channel's round, clears those bits
//           of `posted` (before any result of that round is out, so before the next
//           round's posts can come).
// A leaf uses its slot only when the daemon has taken its previous post (taken == seq) and
// every CePost it sent since CeOpen (sent_taken), so that its posts are taken in the order
// it made them, and when the channel entry says its slot is local (`local`); otherwise it
// sends a CePost. (The daemon takes the page before each CePost.)
// The page's control ops are ctl::Op::kCeOpen and kCeRing.
inline constexpr uint32_t kPostPageMagic = 0x43455050;  // "CEPP"
inline constexpr uint32_t kPostPageVersion = 2;  // 2: a slot holds a whole CePost
inline constexpr uint32_t kPostSlots = 256;             // CDMs of one job on one node that post here

struct PostChannel {
  uint32_t posted;        // leaf-written (atomic OR): child slots posted in this round
  uint32_t local;         // daemon-written: child slots of leaves on this node (0: not here)
};
struct PostSlot {
  uint32_t seq;           // leaf-written after the post (release)
  uint32_t taken;         // daemon-written: the seq it has taken
  uint32_t sent_taken;    // daemon-written: CePosts of this CDM it has taken since CeOpen
  uint32_t reserved0;
  uint64_t mem_qword1;    // the registration of post.result_addr (gni_mem_handle_t)
  uint64_t mem_qword2;
  CePost post;            // leaf-written, the CePost it would have sent; h and target_node
                          // are not read (the daemon sets them: the page is its own node's)
  uint64_t reserved1;
};
static_assert(sizeof(PostSlot) == 128);
struct PostPage {
  uint32_t magic;
  uint32_t slots;         // kPostSlots
  uint32_t version;       // kPostPageVersion
  uint32_t reserved0;
  uint64_t reserved[6];
  PostChannel chan[kMaxChannels];
  PostSlot slot[kPostSlots];
};
static_assert(sizeof(PostChannel) == 8 && offsetof(PostSlot, sent_taken) == 8 && offsetof(PostSlot, post) == 32);
static_assert(offsetof(PostPage, chan) == 64 && offsetof(PostPage, slot) == 64 + 8 * kMaxChannels);
inline constexpr uint64_t kPostPageBytes = (sizeof(PostPage) + 4095) / 4096 * 4096;

struct CeOpen {
  ctl::Header h;
};
struct CeOpenReply {
  ctl::Reply r;
  uint32_t slot;          // this CDM's PostSlot
  uint32_t reserved;
  uint64_t bytes;         // size of the memfd (kPostPageBytes)
};
struct CeRing {
  ctl::Header h;
};

}  // namespace nicemu::abi::ce
