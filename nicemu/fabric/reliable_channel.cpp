#include "nicemu/fabric/reliable_channel.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <type_traits>

namespace nicemu::fabric {

using namespace nicemu::abi::wire;

namespace {
// Wrap-safe "a is before b" for 32-bit sequence numbers.
bool before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
// Congestion control constants (docs/fabric.md, "Congestion control").
constexpr uint64_t kPacket = kMaxPacket;
constexpr uint64_t kInitialCwnd = 10 * kPacket;
constexpr uint64_t kMinCwnd = 2 * kPacket;  // 16+ senders on a narrow link still progress
// cwnd kept on a loss the acks show (a queue overflowed). With one packet per round trip of
// growth this is Reno's AIMD(1, 0.5): the share CUBIC's Reno-friendly rate (3(1-0.7)/(1+0.7)
// = 0.53 packets per round trip, x0.7; RFC 9438), where it runs at LAN round trips, is built
// to match, so a cubic flow keeps its per-flow share. It also converges faster per unit time
// than AIMD(1, 0.7) (docs/notes/2026-12-08-incast-cubic.md).
constexpr double kLossBeta = 0.5;
// cwnd kept on a timeout: on a loaded host most are a descheduled daemon, not the link, and
// most of those are never undone; the deeper cut cost 0.02-0.03 of goodput on the simulated
// busy host.
constexpr double kTimeoutBeta = 0.7;
constexpr double kDelayBetaMin = 0.7;       // cwnd kept at least on one delay backoff
constexpr uint64_t kMinRttWindowUs = 1'000'000;
// Pacing: a release may be this long ahead of the rate (bursts of about a millisecond's
// worth of data, between two and 45 packets: fewer timer wake-ups, no window-sized bursts).
constexpr uint64_t kPaceBurstUs = 1000;
constexpr uint64_t kPaceBurstMax = 64 * 1024;
// fill() running this much later than the channel's deadline is this process's own
// scheduling delay (the daemon's timer and loop are punctual to well under a millisecond
// when it gets the CPU): not counted as the peer's silence.
constexpr uint64_t kLateSlackUs = 2000;
// The liveness horizon is at least this many smoothed round trips (a peer whose answers
// take long on a loaded host), at most kSilentMaxFactor times silent_after_us.
constexpr uint64_t kSilentRtts = 16;
constexpr uint64_t kSilentMaxFactor = 4;
// While the owning daemon is overloaded a channel past its own horizon looks again this
// often: the stretch ends when the overload does (fabric_load.h).
constexpr uint64_t kLiveRecheckUs = 250'000;
// Delay signal: the excess must persist this many rounds in a row (a descheduled peer or
// daemon lifts one round's minimum, not two), and a cwnd this small is not cut on delay
// (at 16+ senders the windows are a few packets: losses share the link, delay cuts only
// starve).
constexpr uint32_t kDelayRounds = 2;
constexpr uint64_t kDelayMinCwnd = 4 * kPacket;
// A loss while a queue stood above the delay target means a sender that does not back off
// on delay fills it (loss-based TCP): delay cuts would only hand it the link, so they stop
// for this long (renewed by every such loss).
constexpr uint64_t kDelayOffUs = 10'000'000;
}  // namespace

ReliableChannel::ReliableChannel(ChannelConfig cfg, Deliver deliver, FabricLoad* load)
    : cfg_(cfg), deliver_(std::move(deliver)), load_(load) {
  // Ring indexes are seq % size: sizes must divide 2^32 so they stay right across wrap.
  auto pow2 = [](uint32_t v) { return v && (v & (v - 1)) == 0; };
  if (!pow2(cfg_.window) || !pow2(cfg_.backlog) || cfg_.window > kWindow || cfg_.backlog < cfg_.window)
    cfg_ = ChannelConfig{};
  rto_ = cfg_.rto_initial_us;
  reset_congestion();
  // Zero pages from the kernel are the records' initial state (every member's default is 0),
  // so nothing is written here and no page is committed until a record is used.
  static_assert(std::is_aggregate_v<OutRecord> && std::is_trivially_copyable_v<OutRecord>);
  static_assert(std::is_aggregate_v<InRecord> && std::is_trivially_copyable_v<InRecord>);
  out_state_ = map_ring(uint64_t{cfg_.backlog} * sizeof(OutRecord));
  in_state_ = map_ring(uint64_t{cfg_.window} * sizeof(InRecord));
  out_ = std::launder(reinterpret_cast<OutRecord*>(out_state_.get()));
  in_ = std::launder(reinterpret_cast<InRecord*>(in_state_.get()));
  // Payload rings are not cleared: their pages are committed only as records use them, so a
  // peer that only ever exchanges small messages costs a few pages, not the full rings.
  out_data_ = map_ring(uint64_t{cfg_.backlog} * kMaxRecordPayload);
  // The reassembly buffer follows the incoming payloads: one mapping to give back.
  in_data_ = map_ring(uint64_t{cfg_.window} * kMaxRecordPayload + kMaxMessage);
  reasm_ = Reassembly(in_data_.get() + uint64_t{cfg_.window} * kMaxRecordPayload);
}

ReliableChannel::~ReliableChannel() {
  if (late_ && load_) load_->late_leave();
}

void ReliableChannel::set_late(bool late, uint64_t now_us) {
  if (late == late_) return;
  late_ = late;
  if (!load_) return;
  if (late)
    load_->late_enter(now_us);
  else
    load_->late_leave();
}

void ReliableChannel::plan_live_check(uint64_t now_us) {
  if (state_ != State::kUp || in_flight() == 0) {
    set_late(false, now_us);
    live_check_us_ = UINT64_MAX;
    return;
  }
  const uint64_t base = silent_horizon();
  const uint64_t silent = now_us > progress_us_ ? now_us - progress_us_ : 0;
  if (!load_) {
    live_check_us_ = progress_us_ + base;
  } else if (silent < base / 2) {
    // Not late (any more: the silence clock may have moved for this host's own lateness);
    // late from half the horizon on, when the daemon counts it.
    set_late(false, now_us);
    live_check_us_ = progress_us_ + base / 2;
  } else if (silent < base) {
    live_check_us_ = progress_us_ + base;
  } else {
    // Past its own horizon and kept up by the daemon's overload: look again soon.
    live_check_us_ = std::min(progress_us_ + load_->horizon(base, now_us, silence_began_us_), now_us + kLiveRecheckUs);
  }
}

ReliableChannel::Ring ReliableChannel::map_ring(size_t len) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return Ring(static_cast<uint8_t*>(p), RingUnmap{len});
}

void RingUnmap::operator()(uint8_t* p) const {
  if (p) munmap(p, len);
}

void ReliableChannel::release_memory() {
  // Only while idle: no record queued or held, no message half reassembled, so no byte of
  // the rings is needed again and zero pages are every record's initial state.
  // A failed madvise (not expected on these mappings) keeps the pages: memory, not data.
  bool all = true;
  for (const Ring* r : {&out_state_, &in_state_, &out_data_, &in_data_})
    all = madvise(r->get(), r->get_deleter().len, MADV_DONTNEED) == 0 && all;
  touched_ = false;
  if (all) ++st_.releases;
}

uint64_t ReliableChannel::resident_bytes() const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uint64_t total = 0;
  for (const Ring* r : {&out_state_, &in_state_, &out_data_, &in_data_}) {
    const size_t pages = (r->get_deleter().len + page - 1) / page;
    unsigned char vec[512];
    for (size_t first = 0; first < pages; first += sizeof vec) {
      const size_t n = std::min(sizeof vec, pages - first);
      if (mincore(r->get() + first * page, n * page, vec) != 0) return UINT64_MAX;
      for (size_t i = 0; i < n; ++i) total += vec[i] & 1;
    }
  }
  return total * page;
}

bool ReliableChannel::send(RecordType type, const void* data, size_t len) {
  touched_ = true;
  // An empty ring starts over at its first slot (see the top of reliable_channel.h).
  if (next_ == base_) out_origin_ = next_;
  if (len <= kPackMax && state_ == State::kUp) {
    // Append to the newest record if it is a packed one not sent yet, else start one.
    const size_t need = sizeof(uint16_t) + len;
    OutRecord* r = nullptr;
    if (next_ != sent_upto_) {
      OutRecord& tail = out(next_ - 1);
      if ((tail.flags & kRecordPacked) && tail.type == static_cast<uint8_t>(type) &&
          tail.len + need <= kMaxRecordPayload)
        r = &tail;
    }
    if (!r) {
      if (queued() + 1 > cfg_.backlog) {
        ++st_.refused;
        return false;
      }
      r = &out(next_);
      r->seq = next_;
      r->len = 0;
      r->msgs = 0;
      r->type = static_cast<uint8_t>(type);
      r->flags = kRecordPacked;
      r->acked = r->lost = r->fast = r->in_pipe = r->refused = false;
      r->tries = 0;
      r->due_us = 0;
      ++next_;
    }
    uint16_t l16 = static_cast<uint16_t>(len);
    uint8_t* d = out_data(r->seq);
    std::memcpy(d + r->len, &l16, sizeof l16);
    if (len) std::memcpy(d + r->len + sizeof l16, data, len);
    r->len = static_cast<uint16_t>(r->len + need);
    ++r->msgs;
    ++st_.messages_sent;
    return true;
  }
  const size_t nrec = len == 0 ? 1 : (len + kMaxRecordPayload - 1) / kMaxRecordPayload;
  if (state_ == State::kDown || len > kMaxMessage || queued() + nrec > cfg_.backlog) {
    ++st_.refused;
    return false;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < nrec; ++i) {
    OutRecord& r = out(next_);
    size_t n = std::min(len - i * kMaxRecordPayload, kMaxRecordPayload);
    r.seq = next_;
    r.len = static_cast<uint16_t>(n);
    r.msgs = i + 1 < nrec ? 0 : 1;
    r.type = static_cast<uint8_t>(type);
    r.flags = i + 1 < nrec ? kRecordMore : 0;
    r.acked = r.lost = r.fast = r.in_pipe = r.refused = false;
    r.tries = 0;
    r.due_us = 0;
    if (n) std::memcpy(out_data(r.seq), p + i * kMaxRecordPayload, n);
    ++next_;
  }
  ++st_.messages_sent;
  return true;
}

void ReliableChannel::reset_congestion() {
  cwnd_ = kInitialCwnd;
  ssthresh_ = UINT64_MAX;
  pipe_ = 0;
  in_recovery_ = false;
  frto_ = frto_sent_ = false;
  delay_rounds_ = 0;
  round_limited_ = last_round_queued_ = false;
  delay_off_until_ = 0;
  round_min_ = UINT64_MAX;
  round_end_ = sent_upto_;
  next_send_us_ = 0;
  lost_ = 0;
  lost_from_ = base_;
}

void ReliableChannel::paced(uint64_t bytes, uint64_t now_us) {
  if (!cfg_.congestion_control || srtt_ == 0) return;  // no round trip measured: cwnd alone
  // Rate: cwnd per smoothed round trip, with headroom to find more (2x while the cwnd is
  // still doubling each round, 1.25x after).
  const double gain = cwnd_ < ssthresh_ ? 2.0 : 1.25;
  const double bytes_per_us = gain * static_cast<double>(cwnd_) / static_cast<double>(srtt_);
  const double burst = std::clamp(bytes_per_us * kPaceBurstUs, 2.0 * kPacket, double(kPaceBurstMax));
  const uint64_t slack = static_cast<uint64_t>(burst / bytes_per_us);
  // Credit left over from an idle spell is capped at one burst.
  const uint64_t from = std::max(next_send_us_, now_us > slack ? now_us - slack : 0);
  next_send_us_ = from + static_cast<uint64_t>(static_cast<double>(bytes) / bytes_per_us);
}

void ReliableChannel::mark_lost(OutRecord& r, bool fast) {
  if (r.in_pipe) {
    r.in_pipe = false;
    pipe_ -= wire_bytes(r);
  }
  r.lost = true;
  r.fast = fast;
  ++lost_;
  if (before(r.seq, lost_from_)) lost_from_ = r.seq;
}

void ReliableChannel::on_loss(uint64_t now_us, bool timeout, bool frto) {
  // One reduction per episode: the losses of one overflowing queue are one congestion event.
  if (in_recovery_) return;
  in_recovery_ = true;
  recovery_end_ = sent_upto_;
  ++st_.recoveries;
  undo_cwnd_ = cwnd_;
  undo_ssthresh_ = ssthresh_;
  // A timeout with a measured round trip may be a stall of the peer's daemon, not a loss:
  // resend one record first and let the next ack tell (undo_loss).
  frto_ = frto && srtt_ != 0;
  frto_sent_ = false;
  if (!timeout && last_round_queued_ && ssthresh_ != UINT64_MAX && cfg_.congestion_control) {
    if (now_us >= delay_off_until_) ++st_.delay_suspends;
    delay_off_until_ = now_us + kDelayOffUs;
  }
  const double beta = timeout ? kTimeoutBeta : kLossBeta;
  ssthresh_ = std::max(static_cast<uint64_t>(static_cast<double>(cwnd_) * beta), kMinCwnd);
  cwnd_ = ssthresh_;
}

void ReliableChannel::on_round_end(uint64_t now_us) {
  // Delay signal: even the smallest round trip of this round stood well above the path's
  // minimum, so a queue persisted for the whole round (one descheduled moment does not lift
  // the round's minimum), and it did so kDelayRounds rounds in a row (a stalled daemon
  // lifts one). Back off in proportion to the excess, at most by 30 %; not when this
  // channel did not fill its cwnd (the queue is not its doing), nor below kDelayMinCwnd,
  // nor while a loss-based competitor was seen.
  const bool queued = round_min_ != UINT64_MAX && min_rtt_ != UINT64_MAX &&
                      round_min_ > min_rtt_ + std::max(cfg_.delay_target_us, min_rtt_ / 2);
  delay_rounds_ = queued ? delay_rounds_ + 1 : 0;
  last_round_queued_ = queued;
  if (cfg_.congestion_control && queued && !in_recovery_ && delay_rounds_ >= kDelayRounds && round_limited_ &&
      cwnd_ > kDelayMinCwnd && now_us >= delay_off_until_) {
    const uint64_t target = min_rtt_ + std::max(cfg_.delay_target_us, min_rtt_ / 2);
    const double excess = static_cast<double>(round_min_ - target) / static_cast<double>(round_min_);
    const double keep = std::max(kDelayBetaMin, 1.0 - 0.5 * excess);
    cwnd_ = std::max(static_cast<uint64_t>(static_cast<double>(cwnd_) * keep), kDelayMinCwnd);
    ssthresh_ = cwnd_;  // slow start ends at the first sign of a queue
    ++st_.delay_backoffs;
    delay_rounds_ = 0;
  }
  round_limited_ = false;
  round_min_ = UINT64_MAX;
  round_end_ = sent_upto_;
}

void ReliableChannel::undo_loss(uint64_t now_us) {
  // The timer gave records up that arrived after all: the peer (or this daemon) stalled,
  // the link lost nothing. Back to the cwnd before the episode, and the records still
  // marked lost are in flight again (their originals are most likely on the way).
  ++st_.undos;
  cwnd_ = std::max(cwnd_, undo_cwnd_);
  ssthresh_ = undo_ssthresh_;
  in_recovery_ = false;
  for (uint32_t s = base_; s != sent_upto_; ++s) {
    OutRecord& r = out(s);
    if (r.acked || !r.lost || r.fast || r.refused || r.tries != 1) continue;
    r.lost = false;
    --lost_;
    r.in_pipe = true;
    pipe_ += wire_bytes(r);
    r.due_us = now_us + r.rto_us;
    due_floor_ = std::min(due_floor_, r.due_us);
  }
}

uint64_t ReliableChannel::silent_horizon() const {
  return std::clamp(kSilentRtts * srtt_, cfg_.silent_after_us, kSilentMaxFactor * cfg_.silent_after_us);
}

size_t ReliableChannel::fill(uint64_t now_us, uint8_t* buf, size_t cap, uint16_t& count) {
  // Ran later than the channel asked to: this process was not scheduled meanwhile (or the
  // whole host is overloaded). The peer's acks may be waiting unread; its daemon is likely
  // descheduled alike. That time is not the peer's silence.
  if (state_ == State::kUp && in_flight() > 0 && expect_us_ != UINT64_MAX && now_us > expect_us_ + kLateSlackUs) {
    progress_us_ += now_us - expect_us_;
    st_.stalled_us += now_us - expect_us_;
    if (load_) load_->own_late(now_us, now_us - expect_us_);
  }
  const size_t used = fill_body(now_us, buf, cap, count);
  plan_live_check(now_us);
  // UINT64_MAX: nothing in flight, no deadline; one due already: the caller's loop runs it now.
  const uint64_t next = next_deadline();
  expect_us_ = next == UINT64_MAX ? next : std::max(next, now_us);
  return used;
}

void ReliableChannel::not_sent(uint32_t seq, uint64_t now_us) {
  if (before(seq, base_) || !before(seq, sent_upto_)) return;
  OutRecord& r = out(seq);
  if (r.acked || r.lost || r.tries == 0) return;
  mark_lost(r, false);
  r.refused = true;
  --r.tries;  // it never left: its next transmission is not a retransmission
  ++st_.not_sent;
  // The peer was given nothing to answer: its silence counts from now.
  progress_us_ = std::max(progress_us_, now_us);
}

size_t ReliableChannel::fill_body(uint64_t now_us, uint8_t* buf, size_t cap, uint16_t& count) {
  size_t used = 0;
  auto put = [&](const OutRecord& r) {
    if (used + sizeof(RecordHeader) + r.len > cap) return false;
    RecordHeader rh{r.seq, r.len, r.type, r.flags};
    std::memcpy(buf + used, &rh, sizeof rh);
    std::memcpy(buf + used + sizeof rh, out_data(r.seq), r.len);
    used += sizeof rh + r.len;
    ++count;
    return true;
  };
  auto transmit = [&](OutRecord& r) {
    r.in_pipe = true;
    pipe_ += wire_bytes(r);
    ++r.tries;
    st_.most_tries = std::max<uint64_t>(st_.most_tries, r.tries);
    r.order = ++tx_order_;
    r.sent_us = now_us;
    r.due_us = now_us + r.rto_us;
    due_floor_ = std::min(due_floor_, r.due_us);
    paced(wire_bytes(r), now_us);
  };
  // Records queued, held or arrived since the last ack went out; or records were queued or
  // held at the last fill and what emptied them (an ack, a gap closed) came since: a caller
  // fills a channel when it has work, not on every turn of its loop, so idle from now on.
  if (!idle() || ack_owed_ || busy_) {
    active_us_ = now_us;
  } else if (touched_ && cfg_.idle_release_us != 0 && now_us >= active_us_ + cfg_.idle_release_us) {
    release_memory();
  }
  busy_ = !idle();
  if (state_ == State::kDown) return 0;
  // Liveness: records in flight and nothing at all acknowledged for the horizon (this
  // process's own lateness excluded, in fill()); stretched if the daemon was overloaded at
  // any time in the silence, which counts this channel among the late ones from half its
  // horizon on.
  if (in_flight() > 0) {
    const uint64_t base = silent_horizon();
    const uint64_t silent = now_us > progress_us_ ? now_us - progress_us_ : 0;
    if (load_ && silent >= base / 2) set_late(true, now_us);
    if (silent >= base && (!load_ || silent >= load_->horizon(base, now_us, silence_began_us_))) {
      go_down();
      return 0;
    }
  }
  // Timers first: a record whose own timer ran out is lost (its next timeout doubled).
  if (now_us >= due_floor_) {
    uint64_t floor = UINT64_MAX;
    bool expired = false, resent_expired = false;
    for (uint32_t s = base_; s != sent_upto_; ++s) {
      OutRecord& r = out(s);
      if (r.acked || r.lost) continue;
      if (r.due_us > now_us) {
        floor = std::min(floor, r.due_us);
        continue;
      }
      // The backoff stops at a sixteenth of the liveness horizon: a live peer behind a very
      // lossy path gets at least 16 tries of the record before the horizon, not 7. Before
      // any round trip is measured it may reach rto_max: a peer answering in more than
      // that sixteenth (a loaded host: hundreds of ms) must get a record through once, or
      // no sample is ever taken and every record is sent again and again.
      const uint64_t cap = srtt_ == 0 ? cfg_.rto_max_us : std::max(cfg_.rto_min_us, cfg_.silent_after_us / 16);
      r.rto_us = std::min({r.rto_us * 2, cfg_.rto_max_us, cap});
      if (load_ && !load_->take_retransmit(now_us)) {
        // The daemon's timer retransmissions are at their budget: put off by the record's
        // next timeout (backed off like a retransmission, so a deferred record does not
        // wake the daemon more often than a resent one), no loss counted.
        r.due_us = now_us + r.rto_us;
        floor = std::min(floor, r.due_us);
        ++st_.deferred;
        continue;
      }
      mark_lost(r, false);
      if (r.tries > 1) resent_expired = true;
      // Before any round trip was measured the initial timeout may be shorter than the path:
      // new records take the backoff too, or none would ever yield a sample.
      if (srtt_ == 0) rto_ = std::max(rto_, r.rto_us);
      ++st_.timeouts;
      expired = true;
    }
    due_floor_ = floor;
    if (expired) {
      // The resent record's own timer ran out too: the peer is not just slow, resend all.
      if (frto_ && frto_sent_) frto_ = false;
      // F-RTO only when every record given up was sent once: a resent one timing out again
      // is a lossy path, where holding the others back would only slow recovery.
      on_loss(now_us, true, !resent_expired);
    }
  }
  const bool pacing_due = now_us >= next_send_us_;
  if (!pacing_due) return 0;
  // Lost records again, oldest first: they hold the window back.
  for (uint32_t s = lost_from_; lost_ > 0 && before(s, sent_upto_); ++s) {
    if (before(s, base_)) s = base_;
    OutRecord& r = out(s);
    lost_from_ = s;
    if (!r.lost || r.acked) continue;
    if (frto_ && frto_sent_) break;  // one until the next ack says whether the rest arrived
    if (!cwnd_open(wire_bytes(r)) || now_us < next_send_us_) return used;
    if (!put(r)) return used;
    r.lost = false;
    --lost_;
    if (r.refused) {
      // Never left this host: sent again as it was, no retransmission.
      r.refused = false;
      transmit(r);
      continue;
    }
    frto_sent_ = frto_;
    ++st_.retransmits;
    if (r.fast) ++st_.fast_retransmits;
    r.fast = false;
    transmit(r);
  }
  // New records, as far as the flow-control window (the receiver's buffer), the cwnd and
  // the pacing allow.
  while (sent_upto_ != next_ && sent_upto_ - base_ < cfg_.window) {
    OutRecord& r = out(sent_upto_);
    if (!cwnd_open(wire_bytes(r)) || now_us < next_send_us_) break;
    if (!put(r)) break;
    if (in_flight() == 0) progress_us_ = silence_began_us_ = now_us;  // the liveness clock starts with the wait
    r.tries = 0;
    r.rto_us = rto_;
    transmit(r);
    ++st_.records_sent;
    ++sent_upto_;
  }
  return used;
}

void ReliableChannel::rtt_sample(uint64_t rtt, uint64_t now_us) {
  // RFC 6298's estimator, in integers.
  if (srtt_ == 0) {
    srtt_ = rtt;
    rttvar_ = rtt / 2;
  } else {
    uint64_t err = rtt > srtt_ ? rtt - srtt_ : srtt_ - rtt;
    rttvar_ = (3 * rttvar_ + err) / 4;
    srtt_ = (7 * srtt_ + rtt) / 8;
  }
  // At least twice the smoothed RTT: a queue that fills between samples can double the
  // round trip faster than the deviation follows, and a timer that fires before the ack of
  // a record that is only queued cuts the cwnd for nothing.
  rto_ = std::clamp(srtt_ + std::max(4 * rttvar_, srtt_), cfg_.rto_min_us, cfg_.rto_max_us);
  // Windowed minimum over two half windows: the path's base RTT as seen lately. A sender
  // that started while a queue stood learns the lower RTT when the queue next drains, so
  // all senders judge the queue against the same floor (else the latecomer never backs off).
  if (now_us >= min_rtt_at_ + kMinRttWindowUs / 2) {
    min_prev_ = min_cur_;
    min_cur_ = UINT64_MAX;
    min_rtt_at_ = now_us;
  }
  min_cur_ = std::min(min_cur_, std::max<uint64_t>(rtt, 1));
  min_rtt_ = std::min(min_prev_, min_cur_);
  round_min_ = std::min(round_min_, rtt);
}

void ReliableChannel::on_ack(uint32_t ack, uint64_t sack, uint64_t now_us, const uint8_t* ext, size_t ext_len) {
  // Only acknowledgements of records actually sent count; anything else is stale or bogus.
  if (before(ack, base_) || before(sent_upto_, ack)) return;
  // One RTT sample per ack: the most recently sent record it newly covers that was sent
  // only once (a retransmitted one cannot tell which copy is acknowledged: Karn).
  uint64_t newest = 0, acked_bytes = 0, acked_records = 0, order = 0, order_once = 0;
  bool sampled = false, round_over = false, late_original = false;
  const uint64_t pipe_before = pipe_;
  auto take = [&](OutRecord& r) {
    if (r.acked || r.tries == 0) return;
    r.acked = true;
    ++acked_in_flight_;
    acked_bytes += wire_bytes(r);
    ++acked_records;
    if (r.in_pipe) {
      r.in_pipe = false;
      pipe_ -= wire_bytes(r);
    }
    if (r.lost) {  // arrived after all (a late original): no need to send it again
      if (!r.fast && r.tries == 1) late_original = true;
      r.lost = false;
      --lost_;
    }
    if (r.tries == 1) {
      order = std::max(order, r.order);
      order_once = std::max(order_once, r.order);
      if (r.sent_us <= now_us && (!sampled || r.sent_us > newest)) {
        newest = r.sent_us;
        sampled = true;
      }
    } else if (min_rtt_ != UINT64_MAX && now_us >= r.sent_us + min_rtt_ / 2) {
      // A retransmission acknowledged no sooner than a round trip allows: its copy arrived.
      order = std::max(order, r.order);
    }
    if (!before(r.seq, round_end_)) round_over = true;
  };
  for (uint32_t s = base_; s != ack; ++s) take(out(s));
  for (uint32_t i = 0; i < 64 && sack; ++i) {
    if (!(sack >> i & 1)) continue;
    uint32_t s = ack + 1 + i;
    if (!before(s, base_) && before(s, sent_upto_)) take(out(s));
  }
  for (size_t i = 0; ext && i < std::min(ext_len, kSackExtMax) * 8; ++i) {
    if (!(ext[i / 8] >> (i % 8) & 1)) continue;
    uint32_t s = ack + 65 + static_cast<uint32_t>(i);
    if (!before(s, base_) && before(s, sent_upto_)) take(out(s));
  }
  if (acked_bytes) {
    progress_us_ = silence_began_us_ = now_us;
    set_late(false, now_us);
    if (load_) {
      // Slow: round trips over a sixteenth of the configured horizon (seconds of queueing).
      load_->answered(now_us, answer_window_, kSilentRtts * srtt_ > cfg_.silent_after_us);
      load_->acked(acked_records, now_us);
    }
  }
  if (frto_ && acked_bytes) {
    frto_ = false;
    if (late_original) {
      undo_loss(now_us);
      order = order_once;  // the resent copy says nothing about the originals sent before it
    }
  }
  if (2 * pipe_before >= cwnd_) round_limited_ = true;
  if (sampled) rtt_sample(now_us - newest, now_us);
  advance_base();
  if (in_recovery_ && !before(base_, recovery_end_)) in_recovery_ = false;
  // Losses: every record in flight transmitted kFastRetransmitAfter transmissions or more
  // before one now known to have arrived. A retransmission is judged the same way against
  // what was sent after it, so it is resent at most once per round trip (or on its timer).
  bool loss = false;
  if (order > acked_order_) {
    acked_order_ = order;
    if (acked_in_flight_ > 0)
      for (uint32_t s = base_; s != sent_upto_; ++s) {
        OutRecord& r = out(s);
        if (r.acked || r.lost || !r.in_pipe || r.order + kFastRetransmitAfter > acked_order_) continue;
        mark_lost(r, true);
        loss = true;
      }
  }
  if (loss) on_loss(now_us, false, false);
  // Growth: only while the cwnd limits the sender (an idle channel learns nothing).
  if (cfg_.congestion_control && acked_bytes && !in_recovery_ && 2 * pipe_before >= cwnd_) {
    if (cwnd_ < ssthresh_)
      cwnd_ += acked_bytes;
    else
      cwnd_ += std::max<uint64_t>(1, kPacket * acked_bytes / cwnd_);
    cwnd_ = std::min<uint64_t>(cwnd_, uint64_t{cfg_.window} * kPacket);
  }
  if (round_over) on_round_end(now_us);
}

void ReliableChannel::advance_base() {
  while (base_ != sent_upto_ && out(base_).acked) {
    ++base_;
    --acked_in_flight_;
  }
}

uint64_t ReliableChannel::next_deadline() const {
  if (state_ == State::kDown) return UINT64_MAX;
  uint64_t next = UINT64_MAX;
  // Something to send and room in the cwnd: the next pacing release (0: now). A full cwnd
  // waits for acks, which wake the loop anyway.
  const bool resend = lost_ > 0 && !(frto_ && frto_sent_);
  if (resend || has_unsent()) {
    const uint32_t s = resend ? lost_from_ : sent_upto_;
    if (cwnd_open(resend ? kPacket : wire_bytes(out(s)))) next = next_send_us_;
  }
  if (touched_ && cfg_.idle_release_us != 0 && idle()) next = std::min(next, active_us_ + cfg_.idle_release_us);
  if (in_flight() == 0) return next;
  // A lower bound is enough: a timer that fires early finds nothing due, and fill's scan
  // makes the bound exact again.
  return std::min({next, due_floor_, live_check_us_});
}

uint64_t ReliableChannel::queued_messages() const {
  uint64_t n = 0;
  for (uint32_t s = base_; s != next_; ++s) n += out(s).msgs;
  return n;
}

void ReliableChannel::go_down() {
  st_.messages_abandoned += queued_messages();
  // Everything queued is given up; the header's base tells the peer to skip it.
  base_ = sent_upto_ = next_;
  acked_in_flight_ = 0;
  state_ = State::kDown;
  set_late(false, progress_us_);
  live_check_us_ = UINT64_MAX;
  reset_congestion();
  ++st_.downs;
  // fill() does not run while down: give the memory back now if nothing is held.
  if (touched_ && idle()) release_memory();
}

void ReliableChannel::peer_heard() {
  if (state_ == State::kDown) state_ = State::kUp;
}

void ReliableChannel::on_record(const RecordHeader& rh, const uint8_t* payload) {
  ++st_.records_received;
  ack_owed_ = true;
  uint32_t diff = rh.seq - rx_next_;
  if (static_cast<int32_t>(diff) < 0) {
    ++st_.duplicates;
    return;
  }
  if (diff >= cfg_.window || rh.length > kMaxRecordPayload) {
    ++st_.out_of_window;
    return;
  }
  // Nothing held: the ring starts over at its first slot.
  if (held_ == 0) in_origin_ = rx_next_;
  InRecord& slot = in(rh.seq);
  if (slot.present) {
    ++st_.duplicates;
    return;
  }
  if (diff == 0) {
    // The next in order (the usual case): handed on from the packet, not copied to the ring.
    ++rx_next_;
    deliver_record(rh.type, rh.flags, payload, rh.length);
    deliver_ready();
    return;
  }
  slot.present = true;
  touched_ = true;
  if (held_ == 0 || before(rx_high_, rh.seq)) rx_high_ = rh.seq;
  ++held_;
  slot.len = rh.length;
  slot.type = rh.type;
  slot.flags = rh.flags;
  std::memcpy(in_data(rh.seq), payload, rh.length);
  deliver_ready();
}

void ReliableChannel::deliver_ready() {
  while (in(rx_next_).present) {
    InRecord& slot = in(rx_next_);
    const uint8_t* data = in_data(rx_next_);
    slot.present = false;
    --held_;
    ++rx_next_;
    deliver_record(slot.type, slot.flags, data, slot.len);
  }
}

void ReliableChannel::deliver_record(uint8_t type, uint8_t flags, const uint8_t* data, size_t len) {
  if (flags & kRecordPacked) return deliver_packed(type, data, len);
  touched_ = true;  // the reassembly buffer
  switch (reasm_.add(type, flags, data, len)) {
    case Reassembly::Result::kPartial:
      break;
    case Reassembly::Result::kError:
      ++st_.reassembly_errors;
      break;
    case Reassembly::Result::kComplete:
      ++st_.messages_received;
      deliver_(static_cast<RecordType>(reasm_.type()), reasm_.message(), reasm_.size());
      break;
  }
}

void ReliableChannel::deliver_packed(uint8_t type, const uint8_t* data, size_t len) {
  // Whole messages only: a packed record inside a fragmented message breaks that message.
  if (reasm_.in_progress()) {
    reasm_.abandon();
    ++st_.reassembly_errors;
  }
  size_t off = 0;
  while (off < len) {
    uint16_t n;
    if (len - off < sizeof n) break;
    std::memcpy(&n, data + off, sizeof n);
    off += sizeof n;
    if (n > len - off) break;
    ++st_.messages_received;
    deliver_(static_cast<RecordType>(type), data + off, n);
    off += n;
  }
  if (off != len) ++st_.reassembly_errors;  // lengths that do not add up: the rest is dropped
}

void ReliableChannel::on_peer_base(uint32_t base) {
  if (!before(rx_next_, base)) return;
  // The peer gave up the records in [rx_next_, base): drop whatever of them we hold and
  // the message they belonged to.
  uint32_t skip = base - rx_next_;
  touched_ = true;
  for (uint32_t i = 0; i < std::min(skip, cfg_.window); ++i) in(rx_next_ + i).present = false;
  if (skip >= cfg_.window)
    for (uint32_t i = 0; i < cfg_.window; ++i) in_[i].present = false;
  held_ = 0;
  for (uint32_t i = 0; i < cfg_.window; ++i) held_ += in_[i].present;
  reasm_.abandon();
  rx_next_ = base;
  ack_owed_ = true;
  deliver_ready();
}

uint64_t ReliableChannel::sack() const {
  uint64_t bits = 0;
  if (held_ == 0) return 0;  // the common case: everything received was delivered in order
  for (uint32_t i = 0; i < 64 && i + 1 < cfg_.window; ++i)
    if (in(rx_next_ + 1 + i).present) bits |= uint64_t{1} << i;
  return bits;
}

size_t ReliableChannel::sack_ext(uint8_t* out) const {
  if (held_ == 0 || !before(rx_next_ + 64, rx_high_)) return 0;  // all within the header's bitmap
  const uint32_t first = rx_next_ + 65;
  const uint32_t bits = std::min<uint32_t>(rx_high_ - first + 1, kSackExtMax * 8);
  const size_t len = (bits + 7) / 8;
  std::memset(out, 0, len);
  for (uint32_t i = 0; i < bits; ++i)
    if (in(first + i).present) out[i / 8] = static_cast<uint8_t>(out[i / 8] | 1u << (i % 8));
  return len;
}

void ReliableChannel::reset() {
  st_.messages_abandoned += queued_messages();
  base_ = sent_upto_ = next_ = 1;
  acked_in_flight_ = 0;
  reset_congestion();
  srtt_ = rttvar_ = 0;
  rto_ = cfg_.rto_initial_us;
  min_rtt_ = min_prev_ = min_cur_ = UINT64_MAX;
  acked_order_ = tx_order_;
  rx_next_ = 1;
  held_ = 0;
  due_floor_ = UINT64_MAX;
  for (uint32_t i = 0; i < cfg_.window; ++i) in_[i].present = false;
  touched_ = true;
  reasm_.abandon();
  ack_owed_ = false;
  set_late(false, progress_us_);
  live_check_us_ = UINT64_MAX;
  state_ = State::kUp;
}

}  // namespace nicemu::fabric
