// Fuzz target: the daemon's use of a domain's MSGQ receive rings (abi/msgq_ring.h), which
// every member of the domain on the node may write: MsgqSegment::deliver_remote (a message
// from another host, pushed as a producer, with recycling when full) and ring_head (the
// recycling that returns credits to the sending host), plus status(), on a real segment.
//
// Input: flags (u8: bit 0 the ring is overwritten with the input's bytes, bit 1 so are the
// member's waiters/futex words); then the ring bytes (control block and slots, as many as
// the input holds); then operations until the input ends: an op byte (deliver to the
// hostile ring with header and message lengths and tag from the input, ring_head, status,
// rewrite one 8-byte word of the ring at an input offset).
//
// Checks: nothing of the segment changes but the hostile ring, the member's futex word and
// the victim ring (a second connection's ring, in honest use: a message delivered into it
// before and taken after must come out intact); no operation blocks; on an untouched ring a
// delivered message can be taken by its member, intact.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_driver.h"
#include "nicemu/abi/msgq_ring.h"
#include "nicemu/daemon/cdm/msgq_segment.h"
#include "shm_fixture.h"

namespace abi = nicemu::abi;
namespace mq = nicemu::abi::msgq;
using nicemu::daemon::MsgqSegment;

namespace {
constexpr uint32_t kInst = 3, kHostilePe = 1, kVictimPe = 2;

struct Rig {
  const mq::Attrs attrs{64, 16, 1, 2, 2, 0, 16, 0};
  MsgqSegment seg{0, nicemu::daemon::Credential{9, 0x55550000}, attrs, 1};
  uint32_t member = 0, mgen = 0, hring = 0, hgen = 0, vring = 0, vgen = 0;
  Rig() {
    if (seg.join(77, getpid(), kInst, member, mgen) != abi::gni::kSuccess ||
        seg.conn_open(kHostilePe, hring, hgen) != abi::gni::kSuccess ||
        seg.conn_open(kVictimPe, vring, vgen) != abi::gni::kSuccess)
      std::abort();
  }
  mq::RingView ring(uint32_t i) const {
    return mq::RingView::at(seg.view().ring(i), attrs.smsg_q_sz, seg.view().lay.slot_size);
  }
  // Takes the first message for our member from ring i; its payload, or empty.
  bool take(uint32_t i, mq::EntryHeader& e, std::vector<char>& payload) const {
    mq::RingView r = ring(i);
    alignas(8) char buf[256];
    if (r.take([this](const mq::EntryHeader& x) { return x.dst_member == member; }, e, buf) !=
        mq::RingView::Take::kTaken)
      return false;
    payload.assign(buf, buf + e.length);
    return true;
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Rig rig;
  const mq::SegmentView& v = rig.seg.view();
  shm_fuzz::Reader in{data, size};
  const uint8_t flags = in.take<uint8_t>();
  rig.ring(rig.hring).init();
  rig.ring(rig.vring).init();
  if (flags & 1) in.bytes(v.ring(rig.hring), v.lay.ring_bytes);
  mq::MemberRw* rw = v.member_rw(rig.member);
  rw->waiters.store((flags & 2) ? in.take<uint32_t>() : 0);
  rw->futex.store((flags & 2) ? in.take<uint32_t>() : 0);

  // The victim ring in honest use: a message waiting for the member.
  const char vmsg[] = "victim message";
  if (rig.seg.deliver_remote(kVictimPe, 5, kInst, 7, nullptr, 0, vmsg, sizeof vmsg) != abi::gni::kSuccess)
    std::abort();

  shm_fuzz::Snapshot snap(v.base, v.lay.total_size);
  snap.allow(v.ring_offset(rig.hring), v.lay.ring_bytes);
  snap.allow(v.ring_offset(rig.vring), v.lay.ring_bytes);
  snap.allow(v.lay.member_rw_offset + uint64_t{rig.member} * sizeof(mq::MemberRw), sizeof(uint32_t));  // futex

  bool scribbled = flags & 1;
  while (!in.empty()) {
    const uint8_t op = in.take<uint8_t>();
    switch (op % 4) {
      case 0: {
        char hdr[mq::kMaxMsgSize], msg[mq::kMaxMsgSize];
        const uint32_t hl = in.take<uint8_t>() % 40, ml = in.take<uint8_t>() % 40;
        in.bytes(hdr, hl);
        in.bytes(msg, ml);
        const uint8_t tag = in.take<uint8_t>();
        const int rc = rig.seg.deliver_remote(kHostilePe, 4, kInst, tag, hdr, hl, msg, ml);
        if (rc != abi::gni::kSuccess && rc != abi::gni::kNotDone && rc != abi::gni::kInvalidState) std::abort();
        if (!scribbled && rc == abi::gni::kSuccess) {
          // An untouched ring: the member takes exactly that message.
          mq::EntryHeader e{};
          std::vector<char> got;
          if (!rig.take(rig.hring, e, got) || e.length != hl + ml || e.tag != tag || e.src_pe != kHostilePe ||
              (hl && std::memcmp(got.data(), hdr, hl) != 0) || (ml && std::memcmp(got.data() + hl, msg, ml) != 0))
            std::abort();
        }
        break;
      }
      case 1:
        (void)rig.seg.ring_head(rig.hring, rig.hgen);
        break;
      case 2:
        (void)rig.seg.status();
        break;
      case 3: {
        const uint64_t off = in.take<uint16_t>() % (v.lay.ring_bytes / 8) * 8;
        const uint64_t w = in.take<uint64_t>();
        std::memcpy(v.ring(rig.hring) + off, &w, 8);
        scribbled = true;
        break;
      }
    }
  }
  snap.check();
  mq::EntryHeader e{};
  std::vector<char> got;
  if (!rig.take(rig.vring, e, got) || e.length != sizeof vmsg || std::memcmp(got.data(), vmsg, sizeof vmsg) != 0)
    std::abort();
  return 0;
}
