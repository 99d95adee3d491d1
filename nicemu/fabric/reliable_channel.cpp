#include "nicemu/fabric/reliable_channel.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace nicemu::fabric {

using namespace nicemu::abi::wire;

namespace {
// Wrap-safe "a is before b" for 32-bit sequence numbers.
bool before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
}  // namespace

ReliableChannel::ReliableChannel(ChannelConfig cfg, Deliver deliver)
    : cfg_(cfg), deliver_(std::move(deliver)) {
  // Ring indexes are seq % size: sizes must divide 2^32 so they stay right across wrap.
  auto pow2 = [](uint32_t v) { return v && (v & (v - 1)) == 0; };
  if (!pow2(cfg_.window) || !pow2(cfg_.backlog) || cfg_.window > kWindow || cfg_.backlog < cfg_.window)
    cfg_ = ChannelConfig{};
  rto_ = cfg_.rto_initial_us;
  out_ = std::make_unique<OutRecord[]>(cfg_.backlog);
  in_ = std::make_unique<InRecord[]>(cfg_.window);
  // Payload rings are not cleared: their pages are committed only as records use them, so a
  // peer that only ever exchanges small messages costs a few pages, not the full rings.
  out_data_ = map_ring(uint64_t{cfg_.backlog} * kMaxRecordPayload);
  in_data_ = map_ring(uint64_t{cfg_.window} * kMaxRecordPayload);
}

ReliableChannel::Ring ReliableChannel::map_ring(size_t len) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return Ring(static_cast<uint8_t*>(p), RingUnmap{len});
}

void RingUnmap::operator()(uint8_t* p) const {
  if (p) munmap(p, len);
}

bool ReliableChannel::send(RecordType type, const void* data, size_t len) {
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
      r->acked = false;
      r->fast = r->fast_done = false;
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
    r.acked = false;
    r.fast = r.fast_done = false;
    r.tries = 0;
    r.due_us = 0;
    if (n) std::memcpy(out_data(r.seq), p + i * kMaxRecordPayload, n);
    ++next_;
  }
  ++st_.messages_sent;
  return true;
}

size_t ReliableChannel::fill(uint64_t now_us, uint8_t* buf, size_t cap, uint16_t& count) {
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
  if (state_ == State::kDown) return 0;
  // Expired records first, oldest first: they hold the window back. The scan also finds
  // when the next one is due; until then it is skipped.
  if (now_us >= due_floor_) {
    uint64_t floor = UINT64_MAX;
    for (uint32_t s = base_; s != sent_upto_; ++s) {
      OutRecord& r = out(s);
      if (r.acked) continue;
      if (r.due_us > now_us) {
        floor = std::min(floor, r.due_us);
        continue;
      }
      if (r.tries >= cfg_.max_tries) {
        go_down();
        return used;
      }
      if (!put(r)) {
        due_floor_ = 0;  // not all of them fitted: look again next time
        return used;
      }
      ++r.tries;
      ++st_.retransmits;
      if (r.fast) {
        // Resent because later records were acknowledged: a loss, not a slow path; no backoff.
        r.fast = false;
        ++st_.fast_retransmits;
      } else {
        r.rto_us = std::min(r.rto_us * 2, cfg_.rto_max_us);
        // The backoff also applies to new records until a clean sample arrives; otherwise a
        // path slower than the initial timeout would never yield one (every record resent).
        rto_ = std::max(rto_, r.rto_us);
      }
      r.due_us = now_us + r.rto_us;
      floor = std::min(floor, r.due_us);
    }
    due_floor_ = floor;
  }
  // New records, as far as the window (the receiver's buffer) allows.
  while (sent_upto_ != next_ && sent_upto_ - base_ < cfg_.window) {
    OutRecord& r = out(sent_upto_);
    if (!put(r)) break;
    r.tries = 1;
    r.rto_us = rto_;
    r.sent_us = now_us;
    r.due_us = now_us + r.rto_us;
    due_floor_ = std::min(due_floor_, r.due_us);
    ++st_.records_sent;
    ++sent_upto_;
  }
  return used;
}

void ReliableChannel::rtt_sample(uint64_t rtt) {
  // RFC 6298's estimator, in integers.
  if (srtt_ == 0) {
    srtt_ = rtt;
    rttvar_ = rtt / 2;
  } else {
    uint64_t err = rtt > srtt_ ? rtt - srtt_ : srtt_ - rtt;
    rttvar_ = (3 * rttvar_ + err) / 4;
    srtt_ = (7 * srtt_ + rtt) / 8;
  }
  rto_ = std::clamp(srtt_ + 4 * rttvar_, cfg_.rto_min_us, cfg_.rto_max_us);
}

void ReliableChannel::on_ack(uint32_t ack, uint64_t sack, uint64_t now_us) {
  // Only acknowledgements of records actually sent count; anything else is stale or bogus.
  if (before(ack, base_) || before(sent_upto_, ack)) return;
  // One RTT sample per ack: the most recently sent record it newly covers that was sent
  // only once (a retransmitted one cannot tell which copy is acknowledged: Karn).
  uint64_t newest = 0;
  bool sampled = false;
  auto take = [&](OutRecord& r) {
    if (r.acked) return;
    r.acked = true;
    ++acked_in_flight_;
    if (r.tries == 1 && r.sent_us <= now_us && (!sampled || r.sent_us > newest)) {
      newest = r.sent_us;
      sampled = true;
    }
  };
  for (uint32_t s = base_; s != ack; ++s) take(out(s));
  for (uint32_t i = 0; i < 64 && sack; ++i) {
    if (!(sack >> i & 1)) continue;
    uint32_t s = ack + 1 + i;
    if (!before(s, base_) && before(s, sent_upto_)) take(out(s));
  }
  if (sampled) rtt_sample(now_us - newest);
  advance_base();
  // Every acknowledged record is below base_ now (no selective acks outstanding): none can
  // be behind an unacknowledged one, so there is nothing to retransmit fast.
  if (acked_in_flight_ == 0) return;
  // Fast retransmit: an unacknowledged record with kFastRetransmitAfter later records
  // acknowledged was lost (reordering that far is rare); it is resent with the next flush
  // instead of after its timeout, once per record (a second loss waits for the timeout).
  uint32_t acked_above = 0;
  for (uint32_t s = sent_upto_; s != base_;) {
    OutRecord& r = out(--s);
    if (r.acked) {
      ++acked_above;
    } else if (acked_above >= kFastRetransmitAfter && !r.fast_done && r.tries > 0) {
      r.fast = r.fast_done = true;
      r.due_us = now_us;
      due_floor_ = 0;
    }
  }
}

void ReliableChannel::advance_base() {
  while (base_ != sent_upto_ && out(base_).acked) {
    ++base_;
    --acked_in_flight_;
  }
}

uint64_t ReliableChannel::next_deadline() const {
  if (state_ == State::kDown) return UINT64_MAX;
  if (has_unsent()) return 0;
  // A lower bound is enough: a timer that fires early finds nothing due, and fill's scan
  // makes the bound exact again.
  return in_flight() == 0 ? UINT64_MAX : due_floor_;
}

uint64_t ReliableChannel::queued_messages() const {
  uint64_t n = 0;
  for (uint32_t s = base_; s != next_; ++s) n += out_[s % cfg_.backlog].msgs;
  return n;
}

void ReliableChannel::go_down() {
  st_.messages_abandoned += queued_messages();
  // Everything queued is given up; the header's base tells the peer to skip it.
  base_ = sent_upto_ = next_;
  acked_in_flight_ = 0;
  state_ = State::kDown;
  ++st_.downs;
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
    if (in_[(rx_next_ + 1 + i) % cfg_.window].present) bits |= uint64_t{1} << i;
  return bits;
}

void ReliableChannel::reset() {
  st_.messages_abandoned += queued_messages();
  base_ = sent_upto_ = next_ = 1;
  acked_in_flight_ = 0;
  rx_next_ = 1;
  held_ = 0;
  due_floor_ = UINT64_MAX;
  for (uint32_t i = 0; i < cfg_.window; ++i) in_[i].present = false;
  reasm_.abandon();
  ack_owed_ = false;
  state_ = State::kUp;
}

}  // namespace nicemu::fabric
