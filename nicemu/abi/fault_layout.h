// Fault-injection configuration of one emulated node, as the daemon publishes it in a file
// RUNDIR/nic-ADDR.fault (mode 0644) that libugni maps read-only at attach. Same-host
// initiators (the library is the processor) read it on their own paths, so a live change
// through `nicemuctl fault` applies without a round trip to the daemon.
//
// Contract: only the daemon writes. It bumps `seq` to odd, writes `cfg`, stores `active`,
// then bumps `seq` to even (release). Readers check `active` (relaxed: a single predictable
// branch on the hot path) and, when it is set, copy `cfg` under the seqlock, retrying while
// `seq` is odd or moved. Everything is fixed-width; the version is checked by every reader.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nicemu::abi::fault {

inline constexpr uint32_t kMagic = 0x46415554;  // "FAUT"
inline constexpr uint16_t kVersion = 1;

// Kinds of transaction a rule can select (bit i of a kind mask = Kind i).
enum Kind : uint8_t {
  kSmsg = 0,     // one SMSG message
  kFmaPut = 1,   // GNI_PostFma PUT (and PUT_W_SYNCFLAG)
  kFmaGet = 2,   // GNI_PostFma GET
  kAmo = 3,      // GNI_PostFma AMO
  kRdmaPut = 4,  // GNI_PostRdma PUT
  kRdmaGet = 5,  // GNI_PostRdma GET
  kDatagram = 6, // session datagram
  kPacket = 7,   // a packet of the inter-host fabric (reliable-channel layer)
  kReg = 8,      // GNI_MemRegister(Segments): error = GNI_RC_ERROR_RESOURCE, exhaust = GNI_RC_ERROR_NOMEM
  kKinds = 9,
};
inline constexpr const char* kKindNames[kKinds] = {"smsg", "put", "get", "amo", "rdma_put", "rdma_get", "datagram",
                                                   "packet", "reg"};

// What happens to one transaction.
enum Action : uint8_t {
  kNone = 0,
  kDrop = 1,      // lost on the wire: SMSG/packets are retransmitted, RDMA/AMO fail transiently
  kDup = 2,       // delivered twice: the receiver suppresses it by sequence number
  kDelay = 3,     // held for a delay in [delay_min_us, delay_max_us]
  kCorrupt = 4,   // damaged in flight: detected by CRC, then handled as a drop
  kError = 5,     // transient CQE error (recoverable); the effect may or may not be done
  kExhaust = 6,   // SMSG: retransmissions run out, the send completes with an error
  kLinkDown = 7,  // the peer is unreachable (a link-down window); as a drop while it lasts
  kActions = 8,
};
inline constexpr const char* kActionNames[kActions] = {"none",  "drop",    "dup",     "delay",
                                                       "corrupt", "error", "exhaust", "link_down"};

inline constexpr uint32_t kAnyPeer = 0xFFFFFFFF;
inline constexpr uint32_t kPpm = 1000000;  // probabilities are parts per million

// Drawn per transaction, in order; the first rule that fires decides.
struct Rule {
  uint32_t kind_mask;  // bits of Kind
  uint32_t peer;       // NIC address of the peer, or kAnyPeer
  uint32_t ppm;        // probability
  uint8_t action;      // Action
  uint8_t reserved[3];
};
static_assert(sizeof(Rule) == 16);

// "Fail the Nth operation": the n-th decision (1-based, counted per kind mask and per
// initiating CDM) gets `action`, whatever the probabilities say.
struct NthHook {
  uint32_t kind_mask;
  uint8_t action;
  uint8_t reserved[3];
  uint64_t n;
};
static_assert(sizeof(NthHook) == 16);

// The link to `peer` is down from down_ms to up_ms after the configuration was published.
struct LinkWindow {
  uint32_t peer;
  uint32_t reserved;
  uint64_t down_ms;
  uint64_t up_ms;
};
static_assert(sizeof(LinkWindow) == 24);

enum Ordering : uint32_t {
  kOrderAuto = 0,     // from the post (dlvr_mode) and the target registration's PI flags
  kOrderStrict = 1,   // everything in issue order
  kOrderDefault = 2,  // non-posted may pass posted
  kOrderRelaxed = 3,  // posted may also pass posted
};
inline constexpr const char* kOrderingNames[] = {"auto", "strict", "default", "relaxed"};

inline constexpr uint32_t kMaxRules = 16, kMaxNth = 8, kMaxLinks = 8;

struct Config {
  uint64_t seed;
  uint32_t enabled;           // 0: nothing is injected, fast paths unchanged
  uint32_t ordering;          // Ordering
  uint32_t reorder_ppm;       // probability that a transaction allowed to be passed is held
  uint32_t reorder_window;    // most transactions one CDM holds at a time
  uint32_t delay_min_us;      // holding time of a delayed/reordered transaction
  uint32_t delay_max_us;
  uint32_t retransmit_us;     // SMSG retransmit delay after a drop
  uint32_t error_done_ppm;    // probability that a failed PUT/AMO's effect was done anyway
  uint32_t max_retrans;       // SMSG attempts before exhaustion under a link-down window
  uint32_t rule_count, nth_count, link_count;
  Rule rules[kMaxRules];
  NthHook nth[kMaxNth];
  LinkWindow links[kMaxLinks];
};
static_assert(offsetof(Config, rules) == 56);
static_assert(sizeof(Config) == 56 + 16 * kMaxRules + 16 * kMaxNth + 24 * kMaxLinks);

struct Page {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  std::atomic<uint32_t> seq;     // seqlock over cfg and epoch_ns
  std::atomic<uint32_t> active;  // cfg.enabled, readable without the seqlock
  uint64_t epoch_ns;             // CLOCK_MONOTONIC when cfg was published (link windows count from it)
  uint64_t reserved[5];
  Config cfg;
};
static_assert(offsetof(Page, cfg) == 64);
inline constexpr uint64_t kPageBytes = (sizeof(Page) + 4095) / 4096 * 4096;

}  // namespace nicemu::abi::fault
