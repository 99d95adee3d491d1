// Fuzz target: the sender's daemon reading a CDM's SMSG relay ring (abi/relay_ring.h) and
// relay blocks (SmsgRelayCtl), both in the client's writable heap: SmsgRelay::doorbell
// (drain) and, for the blocks, the acks of the receiver's daemon (on_ack), on a real CDM
// region and a real SmsgRelay with a fake fabric.
//
// Input: flags (u8); relays to open (u8, 1..3), each credits (u8) and max_size (u16);
// then records, each a kind byte, a payload length (u8) and the payload: the harness writes
// an honest SmsgRelaySend for relay kind % relays, in sequence and within its credits,
// unless a mutation bit of the kind byte breaks it (op, length field, sequence, relay,
// raw garbage length, a pad record). Flags: bit 0 the tail is a u64 of the input, bit 1
// the fabric refuses sends, bit 2 the relay blocks are overwritten with input bytes, bit 3
// acks (delivered, released, credit_event from the input) come back and the ring is
// drained again.
//
// Checks: the daemon writes only the ring's control block, the relay blocks and the CQ
// (never the records, nor anything else of the heap); an honest ring is taken whole with
// nothing counted malformed and every message relayed; any corruption is counted
// (ring_malformed).
#include <cstdio>
#include <vector>

#include <asio/io_context.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "fuzz_driver.h"
#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/abi/relay_ring.h"
#include "nicemu/daemon/remote/smsg_relay.h"
#include "shm_fixture.h"

namespace abi = nicemu::abi;
namespace ctl = nicemu::abi::ctl;
using nicemu::daemon::SmsgRelay;
using nicemu::daemon::SmsgRelayEnv;
using nicemu::daemon::StatsPage;

namespace {
constexpr uint32_t kPtag = 9, kCookie = 0x55550000;

struct Relay {
  uint32_t id = 0, credits = 0, max_size = 0, next = 0, released = 0;
  uint64_t block = 0;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (spdlog::set_level(spdlog::level::off), true);
  (void)quiet;
  static StatsPage stats("", 0);
  shm_fuzz::Reader in{data, size};
  const uint8_t flags = in.take<uint8_t>();

  auto cdm = shm_fuzz::make_cdm(0, 10, 1, kPtag, kCookie);
  const uint32_t cq = shm_fuzz::make_cq(*cdm);
  bool refuse = flags & 2;
  size_t data_sent = 0;
  SmsgRelayEnv env;
  env.cdm = [&](uint64_t id) { return id == 1 ? cdm.get() : nullptr; };
  env.find_domain = [](const nicemu::daemon::Credential&, uint32_t) { return nullptr; };
  env.may_open_mailbox = [](nicemu::daemon::CdmRegion&) { return true; };
  env.remote = [](uint32_t node) { return node != 0; };
  env.send = [&](uint32_t, const void* m, size_t n) {
    if (refuse) return false;
    ctl::Header h;
    if (n < sizeof h) std::abort();
    std::memcpy(&h, m, sizeof h);
    if (h.op == uint16_t(ctl::Op::kSmsgData)) ++data_sent;
    return true;
  };
  env.peer_up = [](uint32_t) { return true; };
  asio::io_context io;
  SmsgRelay relay(0, stats, env);
  relay.start(io);

  std::vector<Relay> relays;
  uint64_t ring_off = 0;
  const uint32_t nrelays = 1 + in.take<uint8_t>() % 3;
  for (uint32_t i = 0; i < nrelays; ++i) {
    ctl::SmsgRelayOpen o{};
    o.peer_addr = 1;
    o.peer_inst = 20 + i;
    o.mbox.credits = in.take<uint8_t>();
    o.mbox.max_size = in.take<uint16_t>();
    o.mbox.qword1 = 0x1000 + i;
    o.credit_cq = cq;
    ctl::SmsgRelayOpenReply rep{};
    if (relay.open(*cdm, o, rep) != abi::gni::kSuccess) continue;
    relays.push_back(Relay{rep.relay, o.mbox.credits, o.mbox.max_size, 0, 0, rep.ctl_offset});
    ring_off = rep.ring_offset;
  }
  if (relays.empty()) return 0;

  auto* ring = reinterpret_cast<abi::RelayRingCtl*>(cdm->heap_ptr(ring_off, abi::kRelayRingBytes));
  if (!ring) std::abort();
  char* rdata = abi::relay_ring_data(ring);
  char* base = reinterpret_cast<char*>(cdm->header());
  uint64_t tail = 0;
  bool corrupt = false;
  size_t honest = 0, bad_records = 0;

  // Writes records at `tail` until the input ends or the ring would be full.
  auto write_records = [&] {
    const uint64_t head = ring->head.load();
    while (!in.empty()) {
      const uint8_t kind = in.take<uint8_t>();
      const uint32_t plen = in.take<uint8_t>();
      std::vector<char> rec(sizeof(ctl::SmsgRelaySend) + plen);
      ctl::SmsgRelaySend s{};
      Relay& r = relays[kind % relays.size()];
      s.h = ctl::make_header<ctl::SmsgRelaySend>(ctl::Op::kSmsgRelaySend, 0);
      s.h.length = static_cast<uint32_t>(rec.size());
      s.relay = r.id;
      s.seq = r.next;
      s.src_cq = cq;
      s.length = plen;
      const uint8_t mut = kind >> 3;
      uint32_t len = static_cast<uint32_t>(rec.size());
      bool bad = false;
      if (mut == 1) s.h.op = uint16_t(ctl::Op::kSmsgRelayDoorbell), bad = true;
      if (mut == 2) s.h.length ^= 1, bad = true;
      if (mut == 3) s.seq += 1 + (plen & 7), bad = true;
      if (mut == 4) s.relay ^= 0x80000000u, bad = true;
      if (mut == 5) len = in.take<uint32_t>(), bad |= len != rec.size();
      if (mut == 6) s.length = 0xFFFF0000u | plen, bad = true;
      if (s.length > abi::smsg_capacity(r.max_size)) bad = true;  // longer than the mailbox takes
      if (r.next - r.released >= r.credits) bad = true;           // beyond the credits
      std::memcpy(rec.data(), &s, sizeof s);
      in.bytes(rec.data() + sizeof s, plen);
      const uint64_t need = abi::relay_record_bytes(rec.size());
      uint64_t off = tail % abi::kRelayRingCapacity;
      const bool pad = mut == 7 || off + need > abi::kRelayRingCapacity;
      const uint64_t pad_bytes = pad ? abi::kRelayRingCapacity - off : 0;
      if (tail + pad_bytes + need - head > abi::kRelayRingCapacity) break;
      if (pad) {
        std::memcpy(rdata + off, &abi::kRelayPad, 4);
        tail += pad_bytes;
        off = 0;
      }
      std::memcpy(rdata + off, &len, 4);
      std::memcpy(rdata + off + 4, rec.data(), rec.size());
      tail += need;
      if (bad) {
        corrupt = true;
        ++bad_records;
      } else {
        ++r.next;
        ++honest;
      }
    }
  };

  // One drain: what the daemon may write, then the doorbell, then the checks.
  auto drain = [&] {
    uint64_t t = tail;
    if (flags & 1) t = in.take<uint64_t>(), corrupt |= t != tail;
    ring->tail.store(t);
    if (flags & 4)
      for (const Relay& r : relays) corrupt |= in.bytes(base + r.block, sizeof(abi::SmsgRelayCtl)) > 0;
    shm_fuzz::Snapshot snap(base + abi::kRoSize, shm_fuzz::kHeapBytes);
    snap.allow(ring_off - abi::kRoSize, sizeof(abi::RelayRingCtl));
    for (const Relay& r : relays) snap.allow(r.block - abi::kRoSize, sizeof(abi::SmsgRelayCtl));
    const abi::CqDesc* d = reinterpret_cast<const abi::CqDesc*>(base + abi::kCqTableOffset) + cq;
    snap.allow(d->ctl_offset - abi::kRoSize, sizeof(abi::CqRingCtl));
    snap.allow(d->entries_offset - abi::kRoSize, uint64_t{d->capacity} * 8);
    relay.doorbell(*cdm);
    snap.check();
  };

  write_records();
  drain();
  nlohmann::json st = relay.status();
  if (!corrupt && !refuse) {
    if (st["ring_malformed"].get<uint64_t>() != 0 || ring->head.load() != tail || data_sent != honest) {
      std::fprintf(stderr, "honest ring: malformed %llu, head %llu tail %llu, sent %zu of %zu\n",
                   static_cast<unsigned long long>(st["ring_malformed"].get<uint64_t>()),
                   static_cast<unsigned long long>(ring->head.load()), static_cast<unsigned long long>(tail),
                   data_sent, honest);
      std::abort();
    }
  }
  if (flags & 8) {
    // Acks from the receiver's daemon (their numbers are the input's), then more records.
    for (Relay& r : relays) {
      auto a = ctl::SmsgAck{};
      a.h = ctl::make_header<ctl::SmsgAck>(ctl::Op::kSmsgAck, 0);
      a.relay = r.id;
      a.delivered = in.take<uint32_t>();
      a.released = in.take<uint32_t>();
      a.credit_event = in.take<uint32_t>();
      relay.fabric_message(1, a.h, reinterpret_cast<const char*>(&a), sizeof a);
      corrupt = true;  // the harness no longer knows the credits the library would see
    }
    io.poll();
    write_records();
    drain();
  }
  // Bad records in a ring taken to its (honest) tail were counted, one by one or as the
  // ring refused whole.
  st = relay.status();
  if (bad_records > 0 && !(flags & 1) && ring->head.load() == tail && st["ring_malformed"].get<uint64_t>() == 0) {
    std::fprintf(stderr, "%zu bad records taken without a malformed count\n", bad_records);
    std::abort();
  }
  relay.cdm_gone(cdm->attach_id());
  relay.stop();
  io.poll();
  return 0;
}
