// Fuzz target: the receiver's daemon writing relayed SMSG messages (from a sender on another
// host) into a mailbox whose control words and slots the receiving process may rewrite at
// any time: SmsgRelay::on_open / on_data (smsg_seen, smsg_write_at), the ack flush
// (send_ack, move_note) and the release poll, on a real CDM region and a real SmsgRelay
// with a fake fabric.
//
// Input: flags (u8: bit 0 the mailbox's control words start as input bytes); then
// operations until the input ends: an op byte (0: an SmsgData, in sequence unless the op's
// high bits say otherwise, with length, tag and payload from the input; 1: the receiver
// takes and releases the next message, as libugni does; 2: the receiver overwrites an
// 8-byte word of its mailbox (control block or slots) at an input offset; 3: the loop runs
// (acks flushed); 4: the release poll runs (tick)).
//
// Checks: the daemon writes nothing of the receiver's heap but the mailbox and the CQ of its
// remote events; every ack it sends says released <= delivered <= messages accepted; in a
// mailbox nobody scribbled on, every message comes out in order and intact.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <vector>

#include <asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "fuzz_driver.h"
#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/smsg_channel.h"
#include "nicemu/daemon/remote/smsg_relay.h"
#include "shm_fixture.h"

namespace abi = nicemu::abi;
namespace ctl = nicemu::abi::ctl;
using nicemu::daemon::SmsgRelay;
using nicemu::daemon::SmsgRelayEnv;
using nicemu::daemon::StatsPage;

namespace {
constexpr uint32_t kPtag = 9, kCookie = 0x55550000, kCredits = 4, kMax = 64;

struct Rig {
  std::unique_ptr<nicemu::daemon::CdmRegion> cdm = shm_fuzz::make_cdm(1, 20, 2, kPtag, kCookie);
  uint32_t cq = shm_fuzz::make_cq(*cdm);
  std::vector<char> buf = std::vector<char>(abi::smsg_buffer_size(kCredits, kMax) + 4096);
  uint64_t q1 = 0, q2 = 0;
  Rig() {
    nicemu::daemon::RegSpec spec{reinterpret_cast<uint64_t>(buf.data()), buf.size(), 0, cq, {}};
    if (shm_fuzz::reg_store(*cdm, 3, spec, cq) != abi::gni::kSuccess) std::abort();
    abi::mdh::encode(abi::mdh::registration_fields(spec.address, spec.length, cdm->mem_domain(), 3, false), q1, q2);
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (spdlog::set_level(spdlog::level::off), true);
  (void)quiet;
  static StatsPage stats("", 1);
  static Rig rig;
  static uint32_t next_relay = 1;
  shm_fuzz::Reader in{data, size};
  const uint8_t flags = in.take<uint8_t>();

  std::vector<ctl::SmsgAck> acks;
  SmsgRelayEnv env;
  env.cdm = [&](uint64_t id) { return id == 2 ? rig.cdm.get() : nullptr; };
  env.find_domain = [&](const nicemu::daemon::Credential& c, uint32_t domain) {
    return c == nicemu::daemon::Credential{kPtag, kCookie} && domain == rig.cdm->mem_domain() ? rig.cdm.get() : nullptr;
  };
  env.may_open_mailbox = [](nicemu::daemon::CdmRegion&) { return true; };
  env.remote = [](uint32_t node) { return node != 1; };
  env.send = [&](uint32_t, const void* m, size_t n) {
    ctl::Header h;
    std::memcpy(&h, m, sizeof h);
    if (h.op == uint16_t(ctl::Op::kSmsgAck)) {
      if (n != sizeof(ctl::SmsgAck)) std::abort();
      acks.emplace_back();
      std::memcpy(&acks.back(), m, n);
    }
    return true;
  };
  env.peer_up = [](uint32_t) { return true; };
  asio::io_context io;
  SmsgRelay relay(1, stats, env);
  relay.start(io);

  // The receiver's mailbox: opened (or found again) the way the first SmsgOpen does, then
  // reset to a fresh channel, or to the input's control words.
  ctl::MboxOpen mo{};
  mo.ptag = kPtag;
  mo.cookie = kCookie;
  ctl::MailboxAttrs attrs{rig.q1, rig.q2, reinterpret_cast<uint64_t>(rig.buf.data()), 0,
                          static_cast<uint32_t>(rig.buf.size()), kCredits, kMax};
  ctl::copy_mailbox_attrs(mo, attrs);
  ctl::MboxOpenReply mr{};
  if (rig.cdm->mbox_open(mo, mr) != abi::gni::kSuccess) std::abort();
  char* mem = rig.cdm->heap_ptr(mr.ctl_offset, mr.bytes);
  auto* mctl = reinterpret_cast<abi::MboxCtl*>(mem);
  std::memset(mem + sizeof(abi::MboxCtl), 0, mr.bytes - sizeof(abi::MboxCtl));
  for (auto* w : {&mctl->sent, &mctl->released, &mctl->note_at, &mctl->credit_wanted, &mctl->credit_event})
    w->store((flags & 1) ? in.take<uint32_t>() : 0);
  bool scribbled = flags & 1;

  abi::MailboxView rv;  // the receiver library's view
  rv.ctl = mctl;
  rv.slots = mem + sizeof(abi::MboxCtl);
  rv.credits = kCredits;
  rv.slot_size = abi::mbox_slot_size(kMax);
  rv.max_size = kMax;

  char* base = reinterpret_cast<char*>(rig.cdm->header());
  shm_fuzz::Snapshot snap(base + abi::kRoSize, shm_fuzz::kHeapBytes);
  snap.allow(mr.ctl_offset - abi::kRoSize, mr.bytes);
  const abi::CqDesc* d = reinterpret_cast<const abi::CqDesc*>(base + abi::kCqTableOffset) + rig.cq;
  snap.allow(d->ctl_offset - abi::kRoSize, sizeof(abi::CqRingCtl));
  snap.allow(d->entries_offset - abi::kRoSize, uint64_t{d->capacity} * 8);

  const uint32_t id = next_relay++;
  ctl::SmsgOpen o{};
  o.h = ctl::make_header<ctl::SmsgOpen>(ctl::Op::kSmsgOpen, 0);
  o.origin_node = 0;
  o.relay = id;
  o.from_inst = 10;
  o.to_inst = 20;
  o.ptag = kPtag;
  o.cookie = kCookie;
  o.mbox = attrs;
  if (relay.fabric_message(0, o.h, reinterpret_cast<const char*>(&o), sizeof o) != nullptr) std::abort();

  uint32_t next = 0, accepted = 0;
  std::deque<std::vector<char>> expect;  // delivered and not yet taken, in order
  std::vector<char> msg;
  while (!in.empty()) {
    const uint8_t op = in.take<uint8_t>();
    switch (op % 5) {
      case 0: {
        const uint32_t len = in.take<uint8_t>() % (abi::smsg_capacity(kMax) + 8);
        ctl::SmsgData m{};
        m.relay = id;
        m.seq = (op >> 3) == 0 ? next : next + (op >> 3) - 8;  // in sequence, or up to 8 off
        m.length = len;
        m.tag = in.take<uint8_t>();
        msg.assign(sizeof m + len, 0);
        in.bytes(msg.data() + sizeof m, len);
        m.h = ctl::Header{ctl::kMagic, ctl::kVersion, uint16_t(ctl::Op::kSmsgData), 0, uint32_t(msg.size())};
        std::memcpy(msg.data(), &m, sizeof m);
        const char* why = relay.fabric_message(0, m.h, msg.data(), msg.size());
        if (!why && m.seq == next) {
          ++next;
          ++accepted;
          expect.emplace_back(msg.begin() + sizeof m, msg.end());
        }
        break;
      }
      case 1: {
        abi::MboxSlotHeader* s = abi::smsg_peek(rv);
        if (!s) {
          if (!scribbled && !expect.empty()) std::abort();  // a delivered message is missing
          break;
        }
        if (!scribbled) {
          if (expect.empty() || s->length != expect.front().size() ||
              (s->length && std::memcmp(s + 1, expect.front().data(), s->length) != 0))
            std::abort();
          expect.pop_front();
        }
        abi::smsg_release(rv);
        break;
      }
      case 2: {
        const uint64_t off = in.take<uint16_t>() % (mr.bytes / 8) * 8;
        const uint64_t w = in.take<uint64_t>();
        std::memcpy(mem + off, &w, 8);
        scribbled = true;
        break;
      }
      case 3:
        io.poll();
        io.restart();
        break;
      case 4:
        relay.released(*rig.cdm);
        break;
    }
  }
  io.poll();
  snap.check();
  for (const ctl::SmsgAck& a : acks) {
    if (a.relay != id || a.status != 0) continue;
    if (a.delivered > accepted || a.released > a.delivered) {
      std::fprintf(stderr, "ack delivered %u released %u, accepted %u\n", a.delivered, a.released, accepted);
      std::abort();
    }
  }
  relay.cdm_gone(rig.cdm->attach_id());
  relay.stop();
  io.poll();
  return 0;
}
