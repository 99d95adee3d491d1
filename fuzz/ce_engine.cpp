// Fuzz target: the collective engine (nicemu/daemon/ce) under hostile leaves and peers. A
// leaf's operand comes as a one-way CePost control message or is written into its slot of
// the job's post page (abi/ce_ops.h, PostPage: client-written shared memory); the result
// goes into the poster's own process (result_addr, by process_vm_writev to the CDM's pid)
// and the events into its CQ. So the engine's untrusted inputs are the library requests of
// its CDMs (create, configure, post, member, destroy, open of the post page, ring), the
// post pages' bytes, and the messages of other daemons (contribute, result, probe, probe
// reply, leaf gone); this target interleaves them on a real CeEngine with two real CDM
// regions of two jobs.
//
// Input: operations until the input ends: an op byte (op % 11: create, configure, post,
// member, destroy, a message from another node, a tick of the liveness timer, the messages
// the engine sent handed back to it as their nodes' answers, a CDM going away, a write into
// the CDM's post page (a post in its slot, mostly well-formed, or raw bytes anywhere in the
// page), a ring), the CDM (op bit 4), then the struct's bytes from the input, with the
// fields that name things (channel ids, child slots, nodes, CQs, the result's
// registration) mostly replaced by ones that exist.
//
// Checks: the engine writes nothing of either CDM's heap but its CQ (no result lands in a
// region: results go to the process, here one that does not exist); once both CDMs are
// gone and the liveness timer ran out, nothing is pending (no reduction waits for ever) and
// no post page is left.
#include <sys/mman.h>

#include <cstdio>
#include <deque>
#include <vector>

#include <spdlog/spdlog.h>

#include "fuzz_driver.h"
#include "nicemu/abi/ce_ops.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/daemon/ce/ce_engine.h"
#include "shm_fixture.h"

#include <nlohmann/json.hpp>

namespace abi = nicemu::abi;
namespace ace = nicemu::abi::ce;
namespace ctl = nicemu::abi::ctl;
using nicemu::daemon::CdmRegion;
using nicemu::daemon::CeEngine;
using nicemu::daemon::CeEnv;

namespace {
struct Cdm {
  std::unique_ptr<CdmRegion> r;
  uint32_t cq;
  // A registration for results (the process does not exist: nothing is written there).
  std::vector<char> res = std::vector<char>(4096);
  uint64_t q1 = 0, q2 = 0;
  void init() {
    cq = shm_fuzz::make_cq(*r, 256);
    nicemu::daemon::RegSpec spec{reinterpret_cast<uint64_t>(res.data()), res.size(), 0, cq, {}};
    if (shm_fuzz::reg_store(*r, 3, spec, cq) != abi::gni::kSuccess) std::abort();
    abi::mdh::encode(abi::mdh::registration_fields(spec.address, spec.length, r->mem_domain(), 3, false), q1, q2);
  }
};
struct Rig {
  Cdm a{shm_fuzz::make_cdm(0, 1, 1, 9, 0x55550000), 0}, b{shm_fuzz::make_cdm(0, 2, 2, 11, 0x77770000), 0};
  Rig() {
    a.init();
    b.init();
  }
};

template <typename T>
T take_msg(shm_fuzz::Reader& in, ctl::Op op) {
  T m{};
  in.bytes(&m, sizeof m);
  m.h = ctl::make_header<T>(op, 0);
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (spdlog::set_level(spdlog::level::off), true);
  (void)quiet;
  static Rig rig;
  shm_fuzz::Reader in{data, size};

  bool gone[2] = {false, false};
  std::deque<std::pair<uint32_t, std::vector<char>>> sent;
  CeEnv env;
  env.send = [&](uint32_t node, const void* m, size_t n) {
    if (node == 0 || node > 2) return false;  // no such node (0 is this one)
    if (sent.size() < 256) sent.emplace_back(node, std::vector<char>(static_cast<const char*>(m), static_cast<const char*>(m) + n));
    return true;
  };
  env.cdm = [&](uint64_t id) -> CdmRegion* {
    if (id == 1 && !gone[0]) return rig.a.r.get();
    if (id == 2 && !gone[1]) return rig.b.r.get();
    return nullptr;
  };
  CeEngine ce(0, env);

  Cdm* cdms[2] = {&rig.a, &rig.b};
  std::vector<shm_fuzz::Snapshot*> snaps;
  for (Cdm* c : cdms) {
    char* base = reinterpret_cast<char*>(c->r->header());
    auto* s = new shm_fuzz::Snapshot(base + abi::kRoSize, shm_fuzz::kHeapBytes, static_cast<unsigned>(snaps.size()));
    const abi::CqDesc* d = reinterpret_cast<const abi::CqDesc*>(base + abi::kCqTableOffset) + c->cq;
    s->allow(d->ctl_offset - abi::kRoSize, sizeof(abi::CqRingCtl));
    s->allow(d->entries_offset - abi::kRoSize, uint64_t{d->capacity} * 8);
    snaps.push_back(s);
  }
  std::vector<uint32_t> ids;
  // Each CDM's mapping of its job's post page while it has one (the engine owns the memfd).
  ace::PostPage* pages[2] = {nullptr, nullptr};
  uint32_t page_slot[2] = {0, 0};
  auto pick_id = [&](uint32_t raw) { return ids.empty() || (raw & 0x80000000u) ? raw : ids[raw % ids.size()]; };

  while (!in.empty()) {
    const uint8_t op = in.take<uint8_t>();
    const int who = (op >> 4) & 1;
    Cdm& c = *cdms[who];
    const bool live = !gone[who];
    switch (op % 11) {
      case 0: {
        uint32_t id = 0;
        if (live && ce.create(*c.r, id) == abi::gni::kSuccess) ids.push_back(id);
        break;
      }
      case 1: {
        auto m = take_msg<ace::CeConfigure>(in, ctl::Op::kCeConfigure);
        m.ce_id = pick_id(m.ce_id);
        m.num_children %= ace::kMaxChildren + 2;
        if (!(m.modes & 0x80000000u)) m.cq = c.cq;
        for (ace::Edge& e : m.children) {
          if (!(e.type & 0x80000000u)) e.type = 1 + (e.type & 1), e.child_id %= ace::kMaxChildren, e.node %= 3;
        }
        if (!(m.parent.type & 0x80000000u)) m.parent.type = ace::kChildVce, m.parent.child_id %= ace::kMaxChildren, m.parent.node %= 3;
        if (live) (void)ce.configure(*c.r, m);
        break;
      }
      case 2: {
        auto m = take_msg<ace::CePost>(in, ctl::Op::kCePost);
        if (!(m.target_node & 0x80000000u)) m.target_node %= 3;
        m.ce_id = pick_id(m.ce_id);
        if (!(m.child_id & 0x80000000u)) m.child_id %= ace::kMaxChildren;
        if (!(m.src_cq & 0x80000000u)) m.src_cq = c.cq;
        if (live) ce.post(*c.r, m);
        break;
      }
      case 3: {
        auto m = take_msg<ace::CeMember>(in, ctl::Op::kCeMember);
        m.ce_id = pick_id(m.ce_id);
        if (live) ce.member(*c.r, m);
        break;
      }
      case 4:
        if (live) (void)ce.destroy(*c.r, pick_id(in.take<uint32_t>()));
        break;
      case 5: {
        const uint32_t from = 1 + (op >> 5) % 2;
        const uint8_t kind = in.take<uint8_t>() % 5;
        auto deliver = [&](auto m) {
          if (!(m.origin_node & 0x80000000u)) m.origin_node = from;
          (void)ce.message(from, m.h, reinterpret_cast<const char*>(&m), sizeof m);
        };
        if (kind == 0) {
          auto m = take_msg<ace::CeContribute>(in, ctl::Op::kCeContribute);
          m.to_ce = pick_id(m.to_ce);
          if (!(m.child_id & 0x80000000u)) m.child_id %= ace::kMaxChildren;
          deliver(m);
        } else if (kind == 1) {
          deliver(take_msg<ace::CeResult>(in, ctl::Op::kCeResult));
        } else if (kind == 2) {
          deliver(take_msg<ace::CeProbe>(in, ctl::Op::kCeProbe));
        } else if (kind == 3) {
          deliver(take_msg<ace::CeProbeReply>(in, ctl::Op::kCeProbeReply));
        } else {
          auto m = take_msg<ace::CeLeafGone>(in, ctl::Op::kCeLeafGone);
          m.ce_id = pick_id(m.ce_id);
          deliver(m);
        }
        break;
      }
      case 6:
        ce.tick();
        break;
      case 7: {  // what the engine sent comes back, as from the node it went to
        auto batch = std::move(sent);
        sent.clear();
        for (auto& [node, m] : batch) {
          ctl::Header h;
          std::memcpy(&h, m.data(), sizeof h);
          (void)ce.message(node, h, m.data(), m.size());
        }
        break;
      }
      case 8:
        if (live) {
          ce.cdm_gone(c.r->attach_id());
          gone[who] = true;
          if (pages[who]) munmap(pages[who], ace::kPostPageBytes), pages[who] = nullptr;
        }
        break;
      case 9: {
        if (!live) break;
        if (!pages[who]) {
          int fd = -1;
          if (ce.open_page(*c.r, page_slot[who], fd) != abi::gni::kSuccess) break;
          void* m = mmap(nullptr, ace::kPostPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          if (m == MAP_FAILED) std::abort();
          pages[who] = static_cast<ace::PostPage*>(m);
        }
        ace::PostPage& pg = *pages[who];
        const uint8_t how = in.take<uint8_t>();
        if (how & 1) {  // raw bytes anywhere: the other leaves' slots, the channel words
          const uint32_t at = in.take<uint32_t>() % sizeof(ace::PostPage);
          const uint32_t n = std::min<uint32_t>(in.take<uint8_t>(), sizeof(ace::PostPage) - at);
          in.bytes(reinterpret_cast<char*>(&pg) + at, n);
          break;
        }
        ace::PostSlot s{};  // a post in our slot, as the library writes it
        in.bytes(&s, sizeof s);
        s.post.ce_id = pick_id(s.post.ce_id) % (ace::kMaxChannels + 1);
        if (!(s.post.child_id & 0x80000000u)) s.post.child_id %= ace::kMaxChildren;
        if (!(s.post.src_cq & 0x80000000u)) s.post.src_cq = c.cq;
        if (!(how & 2))
          s.mem_qword1 = c.q1, s.mem_qword2 = c.q2,
          s.post.result_addr = uint64_t(c.res.data()) + (s.post.result_addr % 64) * 8;
        ace::PostSlot& slot = pg.slot[page_slot[who]];
        s.seq = (how & 4) ? s.seq : slot.taken + 1;
        s.taken = slot.taken;
        slot = s;
        if (s.post.ce_id < ace::kMaxChannels && s.post.child_id < ace::kMaxChildren)
          pg.chan[s.post.ce_id].posted |= 1u << s.post.child_id;
        break;
      }
      case 10:
        ce.ring();
        break;
    }
  }
  for (ace::PostPage*& p : pages)
    if (p) munmap(p, ace::kPostPageBytes), p = nullptr;
  for (int i = 0; i < 2; ++i)
    if (!gone[i]) ce.cdm_gone(cdms[i]->r->attach_id()), gone[i] = true;
  for (uint32_t t = 0; t < 2 * (CeEngine::kProbeAfter + CeEngine::kProbeEvery + CeEngine::kProbeTimeout) + 4; ++t)
    ce.tick();
  if (ce.busy()) {
    std::fprintf(stderr, "CE engine still busy with both CDMs gone\n");
    std::abort();
  }
  if (ce.status()["post_pages"].get<size_t>() != 0) {
    std::fprintf(stderr, "CE engine kept a post page with both CDMs gone\n");
    std::abort();
  }
  for (shm_fuzz::Snapshot* s : snaps) {
    s->check();
    delete s;
  }
  // The CQs' owners take their events.
  for (Cdm* c : cdms) {
    abi::CqRingView v = abi::region_cq_view(reinterpret_cast<char*>(c->r->header()), shm_fuzz::kRegion, c->cq);
    while (v.pop() != 0) {
    }
    v.take_overrun();
  }
  return 0;
}
