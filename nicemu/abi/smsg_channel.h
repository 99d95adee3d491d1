// The SMSG channel state machine over one mailbox (layout and index contract in
// nicemu/abi/shm_layout.h): sender side (credits, slot write, publish) and receiver side
// (peek in order, release = credit back). Free of I/O and of the daemon, so units test it
// on plain memory; libugni (ugni/src/smsg.cpp) adds endpoints, events and error handling
// around it, and the daemons' SMSG relay (daemon/remote/smsg_relay.cpp) writes relayed
// messages into a receiver's mailbox with it.
#pragma once
#include <cstdint>
#include <cstring>

#include "nicemu/abi/shm_layout.h"

namespace nicemu::abi {

struct MailboxView {
  MboxCtl* ctl = nullptr;
  char* slots = nullptr;
  uint32_t credits = 0;    // from our own attrs, never from shared memory
  uint32_t slot_size = 0;
  uint32_t max_size = 0;
  uint32_t released_seen = 0;  // sender's private copy of ctl->released (it only grows)

  MboxSlotHeader* slot(uint32_t index) const {
    return reinterpret_cast<MboxSlotHeader*>(slots + uint64_t{index % credits} * slot_size);
  }
};

enum class SendResult { kSent, kNoCredit, kTooBig };

// Copies header then data into the next free slot and publishes it.
inline SendResult smsg_send(MailboxView& m, const void* header, uint32_t header_length, const void* data,
                            uint32_t data_length, uint8_t tag) {
  uint64_t total = uint64_t{header_length} + data_length;
  if (total > smsg_capacity(m.max_size)) return SendResult::kTooBig;
  uint32_t s = m.ctl->sent.load(std::memory_order_relaxed);
  if (s - m.released_seen >= m.credits) {
    // Only now read the receiver's line: credits may have come back.
    m.released_seen = m.ctl->released.load(std::memory_order_acquire);
    if (s - m.released_seen >= m.credits) return SendResult::kNoCredit;
  }
  MboxSlotHeader* slot = m.slot(s);
  char* payload = reinterpret_cast<char*>(slot + 1);
  if (header_length) std::memcpy(payload, header, header_length);
  if (data_length) std::memcpy(payload + header_length, data, data_length);
  slot->length = static_cast<uint32_t>(total);
  slot->tag = tag;
  slot->seq.store(s + 1, std::memory_order_release);
  m.ctl->sent.store(s + 1, std::memory_order_release);
  return SendResult::kSent;
}

// Writes message `seq` (already given its credit) into its slot, out of order if need be:
// what a retransmitted or overtaken packet does on the wire. The receiver's peek still takes
// messages in sequence order; `sent` becomes the highest sequence written + 1.
inline void smsg_write_at(MailboxView& m, uint32_t seq, const void* header, uint32_t header_length, const void* data,
                          uint32_t data_length, uint8_t tag) {
  MboxSlotHeader* slot = m.slot(seq);
  char* payload = reinterpret_cast<char*>(slot + 1);
  if (header_length) std::memcpy(payload, header, header_length);
  if (data_length) std::memcpy(payload + header_length, data, data_length);
  slot->length = header_length + data_length;
  slot->tag = tag;
  slot->seq.store(seq + 1, std::memory_order_release);
  const uint32_t s = m.ctl->sent.load(std::memory_order_relaxed);
  if (static_cast<int32_t>(seq + 1 - s) > 0) m.ctl->sent.store(seq + 1, std::memory_order_release);
}

// Whether message `seq` is already in the mailbox or consumed: a duplicate of it is discarded.
// `released`: the receiver's released count as last read (it only grows: an older value
// only sends the check to the slot).
inline bool smsg_seen(const MailboxView& m, uint32_t seq, uint32_t released) {
  if (static_cast<int32_t>(released - seq) > 0) return true;
  return static_cast<int32_t>(m.slot(seq)->seq.load(std::memory_order_acquire) - (seq + 1)) >= 0;
}
inline bool smsg_seen(const MailboxView& m, uint32_t seq) {
  return smsg_seen(m, seq, m.ctl->released.load(std::memory_order_acquire));
}

// The next message in order, or nullptr. Does not consume it.
inline MboxSlotHeader* smsg_peek(const MailboxView& m) {
  uint32_t next = m.ctl->released.load(std::memory_order_relaxed);
  MboxSlotHeader* slot = m.slot(next);
  return slot->seq.load(std::memory_order_acquire) == next + 1 ? slot : nullptr;
}

// A sender out of credits for message `next` asks for an event when they come back
// (MboxCtl::credit_wanted); true if credits came back meanwhile (then no event is
// promised: send again).
inline bool smsg_want_credit(MailboxView& m, uint32_t next) {
  m.ctl->credit_wanted.store(1, std::memory_order_seq_cst);
  m.released_seen = m.ctl->released.load(std::memory_order_seq_cst);
  return next - m.released_seen < m.credits;
}

// Frees the current slot and returns its credit to the sender. True if the sender ran out,
// asked to be told, and half its credits are free again (the caller raises the SMSG event
// in the sender's receive CQ): credits come back in batches, as the hardware's credit
// messages do, not one event per release. The seq_cst store pairs with smsg_want_credit:
// either the sender sees the credit or we see its flag, which stays set until a release
// reaches the half (a stalled sender's messages are all still to be released, so one will).
inline bool smsg_release(const MailboxView& m) {
  const uint32_t released = m.ctl->released.load(std::memory_order_relaxed) + 1;
  m.ctl->released.store(released, std::memory_order_seq_cst);
  if (m.ctl->credit_wanted.load(std::memory_order_seq_cst) == 0) return false;
  const uint32_t outstanding = m.ctl->sent.load(std::memory_order_acquire) - released;
  return outstanding <= m.credits / 2 && m.ctl->credit_wanted.exchange(0, std::memory_order_relaxed) != 0;
}

// A relayed mailbox (sender on another host), after a release: whether the releases have
// reached the daemon's MboxCtl::note_at, so the receiver must tell its daemon now. True once
// per note_at value (`noted` keeps the last). The seq_cst read-modify-write of our own
// `released` orders it before the load of note_at, pairing with the daemon's store of
// note_at and re-load of `released` (a fence would do on x86, but TSan does not model one).
inline bool smsg_note_due(const MailboxView& m, uint32_t& noted) {
  const uint32_t released = m.ctl->released.fetch_add(0, std::memory_order_seq_cst);
  const uint32_t at = m.ctl->note_at.load(std::memory_order_seq_cst);
  if (static_cast<int32_t>(released - at) < 0 || at == noted) return false;
  noted = at;
  return true;
}

}  // namespace nicemu::abi
