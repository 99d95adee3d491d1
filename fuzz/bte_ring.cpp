// Fuzz target: the BTE engine (nicemu/daemon/bte) serving a submission ring (abi/bte_ring.h)
// whose owner writes anything into it: the real BteEngine (dispatcher and one channel
// thread) with three real CDM regions of this process mapped the way a daemon maps them:
// the hostile initiator H, a target T of H's own job, and a victim V of another job
// (another ptag and cookie) with a registered buffer and a CQ.
//
// Input: a count of requests (u8 % 33); then per request a selector byte and a raw 96-byte
// BteRequest; the selector replaces fields with ones that mean something (local handle: H's
// real registration; remote handle and NIC: T's or V's real registration; addresses inside
// those buffers; lengths up to 2 KiB) so that the validation is reached beyond its first
// refusal. Then the index words the dispatcher must not trust (head, armed, done, tail)
// from the input, before the doorbell rings.
//
// Checks: every published request is taken and completed or dropped (the ring's `done`
// comes back to the count within 5 s: no hang); the victim's registered buffer and its
// whole heap (CQ included) are unchanged: nothing of H reaches another job; errors are
// counted (the engine's `errors`, `dropped`).
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "fuzz_driver.h"
#include "nicemu/abi/bte_ring.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/daemon/bte/bte_engine.h"
#include "shm_fixture.h"

namespace abi = nicemu::abi;
using nicemu::daemon::BteEngine;
using nicemu::daemon::CdmRegion;

namespace {
constexpr uint32_t kBuf = 16384;
char g_dir[] = "/tmp/nicemu-fuzz-bte-XXXXXX";

struct Side {
  std::unique_ptr<CdmRegion> cdm;
  std::vector<char> buf = std::vector<char>(kBuf);
  uint64_t q1 = 0, q2 = 0;
  uint32_t cq = 0;
  Side(uint64_t attach_id, uint32_t ptag, uint32_t cookie) {
    cdm = shm_fuzz::make_cdm(0, uint32_t(attach_id), attach_id, ptag, cookie, getpid());
    cq = shm_fuzz::make_cq(*cdm, 256);
    nicemu::daemon::RegSpec spec{reinterpret_cast<uint64_t>(buf.data()), kBuf, 0, cq, {}};
    if (shm_fuzz::reg_store(*cdm, 5, spec, cq) != abi::gni::kSuccess) std::abort();
    abi::mdh::encode(abi::mdh::registration_fields(spec.address, spec.length, cdm->mem_domain(), 5, false), q1, q2);
  }
};

struct Rig {
  BteEngine* engine;
  Side h{1, 9, 0x55550000}, t{2, 9, 0x55550000}, v{3, 11, 0x77770000};
  abi::BteRingView ring;
  int bell = -1;
  uint64_t pos = 0;  // the next position the dispatcher takes (every request we publish is taken)
  Rig() {
    spdlog::set_level(spdlog::level::off);
    if (!mkdtemp(g_dir)) std::abort();
    std::atexit([] { std::filesystem::remove_all(g_dir); });
    nicemu::daemon::BteConfig cfg;
    cfg.nic_addr = 0;
    cfg.rundir = g_dir;
    cfg.channels = 1;
    cfg.chunk_bytes = 4096;
    engine = new BteEngine(cfg);  // never destroyed: its threads run until the process exits
    for (Side* s : {&h, &t, &v})
      engine->region_attached(s->cdm->ro_memfd(), s->cdm->mdd_memfd(), s->cdm->heap_memfd(), shm_fuzz::kRegion, getpid());
    uint64_t off = 0;
    if (h.cdm->bte_ring(off) != abi::gni::kSuccess ||
        engine->open_ring(h.cdm->attach_id(), off, abi::kBteRingCapacity, bell) != abi::gni::kSuccess)
      std::abort();
    char* base = reinterpret_cast<char*>(h.cdm->header());
    ring.ctl = reinterpret_cast<abi::BteRingCtl*>(base + off);
    ring.slots = reinterpret_cast<abi::BteSlot*>(base + off + sizeof(abi::BteRingCtl));
    ring.mask = abi::kBteRingCapacity - 1;
  }
};

uint64_t counter(BteEngine& e, const char* name) { return e.status()[name].get<uint64_t>(); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Rig rig;
  shm_fuzz::Reader in{data, size};
  const uint32_t n = in.take<uint8_t>() % 33;

  // The victim's state before: its buffer and its heap (registration table and CQ
  // descriptors are in the read-only section, which nobody can write).
  for (size_t i = 0; i < kBuf; ++i) rig.v.buf[i] = char(i * 7);
  char* vbase = reinterpret_cast<char*>(rig.v.cdm->header());
  shm_fuzz::Snapshot vsnap(vbase + abi::kRoSize, shm_fuzz::kHeapBytes);
  const std::vector<char> vbuf = rig.v.buf;
  const uint64_t errors_before = counter(*rig.engine, "errors");
  uint64_t at_victim = 0;  // requests naming the victim's memory: each must fail, counted

  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t sel = in.take<uint8_t>();
    abi::BteRequest q{};
    in.bytes(&q, sizeof q);
    if (sel & 1) {  // H's own registration as the local side
      q.local_qword1 = rig.h.q1;
      q.local_qword2 = rig.h.q2;
      q.local_addr = reinterpret_cast<uint64_t>(rig.h.buf.data()) + q.local_addr % kBuf;
    }
    if (sel & 6) {  // a real target: T (H's job), V (another job), or T's handle at V's node
      Side& s = (sel & 6) == 2 ? rig.t : rig.v;
      q.remote_nic = 0;
      q.remote_qword1 = (sel & 6) == 6 ? rig.t.q1 : s.q1;
      q.remote_qword2 = (sel & 6) == 6 ? rig.t.q2 : s.q2;
      q.remote_addr = reinterpret_cast<uint64_t>(s.buf.data()) + q.remote_addr % kBuf;
    }
    if ((sel & 6) == 4) ++at_victim;
    if (sel & 8) q.length %= 2048;
    if (sel & 16) q.op = 1 + (q.op & 1);
    if (sel & 32) q.src_cq = rig.h.cq;
    abi::BteSlot& s = rig.ring.slots[rig.pos & rig.ring.mask];
    s.req = q;
    s.seq.store(static_cast<uint32_t>(rig.pos + 1), std::memory_order_release);
    ++rig.pos;
  }
  // The words the dispatcher must not trust, then the doorbell.
  rig.ring.ctl->head.store(in.take<uint64_t>());
  rig.ring.ctl->armed.store(in.take<uint32_t>());
  rig.ring.ctl->tail.store(in.empty() ? rig.pos : in.take<uint64_t>());
  rig.ring.ctl->done.store(0);
  const uint64_t one = 1;
  if (write(rig.bell, &one, sizeof one) != sizeof one) std::abort();

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (uint32_t spins = 0; rig.ring.ctl->done.load(std::memory_order_acquire) < n; ++spins) {
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));  // the channel is copying
    else std::this_thread::yield();
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "BTE engine: %llu of %u requests done after 5 s\n",
                   static_cast<unsigned long long>(rig.ring.ctl->done.load()), n);
      std::abort();
    }
  }
  if (rig.ring.ctl->done.load() != n) std::abort();  // more completions than requests

  vsnap.check();
  if (rig.v.buf != vbuf) {
    std::fprintf(stderr, "the victim's registered memory changed\n");
    std::abort();
  }
  // Take what the initiator's CQ holds, as its owner would (it would overrun otherwise).
  abi::CqRingView cq = abi::region_cq_view(reinterpret_cast<char*>(rig.h.cdm->header()), shm_fuzz::kRegion, rig.h.cq);
  while (cq.pop() != 0) {
  }
  cq.take_overrun();
  if (counter(*rig.engine, "errors") - errors_before < at_victim) {
    std::fprintf(stderr, "requests at another job's memory not all counted as errors\n");
    std::abort();
  }
  return 0;
}
