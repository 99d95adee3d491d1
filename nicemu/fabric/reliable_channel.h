// One reliable channel to one peer daemon over an unreliable datagram link: the sender's
// and receiver's halves of a sliding-window protocol (nicemu/abi/wire_protocol.h).
//
// Sender: small messages are packed several to a record while the record waits to be sent
// (coalescing beyond the window, which counts records), larger ones are cut into records
// (segmentation); records are numbered and kept in a fixed ring until acknowledged. At most `window` records are unacknowledged (the receiver can always
// buffer them: credit-based flow control). A record not acknowledged within its
// retransmission timeout is sent again with the timeout doubled (exponential backoff, up to
// rto_max). The timeout of new records follows the measured round trip (smoothed RTT plus
// four deviations, samples only from records sent once: Karn's rule), so a loaded host
// does not retransmit spuriously. A record sent `max_tries` times without an ack takes the channel down: every
// queued message is abandoned (counted), new messages are refused at once (fail fast), and
// the channel comes back up when the peer is heard again.
//
// Receiver: records are accepted inside [next expected, next expected + window), kept until
// the gap before them closes, then delivered in order to the reassembly (reassembly.h),
// which hands complete messages on. Duplicates and records outside the window are dropped
// and counted; acknowledgement state (cumulative + 64-bit selective bitmap) is what the
// sender's packets carry back.
//
// No sockets, no clock: callers pass the time, so unit tests drive it over a simulated
// lossy link. No allocation after construction.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "nicemu/abi/wire_protocol.h"
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
  uint32_t max_tries = 12;          // sends of one record before the peer counts as silent
};

struct ChannelStats {
  uint64_t messages_sent = 0, records_sent = 0, retransmits = 0;
  uint64_t messages_received = 0, records_received = 0;
  uint64_t duplicates = 0, out_of_window = 0, reassembly_errors = 0;
  uint64_t messages_abandoned = 0, refused = 0, downs = 0;
  uint64_t fast_retransmits = 0;  // of retransmits: resent on selective acks, before the timeout
};

// Records acknowledged after an unacknowledged one before it is resent at once.
inline constexpr uint32_t kFastRetransmitAfter = 3;

class ReliableChannel {
 public:
  enum class State : uint8_t { kUp, kDown };
  static constexpr const char* kStateNames[] = {"up", "down"};
  using Deliver = std::function<void(abi::wire::RecordType type, const uint8_t* data, size_t len)>;

  ReliableChannel(ChannelConfig cfg, Deliver deliver);

  // --- sender ---
  // Queues one message; false (and counted) when the channel is down, the message too long,
  // or the backlog full. Never blocks.
  bool send(abi::wire::RecordType type, const void* data, size_t len);
  // Writes the records due at `now` (new ones inside the window, expired ones again) into
  // `out` as RecordHeader+payload, at most `cap` bytes; returns bytes written and adds the
  // record count to `count`. May take the channel down (retry budget exhausted).
  size_t fill(uint64_t now_us, uint8_t* out, size_t cap, uint16_t& count);
  // The peer's acknowledgement from a packet header.
  void on_ack(uint32_t ack, uint64_t sack, uint64_t now_us);
  // Lowest seq the sender may still send (PacketHeader::base).
  uint32_t send_base() const { return base_; }
  // Earliest time fill() has something to do (UINT64_MAX: nothing queued).
  uint64_t next_deadline() const;
  bool has_unsent() const { return sent_upto_ != next_ && sent_upto_ < base_ + cfg_.window; }
  size_t queued() const { return next_ - base_; }
  size_t in_flight() const { return sent_upto_ - base_; }

  // --- receiver ---
  // One record from a verified packet; payload bytes already bounds-checked by the caller.
  void on_record(const abi::wire::RecordHeader& rh, const uint8_t* payload);
  // The peer says it will never send records below `base` (it gave them up).
  void on_peer_base(uint32_t base);
  uint32_t ack() const { return rx_next_; }
  uint64_t sack() const;
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

 private:
  struct OutRecord {
    uint32_t seq = 0;
    uint16_t len = 0;
    uint16_t msgs = 0;     // whole messages ending in this record (packed: several)
    uint8_t type = 0, flags = 0;
    bool acked = false;
    bool fast = false;       // due now: later records were acknowledged (fast retransmit)
    bool fast_done = false;  // fast-retransmitted once already
    uint32_t tries = 0;
    uint64_t due_us = 0;   // next (re)transmission time once sent
    uint64_t rto_us = 0;
    uint64_t sent_us = 0;  // first transmission (RTT sample when acked after one try)
  };
  struct InRecord {
    bool present = false;
    uint16_t len = 0;
    uint8_t type = 0, flags = 0;
  };
  // Records' state and payloads live apart: the scans over the window (expired records,
  // fast retransmit, selective acks) then read a few KiB, not a 1.4 KB payload line per
  // record.
  OutRecord& out(uint32_t seq) { return out_[seq % cfg_.backlog]; }
  InRecord& in(uint32_t seq) { return in_[seq % cfg_.window]; }
  uint8_t* out_data(uint32_t seq) { return &out_data_[uint64_t{seq % cfg_.backlog} * abi::wire::kMaxRecordPayload]; }
  uint8_t* in_data(uint32_t seq) { return &in_data_[uint64_t{seq % cfg_.window} * abi::wire::kMaxRecordPayload]; }
  void advance_base();
  void go_down();
  void deliver_ready();
  void deliver_record(uint8_t type, uint8_t flags, const uint8_t* data, size_t len);
  void deliver_packed(uint8_t type, const uint8_t* data, size_t len);
  uint64_t queued_messages() const;

  ChannelConfig cfg_;
  Deliver deliver_;
  Reassembly reasm_;
  std::unique_ptr<OutRecord[]> out_;
  std::unique_ptr<InRecord[]> in_;
  // Payload rings: anonymous mappings, not heap blocks. A page is committed only when a
  // record first uses it, whatever the allocator does: glibc with MALLOC_PERTURB_ (set by
  // `meson test`) fills every new block, which made each new peer cost 4 MB of page faults
  // in the daemon's loop (16 hosts: 60 MB per daemon at the first collective, and CE
  // liveness probes timed out behind it).
  using Ring = std::unique_ptr<uint8_t[], RingUnmap>;
  static Ring map_ring(size_t len);
  Ring out_data_, in_data_;
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
  // Round-trip estimate (microseconds); srtt_ 0 = no sample yet.
  uint64_t srtt_ = 0, rttvar_ = 0, rto_ = 0;
  void rtt_sample(uint64_t rtt);
  bool ack_owed_ = false;
  ChannelStats st_;
};

}  // namespace nicemu::fabric
