// Unit tests' hand-over of simulated packets to a ReliableChannel, as UdpFabric's receive
// path does: the peer heard, its base, the ack and selective acks, then each record.
#pragma once
#include <cstring>

#include "nicemu/fabric/reliable_channel.h"

namespace nicemu::fabric::test {

// `count` records (header, then its bytes) back to back from `bytes`.
inline void deliver_records(ReliableChannel& ch, const uint8_t* bytes, uint16_t count) {
  size_t off = 0;
  for (uint16_t i = 0; i < count; ++i) {
    abi::wire::RecordHeader rh;
    std::memcpy(&rh, bytes + off, sizeof rh);
    ch.on_record(rh, bytes + off + sizeof rh);
    off += sizeof rh + rh.length;
  }
}

// `P`: a test's packet, with base, ack, sack, count and the records' bytes.
template <class P>
void deliver(ReliableChannel& ch, const P& p, uint64_t now) {
  ch.peer_heard();
  ch.on_peer_base(p.base);
  ch.on_ack(p.ack, p.sack, now);
  deliver_records(ch, p.records.data(), p.count);
}

}  // namespace nicemu::fabric::test
