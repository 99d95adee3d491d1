// A client that scribbles over the writable parts of its own region (its MDD table, BTE
// submission ring, CQ ring, counter block, AMO locks, the rest of the heap) and submits forged RDMA requests
// (random handles, huge lengths, wrapped indices, random CQ slots) and garbage control
// messages, in the same protection domain as a healthy pair that keeps running FMA and
// RDMA transfers with checked data. The daemon survives and keeps serving, the healthy
// pair's transfers all complete correctly, the target's memory holds only what its real
// peer wrote, and the scribbler's forged requests complete with error CQEs.
#include <doctest/doctest.h>

#include <sys/eventfd.h>
#include <sys/un.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <random>

#include "harness.h"
#include "nicemu/abi/bte_ring.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/region_map.h"
#include "nicemu/abi/shm_layout.h"

using namespace harness;
namespace ctl = nicemu::abi::ctl;
namespace abi = nicemu::abi;
namespace cqe = nicemu::abi::cqe;

namespace {

constexpr size_t kBuf = 64 * 1024;
constexpr uint8_t kForged = 0xEE;  // what forged requests would write; the real peer never does
constexpr auto kRun = std::chrono::milliseconds(2500);
constexpr int kForgedRequests = 32;  // phase 1 of the scribbler: each one an error CQE

struct Target {
  uint32_t addr, inst;
  uint64_t buf;
  gni_mem_handle_t mdh;
};

bool completes_ok(gni_cq_handle_t cq) {
  gni_cq_entry_t e = 0;
  if (GNI_CqWaitEvent(cq, 10000, &e) != GNI_RC_SUCCESS) return false;
  gni_post_descriptor_t* d = nullptr;
  return GNI_GetCompleted(cq, e, &d) == GNI_RC_SUCCESS && GNI_CQ_GET_STATUS(e) == 0;
}

int target(Cred c, int info_fd, int go_fd) {
  Gni g = open_gni(1, c);
  static uint8_t buf[kBuf];
  Target t{g.addr, 1, uint64_t(buf), {}};
  t.mdh = mem_register(g.nic, t.buf, kBuf, nullptr, GNI_MEM_READWRITE);
  CHILD_CHECK(write(info_fd, &t, sizeof t) == sizeof t);
  char go;
  CHILD_CHECK(read(go_fd, &go, 1) == 1);
  for (size_t i = 0; i < kBuf; ++i) CHILD_CHECK(buf[i] != kForged);
  return 0;
}

// The healthy initiator: FMA and RDMA PUT of a fresh pattern, GET back, compare; as many
// rounds as fit in the run. Fails on any error or mismatch.
int healthy(Cred c, const Target& t) {
  Gni g = open_gni(2, c);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, t.inst);
  static uint8_t src[kBuf], back[kBuf];
  gni_mem_handle_t sh, bh;
  sh = mem_register(g.nic, uint64_t(src), kBuf, nullptr, GNI_MEM_READWRITE);
  bh = mem_register(g.nic, uint64_t(back), kBuf, nullptr, GNI_MEM_READWRITE);
  auto end = std::chrono::steady_clock::now() + kRun;
  int rounds = 0;
  for (uint8_t k = 1; std::chrono::steady_clock::now() < end; k = uint8_t(k % 200 + 1), ++rounds) {
    std::memset(src, k, kBuf);
    gni_post_descriptor_t put = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t.buf, t.mdh, 4096);
    CHILD_CHECK(GNI_PostFma(ep, &put) == GNI_RC_SUCCESS);
    CHILD_CHECK(completes_ok(g.cq));
    gni_post_descriptor_t rput = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), sh, t.buf + 4096, t.mdh, kBuf - 4096);
    CHILD_CHECK(GNI_PostRdma(ep, &rput) == GNI_RC_SUCCESS);
    CHILD_CHECK(completes_ok(g.cq));
    std::memset(back, 0, kBuf);
    gni_post_descriptor_t get = make_desc(GNI_POST_RDMA_GET, uint64_t(back), bh, t.buf, t.mdh, kBuf);
    CHILD_CHECK(GNI_PostRdma(ep, &get) == GNI_RC_SUCCESS);
    CHILD_CHECK(completes_ok(g.cq));
    CHILD_CHECK(std::memcmp(back, src, kBuf) == 0);
  }
  std::fprintf(stderr, "healthy initiator: %d rounds\n", rounds);
  CHILD_CHECK(rounds >= 3);
  return 0;
}

// The scribbler attaches by hand so that it holds its region's memfds and can write
// anywhere the kernel lets it.
int scribbler(Cluster& cl, Cred c, const Target& t) {
  std::mt19937_64 rng(12345);
  nicemu::ctl::Connection conn;
  ctl::AttachReply ar{};
  int fds[3];
  char* mdd_rw = nullptr;  // our MDD table, writable as libugni has it
  CHILD_CHECK(attach_by_hand(conn, cl.socket(0), 3, c, ar, fds, &mdd_rw) && ar.r.rc == GNI_RC_SUCCESS);
  char* base = abi::map_region(fds[0], fds[1], fds[2], ar.region_size);
  CHILD_CHECK(base != nullptr);
  const uint64_t size = ar.region_size;

  ctl::CqCreate cc{};
  cc.h.op = uint16_t(ctl::Op::kCqCreate);
  cc.entry_count = 64;
  ctl::CqCreateReply cr{};
  CHILD_CHECK(conn.call(cc, cr) && cr.r.rc == GNI_RC_SUCCESS);
  ctl::BteOpen bo{};
  bo.h.op = uint16_t(ctl::Op::kBteOpen);
  ctl::BteOpenReply br{};
  int bell = -1;
  CHILD_CHECK(conn.call(bo, br, &bell) && br.r.rc == GNI_RC_SUCCESS && bell >= 0);
  static uint8_t mine[4096];
  ctl::MemRegister mr{};
  mr.h.op = uint16_t(ctl::Op::kMemRegister);
  mr.address = uint64_t(mine);
  mr.length = sizeof mine;
  mr.dst_cq = abi::kNoCq;
  ctl::MemRegisterReply mrr{};
  CHILD_CHECK(conn.call(mr, mrr) && mrr.r.rc == GNI_RC_SUCCESS);

  auto* ring = reinterpret_cast<abi::BteRingCtl*>(base + br.ctl_offset);
  auto* slots = reinterpret_cast<abi::BteSlot*>(base + br.ctl_offset + sizeof(abi::BteRingCtl));
  const uint64_t mask = br.capacity - 1;
  auto* cq_ctl = reinterpret_cast<abi::CqRingCtl*>(base + cr.ctl_offset);
  auto* cq_entries = reinterpret_cast<std::atomic<uint64_t>*>(base + cr.entries_offset);
  uint64_t tail = 0;

  // A forged request at the target's buffer: the target's address, random or own
  // (wrong-registration) handles, sizes from 1 byte to absurd.
  auto forge = [&](bool wild) {
    abi::BteRequest q{};
    std::memset(&q, 0, sizeof q);
    q.op = wild ? uint16_t(rng()) : uint16_t(1 + rng() % 2);
    q.cq_mode = wild ? uint16_t(rng()) : abi::kBteEventGlobal;
    q.src_cq = wild ? uint32_t(rng()) : cr.cq_index;
    q.tid = wild ? uint32_t(rng()) : uint32_t(rng() & 0xFFFF);  // > 0xFFFF: no local event
    q.ep_id = uint32_t(rng() % 8);
    q.remote_nic = wild ? uint32_t(rng()) : t.addr;
    q.local_addr = rng() % 2 ? uint64_t(mine) : rng();
    q.local_qword1 = rng() % 2 ? mrr.qword1 : rng();
    q.local_qword2 = rng() % 2 ? mrr.qword2 : rng();
    q.remote_addr = t.buf + rng() % kBuf;
    q.remote_qword1 = rng();  // never the target's real handle
    q.remote_qword2 = rng();
    static const uint64_t lengths[] = {1, 8, 4096, 1ull << 30, 1ull << 62, ~0ull};
    q.length = lengths[rng() % 6];
    return q;
  };
  auto publish = [&](const abi::BteRequest& q) {
    abi::BteSlot& s = slots[tail & mask];
    s.req = q;
    s.seq.store(uint32_t(tail + 1), std::memory_order_release);
    ++tail;
    ring->tail.store(tail, std::memory_order_release);
    uint64_t one = 1;
    CHILD_CHECK(write(bell, &one, sizeof one) == sizeof one);
  };

  // Phase 1: forged requests with our CQ intact. Each must come back as an error CQE.
  std::memset(mine, kForged, sizeof mine);
  const int forged = kForgedRequests;
  for (int i = 0; i < forged; ++i) publish(forge(false));
  int errors = 0, ok = 0;
  uint64_t head = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (errors + ok < forged && std::chrono::steady_clock::now() < deadline) {
    uint64_t e = cq_entries[head & (cr.capacity - 1)].load(std::memory_order_acquire);
    if (e == 0) {
      usleep(1000);
      continue;
    }
    cq_entries[head & (cr.capacity - 1)].store(0, std::memory_order_relaxed);
    cq_ctl->head.store(++head, std::memory_order_release);
    if (((e >> cqe::kStatusShift) & cqe::kStatusMask) != 0)
      ++errors;
    else
      ++ok;
  }
  std::fprintf(stderr, "scribbler: %d forged requests, %d error CQEs, %d ok\n", forged, errors, ok);
  CHILD_CHECK(errors == forged);

  // Phase 2: everything at once, for the length of the healthy run.
  int garbage = -1;
  {
    garbage = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::string p = cl.socket(0);
    std::memcpy(sa.sun_path, p.c_str(), p.size() + 1);
    CHILD_CHECK(connect(garbage, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  }
  auto end = std::chrono::steady_clock::now() + kRun;
  uint64_t rounds = 0;
  while (std::chrono::steady_clock::now() < end) {
    ++rounds;
    for (int i = 0; i < 16; ++i) publish(forge(true));
    // Wrapped and backwards indices, a ring that claims to be armed.
    ring->head.store(rng(), std::memory_order_relaxed);
    ring->tail.store(rng() % 3 ? tail : rng(), std::memory_order_relaxed);
    ring->armed.store(uint32_t(rng()), std::memory_order_relaxed);
    for (int i = 0; i < 8; ++i) slots[rng() & mask].seq.store(uint32_t(rng()), std::memory_order_relaxed);
    cq_ctl->tail.store(rng(), std::memory_order_relaxed);
    cq_ctl->head.store(rng(), std::memory_order_relaxed);
    // Our own MDD table, the only one we can write: forged registrations, garbage segments,
    // seqlocks left odd. They can expose nothing but our own memory.
    for (int i = 0; i < 16; ++i) {
      uint64_t w[8];
      for (auto& x : w) x = rng();
      if (rng() % 2) w[0] &= ~1ull;  // a seqlock readers accept
      std::memcpy(mdd_rw + (rng() % abi::kRegSlots) * sizeof(abi::RegEntry), w, sizeof w);
      uint64_t v = rng();
      std::memcpy(mdd_rw + (abi::kSegTableOffset - abi::kRegTableOffset) + rng() % (abi::kSegSlots * 32 - 8), &v,
                  sizeof v);
    }
    // Random bytes over random spots of the whole heap (counter block and AMO locks included).
    for (int i = 0; i < 64; ++i) {
      uint64_t off = abi::kRoSize + rng() % (size - abi::kRoSize - 8);
      uint64_t v = rng();
      std::memcpy(base + off, &v, sizeof v);
    }
    // Control requests with nonsense, on the attach connection (they get replies)...
    ctl::MemRegister bad{};
    bad.h.op = uint16_t(ctl::Op::kMemRegister);
    bad.address = rng();
    bad.length = rng() | (1ull << 63);
    bad.dst_cq = uint32_t(rng());
    ctl::MemRegisterReply badr{};
    CHILD_CHECK(conn.call(bad, badr) && badr.r.rc != GNI_RC_SUCCESS);
    ctl::CqDestroy cd{};
    cd.h.op = uint16_t(ctl::Op::kCqDestroy);
    cd.cq_index = uint32_t(rng()) | 0x10000;
    ctl::Reply cdr{};
    CHILD_CHECK(conn.call(cd, cdr) && cdr.rc != GNI_RC_SUCCESS);
    // ...and raw garbage on another connection, never read (dropped and counted).
    uint8_t junk[256];
    for (auto& b : junk) b = uint8_t(rng());
    if (rng() % 2) {
      ctl::Header h{ctl::kMagic, ctl::kVersion, uint16_t(rng() % 70), 0, uint32_t(rng() % 256)};
      std::memcpy(junk, &h, sizeof h);
    }
    (void)send(garbage, junk, 1 + rng() % sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL);
    usleep(2000);
  }
  std::fprintf(stderr, "scribbler: %llu scribble rounds\n", static_cast<unsigned long long>(rounds));
  close(garbage);
  // The daemon still answers the scribbler, and refuses its nonsense.
  ctl::CqCreate cc2{};
  cc2.h.op = uint16_t(ctl::Op::kCqCreate);
  cc2.entry_count = 0xFFFFFFFF;
  ctl::CqCreateReply cr2{};
  CHILD_CHECK(conn.call(cc2, cr2) && cr2.r.rc != GNI_RC_SUCCESS);
  return 0;
}

}  // namespace

TEST_CASE_FIXTURE(OneNode, "a client scribbling over its own region hurts nobody else") {
  int info[2], go[2];
  REQUIRE(pipe(info) == 0);
  REQUIRE(pipe(go) == 0);
  pid_t tp = cl.spawn(0, [&] { return target(c, info[1], go[0]); });
  Target t{};
  REQUIRE(read(info[0], &t, sizeof t) == sizeof t);
  nlohmann::json before = cl.status(0);
  const uint64_t malformed_before = before["counters"]["malformed_messages"].get<uint64_t>();
  const uint64_t bte_errors_before = before["bte"]["errors"].get<uint64_t>();

  pid_t hp = cl.spawn(0, [&] { return healthy(c, t); });
  pid_t sp = cl.spawn(0, [&] { return scribbler(cl, c, t); });
  CHECK(cl.wait(sp, 40) == 0);
  CHECK(cl.wait(hp, 40) == 0);
  REQUIRE(write(go[1], "g", 1) == 1);
  CHECK(cl.wait(tp) == 0);

  nlohmann::json s = cl.status(0);
  REQUIRE(!s.is_null());  // the daemon is alive and answers
  CHECK(s["counters"]["malformed_messages"].get<uint64_t>() > malformed_before);
  // Every forged request of the first phase was counted as an error by the BTE engine (the
  // healthy pair's transfers all succeeded, so the errors are the scribbler's).
  CHECK(s["bte"]["errors"].get<uint64_t>() >= bte_errors_before + kForgedRequests);
  for (int fd : {info[0], info[1], go[0], go[1]}) close(fd);
}

// A client of another nicemu version gets an answer to its first call, in the daemon's
// version, instead of silence (it would wait for a reply forever); other traffic of such a
// client is dropped and counted.
TEST_CASE("a client of another control protocol version is told so") {
  Cluster cl(1);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::string p = cl.socket(0);
  std::memcpy(sa.sun_path, p.c_str(), p.size() + 1);
  REQUIRE(connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  for (uint16_t op : {uint16_t(ctl::Op::kHello), uint16_t(ctl::Op::kAttach)}) {
    ctl::Header h{ctl::kMagic, uint16_t(ctl::kVersion + 1), op, 77, uint32_t(sizeof(ctl::Header))};
    REQUIRE(send(s, &h, sizeof h, MSG_NOSIGNAL) == ssize_t(sizeof h));
    timeval tv{5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ctl::Reply r{};
    CHECK(recv(s, &r, sizeof r, 0) == ssize_t(sizeof r));
    CHECK(r.h.magic == ctl::kMagic);
    CHECK(r.h.version == ctl::kVersion);  // the daemon's, so the client can name it
    CHECK(r.h.op == op);
    CHECK(r.h.seq == 77);
    CHECK(r.rc == GNI_RC_INVALID_STATE);
  }
  close(s);
  // The daemon goes on serving clients of its own version.
  nicemu::ctl::Connection c;
  REQUIRE(c.connect(p));
  ctl::Hello hello{};
  hello.h.op = uint16_t(ctl::Op::kHello);
  ctl::HelloReply hr{};
  CHECK(c.call(hello, hr));
  CHECK(hr.r.rc == GNI_RC_SUCCESS);
}
