// One reliable channel to one peer daemon over an unreliable datagram link: the sender's
// and receiver's halves of a sliding-window protocol (nicemu/abi/wire_protocol.h) with
// congestion control, so that many channels share a bottleneck instead of overrunning it.
//
// Sender: small messages are packed several to a record while the record waits to be sent
// (coalescing beyond the window, which counts records), larger ones are cut into records
// (segmentation); records are numbered and kept in a fixed ring until acknowledged. Two
// limits bound what is in flight: the flow-control window (at most `window` records
// unacknowledged: the receiver can always buffer them) and the congestion window (cwnd, in
// wire bytes of the records sent and neither acknowledged nor deemed lost). The cwnd starts
// at ten packets and grows by what is acknowledged (slow start) until the first loss or
// queueing delay, then by one packet per round trip (additive increase); it shrinks to half
// of itself on a loss the acks show (Reno's AIMD, as TCP-friendly as CUBIC) and to 0.7 on a
// timeout (most are a descheduled daemon), at most once per recovery episode (until
// everything sent before the loss is acknowledged), and in proportion to the excess when the smallest round-trip time
// of two rounds in a row exceeds the path's minimum by more than the delay target: a queue
// is building, so the sender backs off before the queue overflows. A loss while such a
// queue stood means a competitor that ignores delay: delay cuts stop for a while (loss-based
// sharing). A timeout whose originals turn out to have arrived is undone. Never below two
// packets. Records go
// out paced at 1.25 cwnd per smoothed round trip (2x in slow start), a small burst at a
// time, not as a window-sized burst.
//
// Loss recovery: acks are cumulative plus selective over the whole window (a 64-bit bitmap
// in the header, an extension record beyond it). A record is deemed lost when a record
// transmitted three transmissions after it is acknowledged (so a retransmission is judged
// against what was sent after it: at most once per round trip), or when its own timer runs
// out; lost records are resent first, inside the cwnd. The timer of a record is the
// measured round trip (smoothed RTT plus four deviations, samples only from records sent
// once: Karn's rule) when it is first sent, doubled on each of its own expiries (up to
// rto_max); new records never inherit another record's backoff.
//
// Liveness: a channel with records in flight goes down only when the peer has acknowledged
// nothing at all for its horizon: `silent_after_us`, or 16 smoothed round trips when that
// is longer (a peer slow to answer on a loaded host), at most four times `silent_after_us`;
// while the daemon that owns the channel is overloaded (many of its channels late at once,
// or its loop late: fabric_load.h) the horizon stretches to the overload horizon, bounded.
// Timer retransmissions spend the daemon's shared budget (fabric_load.h); without a token
// an expired record is put off by its own timeout.
// Only time this process ran on schedule counts: when fill() runs later than the channel's
// own next deadline, the lateness is this host's scheduling delay (on a loaded host the
// peer's daemon is likely descheduled alike) and the silence clock stops for it. Every
// queued message is then abandoned (counted), new messages are refused at once (fail
// fast), and the channel comes back up when the peer is heard again. A peer that
// acknowledges anything, however lossy the path, stays up. Records the kernel refused to
// send (not_sent(): a full socket buffer) are neither a loss nor silence: they are sent
// again first, without a backoff or a cwnd cut, and the silence clock starts over.
//
// Receiver: records are accepted inside [next expected, next expected + window), kept until
// the gap before them closes, then delivered in order to the reassembly (reassembly.h),
// which hands complete messages on. Duplicates and records outside the window are dropped
// and counted; acknowledgement state (cumulative + selective) is what the sender's packets
// carry back.
//
// Memory: the rings (records' state and payloads, both directions) and the reassembly
// buffer are anonymous mappings whose pages are committed only as records use them. A ring
// is indexed from the first record queued (held) after it last emptied, so traffic that
// never queues much — requests and replies, probes — keeps reusing its first pages instead
// of walking the whole ring; and once a channel has been idle (nothing queued, nothing held,
// no message half reassembled, nothing received) for `idle_release_us`, fill() gives all of
// it back to the kernel (madvise MADV_DONTNEED: the zero pages that come back are the
// records' initial state). Address space stays reserved, so the rings regrow on demand.
//
// No sockets, no clock: callers pass the time, so unit tests drive it over a simulated
// link. No allocation after construction.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "nicemu/abi/wire_protocol.h"
#include "nicemu/fabric/fabric_load.h"
#include "nicemu/fabric/reassembly.h"

namespace nicemu::fabric {

// Deleter of a channel's payload ring (an anonymous mapping of `len` bytes).
struct RingUnmap {
  size_t len = 0;
  void operator()(uint8_t* p) const;
};

struct ChannelConfig {
  uint32_t window = abi::wire::kWindow;
  uint32_t backlog = 2048;          // records queued (in flight + waiting), fixed ring
  uint64_t rto_initial_us = 10000;  // retransmission timeout before any round trip is measured
  uint64_t rto_min_us = 5000;       // floor of the measured timeout: a process on an oversubscribed
                                    // host is often descheduled for milliseconds
  uint64_t rto_max_us = 250000;     // backoff ceiling
  // A channel with records in flight whose peer acknowledged nothing for this long is down.
  uint64_t silent_after_us = 1800000;
  // Queueing delay (round-trip time above the path's minimum) the congestion control lets
  // build before it backs off; at least half the minimum RTT on long paths. 4 ms: one
  // sender's standing queue keeps a 5 ms-latency tbf port busy while its daemon is
  // descheduled for milliseconds.
  uint64_t delay_target_us = 4000;
  bool congestion_control = true;  // off: only the flow-control window limits (tests)
  // An idle channel's rings go back to the kernel after this long (0: never). Refaulting
  // a ring costs well under a millisecond; a channel busier than this never pays it.
  uint64_t idle_release_us = 200000;
};

struct ChannelStats {
  uint64_t messages_sent = 0, records_sent = 0, retransmits = 0;
  uint64_t messages_received = 0, records_received = 0;
  uint64_t duplicates = 0, out_of_window = 0, reassembly_errors = 0;
  uint64_t messages_abandoned = 0, refused = 0, downs = 0;
  uint64_t fast_retransmits = 0;  // of retransmits: resent on selective acks, before the timeout
  uint64_t timeouts = 0;          // records whose own timer ran out
  uint64_t recoveries = 0;        // loss episodes (one cwnd reduction each)
  uint64_t delay_backoffs = 0;    // cwnd reductions on queueing delay, before any loss
  uint64_t undos = 0;             // loss reductions undone: a timeout was spurious (the originals arrived)
  uint64_t delay_suspends = 0;    // the delay response switched off: a queue it did not build overflowed
  uint64_t most_tries = 0;        // the most transmissions one record has needed
  uint64_t not_sent = 0;          // records whose packet the kernel refused (sent again)
  uint64_t stalled_us = 0;        // this process's lateness not counted as the peer's silence
  uint64_t releases = 0;          // times the idle channel's memory went back to the kernel
  uint64_t deferred = 0;          // timer retransmissions the daemon's budget put off
};

// A record is deemed lost when the record transmitted this many transmissions after it is
// acknowledged (reordering that far is rare).
inline constexpr uint32_t kFastRetransmitAfter = 3;
// Wire bytes a record costs the link: its header and payload plus a packet's header and MAC
// (a full record is one packet; small ones share packets, overcounted a little).
inline constexpr uint64_t kRecordOverhead =
    sizeof(abi::wire::RecordHeader) + sizeof(abi::wire::PacketHeader) + abi::wire::kMacBytes;

class ReliableChannel {
 public:
  enum class State : uint8_t { kUp, kDown };
  static constexpr const char* kStateNames[] = {"up", "down"};
  using Deliver = std::function<void(abi::wire::RecordType type, const uint8_t* data, size_t len)>;

  // `load`: the owning daemon's view of all its channels (fabric_load.h), outliving the
  // channel; null: the channel judges alone, no retransmission budget.
  ReliableChannel(ChannelConfig cfg, Deliver deliver, FabricLoad* load = nullptr);
  ~ReliableChannel();
  ReliableChannel(const ReliableChannel&) = delete;
  ReliableChannel& operator=(const ReliableChannel&) = delete;

  // --- sender ---
  // Queues one message; false (and counted) when the channel is down, the message too long,
  // or the backlog full. Never blocks.
  bool send(abi::wire::RecordType type, const void* data, size_t len);
  // Writes the records due at `now` (lost ones again, then new ones inside both windows, as
  // pacing releases them) into `out` as RecordHeader+payload, at most `cap` bytes; returns
  // bytes written and adds the record count to `count`. May take the channel down (peer
  // silent past silent_after_us).
  size_t fill(uint64_t now_us, uint8_t* out, size_t cap, uint16_t& count);
  // The peer's acknowledgement: the packet header's ack and sack, and the bitmap of a
  // selective-ack extension record (bit i: record ack + 65 + i; `ext_len` bytes, 0: none).
  void on_ack(uint32_t ack, uint64_t sack, uint64_t now_us, const uint8_t* ext = nullptr, size_t ext_len = 0);
  // The kernel refused the packet that carried record `seq` (EAGAIN/ENOBUFS: no socket
  // buffer): it was never sent. It goes out again first, like a lost record but without a
  // backoff, a cwnd cut or a retransmission counted, and the peer's silence is measured
  // from `now_us` (it was given nothing to answer).
  void not_sent(uint32_t seq, uint64_t now_us);
  // Lowest seq the sender may still send (PacketHeader::base).
  uint32_t send_base() const { return base_; }
  // Earliest time fill() has something to do (UINT64_MAX: nothing queued): the next pacing
  // release, a record's timer, or the liveness horizon.
  uint64_t next_deadline() const;
  bool has_unsent() const { return sent_upto_ != next_ && sent_upto_ - base_ < cfg_.window; }
  size_t queued() const { return next_ - base_; }
  size_t in_flight() const { return sent_upto_ - base_; }

  // --- receiver ---
  // One record from a verified packet; payload bytes already bounds-checked by the caller.
  void on_record(const abi::wire::RecordHeader& rh, const uint8_t* payload);
  // The peer says it will never send records below `base` (it gave them up).
  void on_peer_base(uint32_t base);
  uint32_t ack() const { return rx_next_; }
  uint64_t sack() const;
  // The selective-ack extension (records ack + 65 onwards) into `out`, at most
  // abi::wire::kSackExtMax bytes; returns its length, 0 when nothing is held that far out.
  size_t sack_ext(uint8_t* out) const;
  // Records arrived since the last ack went out: an ack is owed.
  bool ack_owed() const { return ack_owed_; }
  void ack_sent() { ack_owed_ = false; }

  // --- both ---
  State state() const { return state_; }
  // The peer was heard (any authenticated packet): a down channel comes back up.
  void peer_heard();
  // The peer restarted (new epoch) or this side did: both halves start over at seq 1.
  // Messages still queued are abandoned (they were meant for the old incarnation).
  void reset();
  const ChannelStats& stats() const { return st_; }
  uint64_t rto_us() const { return rto_; }
  uint64_t srtt_us() const { return srtt_; }
  uint64_t min_rtt_us() const { return min_rtt_; }
  uint64_t cwnd_bytes() const { return cwnd_; }
  uint64_t pipe_bytes() const { return pipe_; }
  // Bytes of the channel's rings and reassembly buffer in memory now (mincore; the object
  // itself, a few hundred bytes, not counted).
  uint64_t resident_bytes() const;
  // Nothing queued, nothing held out of order, no message half reassembled.
  bool idle() const { return next_ == base_ && held_ == 0 && !reasm_.in_progress(); }

 private:
  struct OutRecord {
    uint32_t seq = 0;
    uint16_t len = 0;
    uint16_t msgs = 0;     // whole messages ending in this record (packed: several)
    uint8_t type = 0, flags = 0;
    bool acked = false;
    bool lost = false;     // waiting to be resent
    bool fast = false;     // deemed lost on selective acks (not by its timer)
    bool in_pipe = false;  // a copy is in flight: counted in pipe_
    bool refused = false;  // waiting to be sent again: the kernel refused its packet
    uint32_t tries = 0;    // transmissions
    uint64_t order = 0;    // transmission number of its latest copy
    uint64_t due_us = 0;   // its timer, once sent
    uint64_t rto_us = 0;   // its timeout, doubled by each of its own expiries
    uint64_t sent_us = 0;  // latest transmission (RTT sample when acked after one try)
  };
  struct InRecord {
    bool present = false;
    uint16_t len = 0;
    uint8_t type = 0, flags = 0;
  };
  // Records' state and payloads live apart: the scans over the window (expired records,
  // fast retransmit, selective acks) then read a few KiB, not a 1.4 KB payload line per
  // record.
  // Slots count from the ring's origin (out_origin_, in_origin_), moved only while the ring
  // is empty: every live record keeps its slot.
  uint32_t out_slot(uint32_t seq) const { return (seq - out_origin_) % cfg_.backlog; }
  uint32_t in_slot(uint32_t seq) const { return (seq - in_origin_) % cfg_.window; }
  OutRecord& out(uint32_t seq) { return out_[out_slot(seq)]; }
  const OutRecord& out(uint32_t seq) const { return out_[out_slot(seq)]; }
  InRecord& in(uint32_t seq) { return in_[in_slot(seq)]; }
  const InRecord& in(uint32_t seq) const { return in_[in_slot(seq)]; }
  uint8_t* out_data(uint32_t seq) { return &out_data_[uint64_t{out_slot(seq)} * abi::wire::kMaxRecordPayload]; }
  uint8_t* in_data(uint32_t seq) { return &in_data_[uint64_t{in_slot(seq)} * abi::wire::kMaxRecordPayload]; }
  void release_memory();
  void advance_base();
  void go_down();
  uint64_t wire_bytes(const OutRecord& r) const { return r.len + kRecordOverhead; }
  void mark_lost(OutRecord& r, bool fast);
  void on_loss(uint64_t now_us, bool timeout, bool frto);
  void undo_loss(uint64_t now_us);
  void on_round_end(uint64_t now_us);
  void reset_congestion();
  bool cwnd_open(uint64_t bytes) const { return !cfg_.congestion_control || pipe_ == 0 || pipe_ + bytes <= cwnd_; }
  void paced(uint64_t bytes, uint64_t now_us);
  void deliver_ready();
  void deliver_record(uint8_t type, uint8_t flags, const uint8_t* data, size_t len);
  void deliver_packed(uint8_t type, const uint8_t* data, size_t len);
  uint64_t queued_messages() const;

  ChannelConfig cfg_;
  Deliver deliver_;
  Reassembly reasm_;
  // Payload rings: anonymous mappings, not heap blocks. A page is committed only when a
  // record first uses it, whatever the allocator does: glibc with MALLOC_PERTURB_ (set by
  // `meson test`) fills every new block, which made each new peer cost 4 MB of page faults
  // in the daemon's loop (16 hosts: 60 MB per daemon at the first collective, and CE
  // liveness probes timed out behind it).
  using Ring = std::unique_ptr<uint8_t[], RingUnmap>;
  static Ring map_ring(size_t len);
  Ring out_data_, in_data_;
  // The records' state is mapped the same way (all-zero is a record's initial state): a
  // channel costs no resident memory until it carries traffic, whatever the allocator or a
  // sanitizer's shadow memory would make of a heap array.
  Ring out_state_, in_state_;
  OutRecord* out_ = nullptr;
  InRecord* in_ = nullptr;
  uint32_t out_origin_ = 1, in_origin_ = 1;
  // Pages may have been committed since the last release; and when the channel last had
  // something queued, held or arriving (fill's clock).
  bool touched_ = false;
  uint64_t active_us_ = 0;
  bool busy_ = false;  // as fill() last saw it: not idle()
  // No record sent is due before this (a lower bound, exact after each scan): fill() skips
  // its scan for expired records until then.
  uint64_t due_floor_ = UINT64_MAX;
  State state_ = State::kUp;
  // Sender: [base_, sent_upto_) sent at least once, [sent_upto_, next_) not yet sent.
  uint32_t base_ = 1, sent_upto_ = 1, next_ = 1;
  // Sender: records in [base_, sent_upto_) acknowledged selectively (above a missing one).
  uint32_t acked_in_flight_ = 0;
  // Receiver: every record below rx_next_ delivered; held_ records above it wait for the
  // missing ones (out of order).
  uint32_t rx_next_ = 1;
  uint32_t held_ = 0;
  uint32_t rx_high_ = 0;  // the highest record held (meaningful while held_ > 0)
  // Round-trip estimate (microseconds); srtt_ 0 = no sample yet.
  uint64_t srtt_ = 0, rttvar_ = 0, rto_ = 0;
  void rtt_sample(uint64_t rtt, uint64_t now_us);
  // Congestion control (bytes on the wire, see the top of this file).
  uint64_t cwnd_ = 0, ssthresh_ = UINT64_MAX, pipe_ = 0;
  bool in_recovery_ = false;
  uint32_t recovery_end_ = 0;  // the episode ends once every record below this is acknowledged
  // Path minimum RTT (over a sliding window, so a changed path is learnt) and the
  // smallest sample of the current round; a round ends when a record sent after it began
  // is acknowledged.
  uint64_t min_rtt_ = UINT64_MAX, min_rtt_at_ = 0, round_min_ = UINT64_MAX;
  uint64_t min_prev_ = UINT64_MAX, min_cur_ = UINT64_MAX;  // the two halves of min_rtt_'s window
  uint32_t round_end_ = 1;
  uint32_t delay_rounds_ = 0;      // consecutive rounds whose smallest RTT stood above the target
  bool round_limited_ = false;     // the cwnd limited the sender at some ack of this round
  bool last_round_queued_ = false; // the latest round's smallest RTT stood above the target
  uint64_t delay_off_until_ = 0;   // delay response suspended until then (a loss-based competitor)
  // Undo of a spurious timeout (F-RTO's idea): the cwnd and ssthresh before the episode;
  // while frto_ only the oldest record the timer gave up is resent, and the next ack says
  // whether the others' originals arrived after all.
  uint64_t undo_cwnd_ = 0, undo_ssthresh_ = 0;
  bool frto_ = false, frto_sent_ = false;
  uint64_t next_send_us_ = 0;  // pacing: no release before this
  uint64_t tx_order_ = 0;      // transmissions so far
  uint64_t acked_order_ = 0;   // the latest transmission known to have arrived
  uint32_t lost_ = 0;          // records waiting to be resent
  uint32_t lost_from_ = 1;     // none of them below this
  uint64_t progress_us_ = 0;   // the peer last acknowledged something (or the wait began)
  // The same, never moved for this daemon's own lateness or refused sends: whether the
  // silence overlapped an overloaded period is judged from when it really began.
  uint64_t silence_began_us_ = 0;
  uint64_t expect_us_ = UINT64_MAX;  // when the channel asked fill() to run next (its deadline then)
  size_t fill_body(uint64_t now_us, uint8_t* out, size_t cap, uint16_t& count);
  // The channel's own horizon (no daemon-wide stretch).
  uint64_t silent_horizon() const;
  // Liveness as the owning daemon sees it (fabric_load.h): this channel late or not, and
  // the next time its silence must be looked at again (a lower bound for next_deadline).
  FabricLoad* load_ = nullptr;
  bool late_ = false;
  uint64_t answer_window_ = 0;
  uint64_t live_check_us_ = UINT64_MAX;
  void set_late(bool late, uint64_t now_us);
  void plan_live_check(uint64_t now_us);
  bool ack_owed_ = false;
  ChannelStats st_;
};

}  // namespace nicemu::fabric
