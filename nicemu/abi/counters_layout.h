// Counters of a nicemu node, in shared memory that tools read while the daemon runs
// (nicemuctl stats / top, a Prometheus textfile collector). Defined once here for the daemon,
// libugni and the tools; fixed-width fields, offsets instead of pointers, sizes pinned with
// static_assert, a version checked by every reader.
//
// Two places hold counters:
//  - the node's counter page, a file RUNDIR/nic-ADDR.stats that the daemon creates, maps and
//    alone writes (mode 0644: readable by every local user, like /proc). It holds the node
//    counters, the totals of all CDMs' counters, one entry per attached CDM, and one entry
//    per link to another daemon:
//
//      0                    PageHeader
//      node_offset          u64 node[kNodeSlots]           node counters and gauges
//      totals_offset        u64 totals[kCdmSlots]          sum over every CDM ever attached
//      cdm_table_offset     CdmEntry[cdm_entries]          live CDMs (identity + a copy)
//      link_table_offset    LinkEntry[link_entries]        links to other daemons
//
//  - one CdmCounterBlock per attached CDM, in the heap of its region (shm_layout.h), which
//    the client (libugni) updates on its own hot paths: posts, SMSG, CQ events, errors. The
//    daemon copies every live block into the CDM's page entry every stats_interval_ms, and
//    adds the increase since the previous copy to the totals (a client that writes garbage
//    into its own block cannot make the totals go backwards).
//
// Every counter is a std::atomic<uint64_t> updated with relaxed fetch_add by its one writer
// process and read with relaxed loads: no system call and no fence on a hot path. Counter
// names are stable: tools and monitoring key on them. Indexes are the X-macro order below;
// new counters are appended, never renumbered, and readers use the counts in PageHeader, so
// an older reader shows the counters it knows.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace nicemu::abi::counters {

inline constexpr uint32_t kMagic = 0x4E435452;       // "NCTR"
inline constexpr uint32_t kBlockMagic = 0x43444D43;  // "CDMC"
inline constexpr uint16_t kVersion = 1;

enum Kind : uint8_t { kCounter = 0, kGauge = 1 };

// X(name, kind, help). Node counters: written by the daemon.
#define NICEMU_NODE_COUNTERS(X)                                                                  \
  X(connections, kCounter, "control connections accepted")                                       \
  X(attaches, kCounter, "CDMs attached (GNI_CdmAttach)")                                         \
  X(attach_refused, kCounter, "attaches refused (credential, ABI version, inst_id in use)")      \
  X(detaches, kCounter, "CDMs detached or reclaimed after their process died")                   \
  X(registrations, kCounter, "registrations the daemon made (vMDH, reserved, segments); plain ones: CDM counter")  \
  X(deregistrations, kCounter, "deregistrations of registrations the daemon made")                \
  X(cq_creates, kCounter, "completion queues created")                                           \
  X(cq_destroys, kCounter, "completion queues destroyed")                                        \
  X(peer_lookups, kCounter, "peer region lookups by same-host initiators")                       \
  X(peer_lookup_failures, kCounter, "peer lookups refused or without a match")                   \
  X(mbox_opens, kCounter, "SMSG mailboxes opened")                                               \
  X(malformed_messages, kCounter, "malformed control messages counted and dropped")              \
  X(credentials_issued, kCounter, "job credentials issued or granted")                           \
  X(datagrams_posted, kCounter, "session datagrams posted")                                      \
  X(datagrams_cancelled, kCounter, "session datagrams cancelled")                                \
  X(cdms_attached, kGauge, "CDMs attached now")                                                  \
  X(cdms_untracked, kGauge, "attached CDMs without a page entry (table full; still in totals)")  \
  X(reloads, kCounter, "SIGHUP reloads of the settings")                                         \
  X(msgq_joins, kCounter, "MSGQ instances joined (GNI_MsgqInit)")                                \
  X(msgq_join_refused, kCounter, "MSGQ joins refused (attributes differ, no room)")              \
  X(msgq_lookups, kCounter, "MSGQ segment lookups by senders")                               \
  X(fault_config_changes, kCounter, "fault-injection configurations published (start, nicemuctl fault)") \
  X(credential_refused, kCounter, "requests refused: credential not usable by the caller's uid") \
  X(resource_refused, kCounter, "requests refused: a per-process or per-credential limit") \
  X(fabric_rx_packets, kCounter, "UDP fabric: packets received and accepted")                \
  X(fabric_tx_packets, kCounter, "UDP fabric: packets sent")                                 \
  X(fabric_rx_bytes, kCounter, "UDP fabric: bytes of accepted packets")                      \
  X(fabric_tx_bytes, kCounter, "UDP fabric: bytes sent")                                     \
  X(fabric_drop_length, kCounter, "UDP fabric: dropped, too short or length field wrong")    \
  X(fabric_drop_magic, kCounter, "UDP fabric: dropped, not a nicemu packet (magic)")         \
  X(fabric_drop_version, kCounter, "UDP fabric: dropped, other protocol version")            \
  X(fabric_drop_mac, kCounter, "UDP fabric: dropped, MAC does not verify (wrong key, forged, corrupted)") \
  X(fabric_drop_records, kCounter, "UDP fabric: dropped, record lengths inconsistent")       \
  X(fabric_drop_unknown_source, kCounter, "UDP fabric: dropped, sender not in the fabric map") \
  X(fabric_drop_stale_epoch, kCounter, "UDP fabric: dropped, from or to an earlier daemon incarnation") \
  X(fabric_duplicates, kCounter, "UDP fabric: duplicate records suppressed (retransmits, replays)") \
  X(fabric_out_of_window, kCounter, "UDP fabric: records outside the receive window dropped") \
  X(fabric_retransmits, kCounter, "UDP fabric: records retransmitted")                       \
  X(fabric_peer_restarts, kCounter, "UDP fabric: peers seen with a new epoch (restarted)")   \
  X(fabric_peer_downs, kCounter, "UDP fabric: channels taken down after the retry budget")   \
  X(fabric_send_refused, kCounter, "UDP fabric: messages refused at once (peer down, backlog full)") \
  X(fabric_messages_abandoned, kCounter, "UDP fabric: queued messages given up (peer down or restarted)") \
  X(fabric_send_errors, kCounter, "UDP fabric: sendmmsg failures")                          \
  X(fabric_fault_drops, kCounter, "UDP fabric: outgoing packets dropped on purpose (packet.drop, link-down, --impair loss)") \
  X(fabric_fault_dups, kCounter, "UDP fabric: outgoing packets sent twice on purpose (packet.dup, --impair dup)") \
  X(fabric_fault_delays, kCounter, "UDP fabric: outgoing packets held back behind the next one (packet.delay, --impair reorder)") \
  X(fabric_fault_corrupts, kCounter, "UDP fabric: outgoing packets corrupted on purpose (packet.corrupt; the receiver drops them)") \
  X(smsg_relay_sent, kCounter, "SMSG across hosts: messages relayed to another host's daemon") \
  X(smsg_relay_delivered, kCounter, "SMSG across hosts: messages from another host written into a mailbox here") \
  X(smsg_relay_credit_updates, kCounter, "SMSG across hosts: receivers' releases reported back to senders") \
  X(smsg_relay_failures, kCounter, "SMSG across hosts: relays failed (receiver gone, peer daemon silent)") \
  X(accept_deferred, kCounter, "control connections left waiting: the daemon was out of descriptors") \
  X(xmem_proxy_ops, kCounter, "FMA PUT/GET and AMOs executed for same-host initiators the kernel refuses cross-memory attach to their target") \
  X(xmem_refused, kCounter, "the daemon's own cross-memory copies the kernel refused (no CAP_SYS_PTRACE, seccomp): error completions") \
  X(fabric_send_deferred, kCounter, "UDP fabric: packets the kernel refused for lack of socket buffer (EAGAIN, ENOBUFS); their records are sent again once it drains")

// Per-CDM counters: written by libugni into its CdmCounterBlock, copied by the daemon.
// Error completions are counted by class (the CQE status, nicemu/abi/cq_entry.h) when the
// client takes them from a CQ.
#define NICEMU_CDM_COUNTERS(X)                                                               \
  X(fma_put_posts, kCounter, "FMA PUT posts (GNI_PostFma)")                                  \
  X(fma_put_bytes, kCounter, "bytes of FMA PUT posts")                                       \
  X(fma_get_posts, kCounter, "FMA GET posts")                                                \
  X(fma_get_bytes, kCounter, "bytes of FMA GET posts")                                       \
  X(amo_posts, kCounter, "AMO posts")                                                        \
  X(rdma_posts, kCounter, "RDMA posts to the BTE engine (GNI_PostRdma)")                     \
  X(rdma_bytes, kCounter, "bytes of RDMA posts")                                             \
  X(cq_write_posts, kCounter, "CQ write posts (GNI_PostCqWrite)")                            \
  X(smsg_sends, kCounter, "SMSG messages sent")                                              \
  X(smsg_send_bytes, kCounter, "bytes of SMSG messages sent (header and data)")              \
  X(smsg_credit_stalls, kCounter, "SMSG sends refused for lack of credits (GNI_RC_NOT_DONE)") \
  X(smsg_receives, kCounter, "SMSG messages received and released")                         \
  X(registrations, kCounter, "memory registrations")                                         \
  X(cq_local_events, kCounter, "completion events of own transactions taken from CQs")      \
  X(cq_remote_events, kCounter, "remote events (peers' PUTs, SMSG, CQ writes) taken from CQs") \
  X(cq_overruns, kCounter, "CQ overruns reported")                                           \
  X(errors_protection, kCounter, "error completions: invalid or deregistered memory handle") \
  X(errors_bounds, kCounter, "error completions: access outside the registration")           \
  X(errors_read_only, kCounter, "error completions: write into a read-only registration")    \
  X(errors_peer_gone, kCounter, "error completions: the peer process died or detached")      \
  X(errors_nic_down, kCounter, "error completions: the NIC (daemon) went down")              \
  X(errors_no_peer, kCounter, "error completions: no such peer in the domain")               \
  X(errors_mem_access, kCounter, "error completions: memory not accessible (cross-memory attach refused or unmapped)") \
  X(errors_transient, kCounter, "error completions: transient, recoverable")                 \
  X(errors_local_protection, kCounter, "error completions: invalid local memory handle")     \
  X(errors_injected, kCounter, "error completions injected by the fault injector")         \
  X(fault_smsg_drops, kCounter, "SMSG messages dropped or corrupted by injection (retransmitted later)") \
  X(fault_smsg_retransmits, kCounter, "SMSG retransmissions of dropped messages")             \
  X(fault_smsg_dups, kCounter, "SMSG duplicates injected")                                    \
  X(fault_smsg_dups_suppressed, kCounter, "SMSG duplicates suppressed by sequence number")    \
  X(fault_smsg_exhausted, kCounter, "SMSG sends failed by injected retransmit exhaustion")    \
  X(fault_corrupts, kCounter, "transactions corrupted by injection (detected, as drops)")     \
  X(fault_delays, kCounter, "transactions delayed by injection")                               \
  X(fault_errors, kCounter, "RDMA/AMO transactions failed by injection (transient CQE error)") \
  X(fault_errors_effect_done, kCounter, "injected failures whose PUT/AMO effect was done anyway") \
  X(fault_link_down, kCounter, "transactions that met an injected link-down window")           \
  X(reorder_held, kCounter, "transactions held by the reorder engine")                         \
  X(reorder_passed, kCounter, "transactions that passed an earlier held one (ordering model)") \
  X(xmem_fallback_peers, kCounter, "same-host peers the kernel refuses cross-memory attach to (their FMA/AMOs go through the daemon, RDMA through the BTE engine)") \
  X(xmem_fallback_posts, kCounter, "FMA, AMO and RDMA posts that went through the daemon because cross-memory attach was refused") \
  X(ofi_ops, kCounter, "ofi fabric: posts to other hosts done rank to rank over libfabric (PUT/GET, AMOs, CQ writes)") \
  X(ofi_bytes, kCounter, "ofi fabric: bytes of those posts") \
  X(ofi_errors, kCounter, "ofi fabric: those posts that completed with an error") \
  X(ofi_served, kCounter, "ofi fabric: peers' requests (AMOs, GETs' remote events, CQ writes) this CDM executed") \
  X(ofi_dropped, kCounter, "ofi fabric: malformed or unexpected messages dropped") \
  X(ofi_reads_inline, kCounter, "ofi fabric: provider completions read by application threads polling a CQ") \
  X(ofi_reads_thread, kCounter, "ofi fabric: provider completions read by the CDM's progress thread") \
  X(ofi_kicks, kCounter, "ofi fabric: times a polling application thread woke the progress thread out of fi_cq_sread") \
  X(ofi_keys_asked, kCounter, "ofi fabric: provider keys this CDM asked a target for (FI_MR_PROV_KEY)") \
  X(ofi_keys_answered, kCounter, "ofi fabric: provider keys of its registrations this CDM told a peer") \
  X(ofi_keys_cached, kCounter, "ofi fabric: posts that found their target's provider key cached") \
  X(ofi_local_missing, kCounter, "ofi fabric: provider operations without a registration covering their local buffer (FI_MR_LOCAL: always 0)")

// Per-link counters: the daemon's links to the other daemons of the host.
#define NICEMU_LINK_COUNTERS(X)                                        \
  X(messages_sent, kCounter, "messages sent to the peer daemon")       \
  X(bytes_sent, kCounter, "bytes sent to the peer daemon")             \
  X(send_failures, kCounter, "messages that could not be delivered")

// Indexes: counters::node::attaches, counters::cdm::smsg_sends, counters::link::messages_sent.
#define NICEMU_COUNTER_ENUM(name, kind, help) name,
namespace node {
enum Counter : uint32_t { NICEMU_NODE_COUNTERS(NICEMU_COUNTER_ENUM) kCount };
}
namespace cdm {
enum Counter : uint32_t { NICEMU_CDM_COUNTERS(NICEMU_COUNTER_ENUM) kCount };
}
namespace link {
enum Counter : uint32_t { NICEMU_LINK_COUNTERS(NICEMU_COUNTER_ENUM) kCount };
}
#undef NICEMU_COUNTER_ENUM

struct CounterInfo {
  const char* name;
  Kind kind;
  const char* help;
};
#define NICEMU_COUNTER_INFO(name, kind, help) {#name, kind, help},
inline constexpr CounterInfo kNodeInfo[] = {NICEMU_NODE_COUNTERS(NICEMU_COUNTER_INFO)};
inline constexpr CounterInfo kCdmInfo[] = {NICEMU_CDM_COUNTERS(NICEMU_COUNTER_INFO)};
inline constexpr CounterInfo kLinkInfo[] = {NICEMU_LINK_COUNTERS(NICEMU_COUNTER_INFO)};
#undef NICEMU_COUNTER_INFO

// Capacities of the layout: room to append counters without moving anything.
inline constexpr uint32_t kNodeSlots = 64;
inline constexpr uint32_t kCdmSlots = 64;
inline constexpr uint32_t kLinkSlots = 16;
inline constexpr uint32_t kCdmEntries = 256;
inline constexpr uint32_t kLinkEntries = 64;
static_assert(node::kCount <= kNodeSlots && cdm::kCount <= kCdmSlots && link::kCount <= kLinkSlots);
static_assert(std::size(kNodeInfo) == node::kCount && std::size(kCdmInfo) == cdm::kCount &&
              std::size(kLinkInfo) == link::kCount);

// The first error-class counter is the one of CQE status 1; status s counts at
// kErrorBase + s - 1 (cq_entry.h: kErrProtection = 1 ... kErrInjected = 10).
inline constexpr uint32_t kErrorBase = cdm::errors_protection;
inline constexpr uint32_t kErrorClasses = 10;
static_assert(cdm::errors_injected == kErrorBase + kErrorClasses - 1);

enum PageState : uint32_t { kPageLive = 1, kPageStopped = 2 };

struct PageHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  std::atomic<uint32_t> state;       // PageState; kPageStopped once the daemon exited cleanly
  uint32_t nic_addr;
  uint32_t daemon_pid;
  uint32_t node_count;               // counters defined in node[] (node::kCount of the writer)
  uint32_t cdm_count;                // counters defined per CDM
  uint32_t link_count;               // counters defined per link
  uint32_t cdm_entries;
  uint32_t link_entries;
  uint64_t page_size;
  uint64_t started_unix_ns;          // daemon start (CLOCK_REALTIME)
  std::atomic<uint64_t> refreshed_ns;  // CLOCK_MONOTONIC of the last copy of the CDM blocks
  uint64_t node_offset;
  uint64_t totals_offset;
  uint64_t cdm_table_offset;
  uint64_t link_table_offset;
  uint64_t reserved[4];
};
static_assert(sizeof(PageHeader) == 128);
static_assert(offsetof(PageHeader, state) == 8 && offsetof(PageHeader, page_size) == 40);
static_assert(offsetof(PageHeader, node_offset) == 64);

enum EntryState : uint32_t { kEntryFree = 0, kEntryLive = 1 };

// One attached CDM. The identity is written under a seqlock (`seq` odd while it changes);
// readers copy it and retry if seq moved. Counters are the daemon's last copy of the
// client's block, taken at `refreshed_ns` (CLOCK_MONOTONIC).
struct CdmEntry {
  std::atomic<uint32_t> seq;
  uint32_t state;  // EntryState
  uint64_t attach_id;
  uint32_t pid;
  uint32_t uid;
  uint32_t inst_id;
  uint32_t ptag;
  uint32_t cookie;
  uint32_t reserved0;
  uint64_t attached_unix_ns;
  std::atomic<uint64_t> refreshed_ns;
  uint64_t reserved[1];
  std::atomic<uint64_t> v[kCdmSlots];
};
static_assert(sizeof(CdmEntry) == 64 + 8 * kCdmSlots);
static_assert(offsetof(CdmEntry, v) == 64);

// One link to another daemon (peer_addr = its NIC address).
struct LinkEntry {
  std::atomic<uint32_t> seq;
  uint32_t state;  // EntryState
  uint32_t peer_addr;
  uint32_t reserved0;
  uint64_t reserved[6];
  std::atomic<uint64_t> v[kLinkSlots];
};
static_assert(sizeof(LinkEntry) == 64 + 8 * kLinkSlots);

inline constexpr uint64_t kNodeOffset = 128;
inline constexpr uint64_t kTotalsOffset = kNodeOffset + 8 * kNodeSlots;
inline constexpr uint64_t kCdmTableOffset = kTotalsOffset + 8 * kCdmSlots;
inline constexpr uint64_t kLinkTableOffset = kCdmTableOffset + uint64_t{kCdmEntries} * sizeof(CdmEntry);
inline constexpr uint64_t kPageSize =
    (kLinkTableOffset + uint64_t{kLinkEntries} * sizeof(LinkEntry) + 4095) / 4096 * 4096;
static_assert(kCdmTableOffset % 64 == 0 && kLinkTableOffset % 64 == 0);

// The client's block in its region heap (offset in RegionHeader::counters_offset, written
// by the daemon; 0 = the daemon provides none). Untrusted for the daemon: it only copies
// numbers out of it.
struct CdmCounterBlock {
  uint32_t magic;    // kBlockMagic
  uint16_t version;  // kVersion
  uint16_t slots;    // kCdmSlots
  uint32_t reserved[14];
  std::atomic<uint64_t> v[kCdmSlots];
};
static_assert(sizeof(CdmCounterBlock) == 64 + 8 * kCdmSlots);
static_assert(offsetof(CdmCounterBlock, v) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

}  // namespace nicemu::abi::counters
