// Fuzz target: the daemon as producer into rings its client may rewrite at any time, on a
// real CDM region: completion queues (CdmRegion::push_cqe / push_cqes over CqRingView, the
// path of every daemon-made CQE: BTE, relays, CE, datagram matcher) and the datagram
// completion ring (CdmRegion::push_datagram over DgramRingView).
//
// Input: the hostile CQ's control words (tail, head: u64; overrun, waiters, futex: u32),
// then its entries (capacity u64s); the datagram ring's tail, head (u64) and stalled (u32);
// then operations until the input ends: an op byte (bit 0..1: one CQE, a batch of up to 8,
// one datagram, rewrite a control word from the input) and its operands.
//
// Checks: the daemon writes nothing outside the hostile CQ (control block and entries) and
// the datagram ring, and a second CQ of the same CDM, in honest use (entries pushed before
// and taken after), keeps exactly its entries. Where the hostile indices are still
// plausible (head <= tail <= head + capacity), pushes land at the tail in order, as many
// as there is room for; a push never blocks.
#include <cstdio>
#include <vector>

#include "fuzz_driver.h"
#include "nicemu/abi/dgram_ring.h"
#include "nicemu/abi/region_access.h"
#include "shm_fixture.h"

namespace abi = nicemu::abi;
namespace ctl = nicemu::abi::ctl;

namespace {
struct Rig {
  std::unique_ptr<nicemu::daemon::CdmRegion> cdm = shm_fuzz::make_cdm(0, 10, 1, 9, 0x55550000);
  char* base = reinterpret_cast<char*>(cdm->header());
  uint32_t victim = shm_fuzz::make_cq(*cdm, 64), hostile = shm_fuzz::make_cq(*cdm, 64);
  abi::CqRingView vv = abi::region_cq_view(base, shm_fuzz::kRegion, victim);
  abi::CqRingView hv = abi::region_cq_view(base, shm_fuzz::kRegion, hostile);
  uint64_t dgram_off = 0;
  abi::DgramRingView dv;
  Rig() {
    if (!vv.valid() || !hv.valid() || cdm->dgram_ring(dgram_off) != abi::gni::kSuccess) std::abort();
    dv.ctl = reinterpret_cast<abi::DgramRingCtl*>(base + dgram_off);
    dv.events = reinterpret_cast<abi::DgramEvent*>(base + dgram_off + sizeof(abi::DgramRingCtl));
    dv.mask = abi::kDgramRingCapacity - 1;
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Rig rig;
  shm_fuzz::Reader in{data, size};
  abi::CqRingView& h = rig.hv;
  const uint64_t cap = h.mask + 1;

  h.ctl->tail.store(in.take<uint64_t>());
  h.ctl->head.store(in.take<uint64_t>());
  h.ctl->overrun.store(in.take<uint32_t>());
  h.ctl->waiters.store(in.take<uint32_t>());
  h.ctl->futex.store(in.take<uint32_t>());
  for (uint64_t i = 0; i < cap; ++i) h.entries[i].store(in.take<uint64_t>());
  rig.dv.ctl->tail.store(in.take<uint64_t>());
  rig.dv.ctl->head.store(in.take<uint64_t>());
  rig.dv.ctl->stalled.store(in.take<uint32_t>());

  // The victim CQ in honest use: a few entries waiting to be taken.
  uint64_t vwant[5];
  for (uint64_t i = 0; i < 5; ++i) {
    vwant[i] = abi::cqe::make(abi::cqe::kSrcRemoteRequest, abi::cqe::kTypePost, 0, 0, i, 0x1000 + i);
    if (!rig.cdm->push_cqe(rig.victim, vwant[i])) std::abort();
  }

  shm_fuzz::Snapshot snap(rig.base + abi::kRoSize, shm_fuzz::kHeapBytes);
  auto allow = [&](const void* p, uint64_t bytes) {
    snap.allow(static_cast<uint64_t>(static_cast<const char*>(p) - rig.base) - abi::kRoSize, bytes);
  };
  allow(h.ctl, sizeof(abi::CqRingCtl));
  allow(h.entries, cap * 8);
  allow(rig.dv.ctl, abi::dgram_ring_bytes(abi::kDgramRingCapacity));
  // The victim's own pushes above are done; its pops below are checked separately.

  while (!in.empty()) {
    const uint8_t op = in.take<uint8_t>();
    switch (op & 3) {
      case 0:
      case 1: {
        const size_t n = (op & 1) ? 1 + (op >> 2) % 8 : 1;
        uint64_t e[8];
        for (size_t i = 0; i < n; ++i) e[i] = in.take<uint64_t>() | 1;  // never 0 (the empty mark)
        const uint64_t t = h.ctl->tail.load(), hd = h.ctl->head.load();
        const size_t k = n == 1 ? (rig.cdm->push_cqe(rig.hostile, e[0]) ? 1 : 0) : rig.cdm->push_cqes(rig.hostile, e, n);
        if (k > n) std::abort();
        // Plausible indices (positions never wrap past 2^64 in a ring's life: a producer's
        // stale copy of head may be 0): the ring behaves as a ring.
        if (hd <= t && t - hd <= cap) {
          const size_t room = static_cast<size_t>(cap - (t - hd));
          if (k != (n < room ? n : room)) {
            std::fprintf(stderr, "pushed %zu of %zu with room %zu\n", k, n, room);
            std::abort();
          }
          for (size_t i = 0; i < k; ++i)
            if (h.entries[(t + i) & h.mask].load() != e[i] || h.ctl->tail.load() != t + k) std::abort();
        }
        break;
      }
      case 2: {
        abi::DgramEvent ev{};
        in.bytes(&ev, sizeof ev);
        const uint64_t t = rig.dv.ctl->tail.load(), hd = rig.dv.ctl->head.load();
        const bool ok = rig.cdm->push_datagram(ev);
        if (t - hd < abi::kDgramRingCapacity && hd <= t) {
          if (!ok || std::memcmp(&rig.dv.events[t & rig.dv.mask], &ev, sizeof ev) != 0 ||
              rig.dv.ctl->tail.load() != t + 1)
            std::abort();
        } else if (ok || rig.dv.ctl->stalled.load() != 1) {
          std::abort();  // a full or scribbled ring takes nothing and asks for a kick
        }
        break;
      }
      case 3: {  // the client rewrites a word meanwhile
        const uint64_t v = in.take<uint64_t>();
        switch ((op >> 2) % 5) {
          case 0: h.ctl->tail.store(v); break;
          case 1: h.ctl->head.store(v); break;
          case 2: h.ctl->overrun.store(static_cast<uint32_t>(v)); break;
          case 3: rig.dv.ctl->head.store(v); break;
          case 4: rig.dv.ctl->tail.store(v); break;
        }
        break;
      }
    }
  }
  snap.check();
  // The victim CQ holds exactly what was pushed into it.
  for (uint64_t w : vwant)
    if (rig.vv.pop() != w) std::abort();
  if (rig.vv.pop() != 0 || rig.vv.take_overrun()) std::abort();
  return 0;
}
