// Connection setup at scale (issue 24): every rank of a nicemu-run job wires SMSG channels
// to its peers, either statically (every pair's mailbox attributes gathered through PMI at
// start and every channel initialised, as the uGNI netmod's MPI does) or on demand (a
// channel is set up the first time a rank sends to a peer, by GNI_EpPostDataWId: a directed
// datagram carrying our attributes, caught by the peer's wildcard post or by its own
// directed post, as Open MPI's btl/ugni and UCX's uct/ugni do). Over each channel it then
// sends one FMA PUT (global completion) and one SMSG message announcing it; the receiver
// verifies every byte of both. Pattern: all-to-all or a 3-D periodic stencil (6 neighbours).
//
// Every rank prints one line (bench/run-connect and tests/integration/test_scale.sh read
// them):
//   rank R wire_us W done_us D modex_us M peers P channels_opened C rss_kb K shmem_kb S mbox_user_b U ok|FAIL
// and rank 0 prints `daemons` (the launcher's nicemu children: summed RSS and shared
// memory), `shm_delta_kb` (the host's Shmem growth over the job, noisy: other jobs count) and
// `smsg_per_channel` (GNI_SmsgBufferSizeNeeded and the shared-memory mailbox behind it).
// Waits block (datagram probe-wait, CQ wait), so hundreds of ranks share two cores.
#include <inttypes.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gni_pub.h"
#include "nicemu/abi/shm_layout.h"
#include "pmi.h"

namespace {

int g_rank = -1;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "connect_bench rank %d: %s\n", g_rank, what.c_str());
  PMI_Abort(1, what.c_str());
  std::exit(1);
}

void check(gni_return_t rc, const char* call, int peer = -1) {
  if (rc == GNI_RC_SUCCESS) return;
  die(std::string(call) + (peer >= 0 ? " (peer " + std::to_string(peer) + ")" : "") + ": " + gni_err_str[rc]);
}

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// A field of a /proc status-style file, in kB (0 if absent).
long proc_kb(const std::string& file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') return std::atol(line.c_str() + n + 1);
  return 0;
}

// Payload pattern for the bytes `sender` sends `receiver` (kind 0: SMSG, 1: PUT).
uint8_t pattern(int sender, int receiver, int kind, size_t i) {
  return static_cast<uint8_t>(sender * 131 + receiver * 7 + kind * 61 + i * 13 + 1);
}

// Near-cubic px*py*pz = n (largest factors first), for the stencil.
std::array<int, 3> grid_of(int n) {
  std::array<int, 3> d{1, 1, 1};
  int rest = n;
  for (int axis = 0; rest > 1; axis = (axis + 1) % 3) {
    int f = 2;
    while (rest % f) ++f;
    d[axis] *= f;
    rest /= f;
    std::sort(d.begin(), d.end());
  }
  return d;
}

std::vector<int> neighbours(int rank, int size, bool stencil) {
  if (!stencil) {
    std::vector<int> v;  // staggered: not everyone to rank 0 first
    for (int i = 1; i < size; ++i) v.push_back((rank + i) % size);
    return v;
  }
  std::set<int> out;
  auto d = grid_of(size);
  int x = rank % d[0], y = (rank / d[0]) % d[1], z = rank / (d[0] * d[1]);
  auto at = [&](int a, int b, int c) {
    return ((a + d[0]) % d[0]) + d[0] * (((b + d[1]) % d[1]) + d[1] * ((c + d[2]) % d[2]));
  };
  for (int s : {-1, 1}) {
    out.insert(at(x + s, y, z));
    out.insert(at(x, y + s, z));
    out.insert(at(x, y, z + s));
  }
  out.erase(rank);
  return {out.begin(), out.end()};
}

// What one side tells the other about the channel: its mailbox for the peer's messages and
// where the peer's PUT lands. Fits a datagram (GNI_DATAGRAM_MAXSIZE).
struct ConnInfo {
  uint32_t magic;
  uint32_t rank;
  uint64_t mbox_base;
  gni_mem_handle_t mbox_h;
  uint32_t mbox_bytes;  // the whole registration
  uint32_t mbox_offset;
  uint64_t land;
  gni_mem_handle_t land_h;
};
static_assert(sizeof(ConnInfo) <= GNI_DATAGRAM_MAXSIZE);
constexpr uint32_t kInfoMagic = 0x434F4E4E;  // "CONN"
constexpr uint64_t kWildcardId = ~uint64_t{0} - 1;  // UINT64_MAX means "any id" to uGNI

struct Options {
  bool on_demand = true;
  bool stencil = false;
  uint32_t msg = 64;
  uint32_t credits = 16;
  uint32_t payload = 64;
  int window = 128;  // directed posts in flight (the daemon limits a process's posts)
  int timeout_s = 120;
  int hold_s = 0;  // stay wired this long before tearing down (to look at the daemons)
};

// Per-connection resources: a mailbox and a PUT landing area. On demand they come in
// chunks registered as needed, so memory follows the peers actually used.
class Slots {
 public:
  Slots(gni_nic_handle_t nic, gni_cq_handle_t rcq, const gni_smsg_attr_t& a, uint32_t payload, uint32_t chunk)
      : nic_(nic), rcq_(rcq), attr_(a), payload_(payload), chunk_(chunk) {
    check(GNI_SmsgBufferSizeNeeded(&attr_, &mbox_size_), "GNI_SmsgBufferSizeNeeded");
  }
  ~Slots() {
    for (auto& c : chunks_) {
      GNI_MemDeregister(nic_, &c.mbox_h);
      GNI_MemDeregister(nic_, &c.land_h);
      std::free(c.mbox);
      std::free(c.land);
    }
  }
  // The next free slot's description (allocating a chunk when the last one is full).
  ConnInfo take(int my_rank) {
    if (used_ % chunk_ == 0) grow();
    const Chunk& c = chunks_.back();
    const uint32_t i = used_++ % chunk_;
    ConnInfo in{};
    in.magic = kInfoMagic;
    in.rank = static_cast<uint32_t>(my_rank);
    in.mbox_base = reinterpret_cast<uint64_t>(c.mbox);
    in.mbox_h = c.mbox_h;
    in.mbox_bytes = mbox_size_ * chunk_;
    in.mbox_offset = i * mbox_size_;
    in.land = reinterpret_cast<uint64_t>(c.land) + uint64_t{i} * payload_;
    in.land_h = c.land_h;
    return in;
  }
  gni_smsg_attr_t attr_of(const ConnInfo& in) const {
    gni_smsg_attr_t a = attr_;
    a.msg_buffer = reinterpret_cast<void*>(in.mbox_base);
    a.buff_size = in.mbox_bytes;
    a.mem_hndl = in.mbox_h;
    a.mbox_offset = in.mbox_offset;
    return a;
  }
  unsigned mbox_size() const { return mbox_size_; }
  uint64_t user_bytes() const { return uint64_t{chunks_.size()} * chunk_ * (mbox_size_ + payload_); }

 private:
  struct Chunk {
    char* mbox;
    char* land;
    gni_mem_handle_t mbox_h, land_h;
  };
  void grow() {
    Chunk c{};
    c.mbox = static_cast<char*>(std::calloc(chunk_, mbox_size_));
    c.land = static_cast<char*>(std::calloc(chunk_, payload_));
    if (!c.mbox || !c.land) die("out of memory for mailboxes");
    check(GNI_MemRegister(nic_, reinterpret_cast<uint64_t>(c.mbox), uint64_t{chunk_} * mbox_size_, rcq_,
                          GNI_MEM_READWRITE, static_cast<uint32_t>(-1), &c.mbox_h),
          "GNI_MemRegister (mailboxes)");
    check(GNI_MemRegister(nic_, reinterpret_cast<uint64_t>(c.land), uint64_t{chunk_} * payload_, nullptr,
                          GNI_MEM_READWRITE, static_cast<uint32_t>(-1), &c.land_h),
          "GNI_MemRegister (PUT landing area)");
    chunks_.push_back(c);
  }
  gni_nic_handle_t nic_;
  gni_cq_handle_t rcq_;
  gni_smsg_attr_t attr_;
  unsigned mbox_size_ = 0;
  uint32_t payload_, chunk_;
  uint32_t used_ = 0;
  std::vector<Chunk> chunks_;
};

struct Peer {
  gni_ep_handle_t ep = nullptr;
  ConnInfo mine{};     // what we told the peer
  ConnInfo theirs{};   // what the peer told us (magic set once known)
  ConnInfo dg_out{};   // the directed post's receive buffer
  bool wanted = false;     // a neighbour of the pattern
  bool posted = false;     // our directed post is out
  bool post_done = false;  // ... and finished
  bool connected = false;  // SmsgInit done
  bool sent = false;
  bool received = false;
};

class Rank {
 public:
  Rank(const Options& o, int rank, int size) : o_(o), rank_(rank), size_(size), peers_(size) {}

  void run() {
    const char* ptag_s = std::getenv("PMI_GNI_PTAG");
    const char* cookie_s = std::getenv("PMI_GNI_COOKIE");
    if (!ptag_s || !cookie_s) die("PMI_GNI_PTAG/PMI_GNI_COOKIE not set (run it under nicemu-run)");
    long shm0 = 0;
    if (rank_ == 0) shm0 = proc_kb("/proc/meminfo", "Shmem");
    PMI_Barrier();
    check(GNI_CdmCreate(static_cast<uint32_t>(rank_), static_cast<uint8_t>(std::strtoul(ptag_s, nullptr, 10)),
                        static_cast<uint32_t>(std::strtoul(cookie_s, nullptr, 10)), GNI_CDM_MODE_ERR_NO_KILL, &cdm_),
          "GNI_CdmCreate");
    check(GNI_CdmAttach(cdm_, 0, &addr_, &nic_), "GNI_CdmAttach");
    const uint32_t cq_entries = static_cast<uint32_t>(2 * size_ + 64);
    check(GNI_CqCreate(nic_, cq_entries, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &cq_), "GNI_CqCreate (tx)");
    check(GNI_CqCreate(nic_, cq_entries, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &rcq_), "GNI_CqCreate (rx)");
    gni_smsg_attr_t a{};
    a.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    a.mbox_maxcredit = static_cast<uint16_t>(o_.credits);
    a.msg_maxsize = o_.msg;
    // Static: one slot per rank of the job, indexed by rank; on demand: chunks of 8.
    slots_.emplace(nic_, rcq_, a, o_.payload, o_.on_demand ? 8u : static_cast<uint32_t>(size_));
    for (int p : neighbours(rank_, size_, o_.stencil)) {
      peers_[p].wanted = true;
      ++wanted_;
    }
    src_.resize(o_.payload);
    PMI_Barrier();

    const double t0 = now_us();
    if (o_.on_demand)
      wire_on_demand();
    else
      wire_static();
    const double t_wired = now_us();
    receive_all();
    const double t_done = now_us();

    PMI_Barrier();  // everyone wired and verified: the peak of what the job holds
    report(t_wired - t0, t_done - t0, shm0);
    if (o_.hold_s > 0) sleep(static_cast<unsigned>(o_.hold_s));
    PMI_Barrier();
    for (auto& p : peers_)
      if (p.ep) GNI_EpDestroy(p.ep);
    if (wc_ep_) GNI_EpDestroy(wc_ep_);
    slots_.reset();
    GNI_CqDestroy(cq_);
    GNI_CqDestroy(rcq_);
    GNI_CdmDestroy(cdm_);
  }

  bool ok() const { return !failed_; }

 private:
  struct Addr {
    uint32_t rank, addr;
  };
  struct StaticInfo {
    uint32_t rank, addr;
    ConnInfo slot0;  // slot of rank 0; slot r is at r * mbox_size / r * payload
  };

  gni_ep_handle_t make_ep(int p, uint32_t addr) {
    gni_ep_handle_t ep;
    check(GNI_EpCreate(nic_, cq_, &ep), "GNI_EpCreate", p);
    check(GNI_EpBind(ep, addr, static_cast<uint32_t>(p)), "GNI_EpBind", p);
    return ep;
  }

  void wire_static() {
    StaticInfo me{static_cast<uint32_t>(rank_), addr_, slots_->take(rank_)};
    std::vector<StaticInfo> all(static_cast<size_t>(size_));
    const double t = now_us();
    if (PMI_Allgather(&me, all.data(), sizeof me) != PMI_SUCCESS) die("PMI_Allgather of SMSG attributes failed");
    modex_us_ = now_us() - t;
    // Every slot of the arena, in rank order, so slot r is the one for rank r.
    for (int r = 1; r < size_; ++r) (void)slots_->take(rank_);
    for (const StaticInfo& s : all) {
      const int p = static_cast<int>(s.rank);
      if (p == rank_ || p >= size_) continue;
      Peer& peer = peers_[p];
      peer.ep = make_ep(p, s.addr);
      peer.mine = me.slot0;
      peer.mine.mbox_offset = static_cast<uint32_t>(p) * slots_->mbox_size();
      peer.mine.land += uint64_t{static_cast<uint32_t>(p)} * o_.payload;
      peer.theirs = s.slot0;
      peer.theirs.mbox_offset = static_cast<uint32_t>(rank_) * slots_->mbox_size();
      peer.theirs.land += uint64_t{static_cast<uint32_t>(rank_)} * o_.payload;
      init_channel(p);
    }
    for (int p = 0; p < size_; ++p)
      if (peers_[p].wanted) send_to(p);
  }

  void init_channel(int p) {
    Peer& peer = peers_[p];
    gni_smsg_attr_t local = slots_->attr_of(peer.mine), remote = slots_->attr_of(peer.theirs);
    check(GNI_SmsgInit(peer.ep, &local, &remote), "GNI_SmsgInit", p);
    peer.connected = true;
    ++channels_;
  }

  // FMA PUT into the peer's landing slot, globally completed, then the SMSG message that
  // announces it (the receiver checks both).
  void send_to(int p) {
    Peer& peer = peers_[p];
    for (size_t i = 0; i < o_.payload; ++i) src_[i] = pattern(rank_, p, 1, i);
    gni_post_descriptor_t d{};
    d.type = GNI_POST_FMA_PUT;
    d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
    d.local_addr = reinterpret_cast<uint64_t>(src_.data());
    d.remote_addr = peer.theirs.land;
    d.remote_mem_hndl = peer.theirs.land_h;
    d.length = o_.payload;
    check(GNI_PostFma(peer.ep, &d), "GNI_PostFma", p);
    for (;;) {
      gni_cq_entry_t ev;
      gni_return_t rc = GNI_CqWaitEvent(cq_, 1000, &ev);
      if (rc == GNI_RC_TIMEOUT) continue;
      if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) check(rc, "GNI_CqWaitEvent (tx)", p);
      if (GNI_CQ_GET_TYPE(ev) != GNI_CQ_EVENT_TYPE_POST) continue;  // an SMSG send's completion
      gni_post_descriptor_t* done = nullptr;
      check(GNI_GetCompleted(cq_, ev, &done), "GNI_GetCompleted", p);
      if (done != &d) die("completion for an unexpected descriptor");
      if (rc != GNI_RC_SUCCESS || GNI_CQ_GET_STATUS(ev) != 0) die("FMA PUT to " + std::to_string(p) + " failed");
      break;
    }
    std::vector<uint8_t> msg(o_.msg);
    for (size_t i = 0; i < msg.size(); ++i) msg[i] = pattern(rank_, p, 0, i);
    gni_return_t rc;
    while ((rc = GNI_SmsgSendWTag(peer.ep, nullptr, 0, msg.data(), o_.msg, 0, 9)) == GNI_RC_NOT_DONE) {
      gni_cq_entry_t ev;
      (void)GNI_CqWaitEvent(cq_, 10, &ev);
    }
    check(rc, "GNI_SmsgSendWTag", p);
    gni_cq_entry_t ev;
    while (GNI_CqGetEvent(cq_, &ev) == GNI_RC_SUCCESS) {
    }
    peer.sent = true;
    ++sent_;
  }

  void post_directed(int p) {
    Peer& peer = peers_[p];
    if (!peer.ep) {
      peer.ep = make_ep(p, addrs_[p]);
      peer.mine = slots_->take(rank_);
    }
    peer.dg_out = ConnInfo{};
    gni_return_t rc = GNI_EpPostDataWId(peer.ep, &peer.mine, sizeof(ConnInfo), &peer.dg_out, sizeof(ConnInfo),
                                        static_cast<uint64_t>(p));
    if (rc == GNI_RC_ERROR_RESOURCE) return;  // the daemon's post limit: retried as posts finish
    check(rc, "GNI_EpPostDataWId (directed)", p);
    peer.posted = true;
    ++in_flight_;
  }

  void post_wildcard() {
    wc_in_ = ConnInfo{};
    check(GNI_EpPostDataWId(wc_ep_, nullptr, 0, &wc_in_, sizeof(ConnInfo), kWildcardId),
          "GNI_EpPostDataWId (wildcard)");
  }

  void learn(int p, const ConnInfo& in) {
    if (in.magic != kInfoMagic || static_cast<int>(in.rank) != p) die("bad connection data from " + std::to_string(p));
    peers_[p].theirs = in;
  }

  void maybe_connect(int p) {
    Peer& peer = peers_[p];
    if (peer.connected || !peer.post_done || peer.theirs.magic != kInfoMagic) return;
    init_channel(p);
    if (peer.wanted) send_to(p);
  }

  // One finished datagram, named by the probe's id.
  void on_datagram(uint64_t id) {
    gni_post_state_t st;
    uint32_t raddr = 0, rid = 0;
    if (id == kWildcardId) {
      check(GNI_EpPostDataWaitById(wc_ep_, id, 1000, &st, &raddr, &rid), "GNI_EpPostDataWaitById (wildcard)");
      if (st != GNI_POST_COMPLETED) die("wildcard datagram ended in state " + std::to_string(st));
      const int p = static_cast<int>(rid);
      if (p < 0 || p >= size_ || p == rank_) die("wildcard matched by unknown inst " + std::to_string(rid));
      learn(p, wc_in_);
      post_wildcard();
      // A peer connecting to us: we answer with our own directed post (its data is our side).
      if (!peers_[p].posted) post_directed(p);
      maybe_connect(p);
      return;
    }
    const int p = static_cast<int>(id);
    if (p < 0 || p >= size_ || !peers_[p].posted) die("probe named unknown datagram " + std::to_string(id));
    Peer& peer = peers_[p];
    check(GNI_EpPostDataWaitById(peer.ep, id, 1000, &st, &raddr, &rid), "GNI_EpPostDataWaitById", p);
    if (st != GNI_POST_COMPLETED) die("directed datagram to " + std::to_string(p) + " ended in state " + std::to_string(st));
    --in_flight_;
    peer.post_done = true;
    // Matched by the peer's own directed post: its data came back to us here. Matched by
    // its wildcard: nothing (its directed post will reach our wildcard).
    if (peer.dg_out.magic == kInfoMagic) learn(p, peer.dg_out);
    maybe_connect(p);
  }

  void wire_on_demand() {
    // The modex every on-demand transport still needs: each rank's NIC address.
    Addr me{static_cast<uint32_t>(rank_), addr_};
    std::vector<Addr> all(static_cast<size_t>(size_));
    const double t = now_us();
    if (PMI_Allgather(&me, all.data(), sizeof me) != PMI_SUCCESS) die("PMI_Allgather of addresses failed");
    modex_us_ = now_us() - t;
    addrs_.assign(static_cast<size_t>(size_), 0);
    for (const Addr& a : all)
      if (a.rank < static_cast<uint32_t>(size_)) addrs_[a.rank] = a.addr;
    check(GNI_EpCreate(nic_, cq_, &wc_ep_), "GNI_EpCreate (wildcard)");
    post_wildcard();
    std::vector<int> order = neighbours(rank_, size_, o_.stencil);
    size_t next = 0;
    const double deadline = now_us() + o_.timeout_s * 1e6;
    while (sent_ < wanted_) {
      // "First send to the peer": start connections up to the window.
      while (next < order.size() && in_flight_ < o_.window) {
        const int p = order[next];
        if (!peers_[p].posted) post_directed(p);
        if (!peers_[p].posted) break;  // post limit reached: wait for some to finish
        ++next;
      }
      uint64_t id = 0;
      gni_return_t rc = GNI_PostdataProbeWaitById(nic_, 200, &id);
      if (rc == GNI_RC_SUCCESS) {
        on_datagram(id);
        continue;
      }
      if (rc != GNI_RC_TIMEOUT) check(rc, "GNI_PostdataProbeWaitById");
      if (now_us() > deadline) die(stuck("wiring"));
    }
  }

  std::string stuck(const char* phase) const {
    std::ostringstream s;
    s << phase << " timed out after " << o_.timeout_s << " s: sent " << sent_ << "/" << wanted_ << ", received "
      << received_ << "; waiting for";
    int shown = 0;
    for (int p = 0; p < size_ && shown < 8; ++p) {
      const Peer& q = peers_[p];
      if (!q.wanted || (q.sent && q.received)) continue;
      s << " " << p << "(posted " << q.posted << " done " << q.post_done << " info "
        << (q.theirs.magic == kInfoMagic) << " recv " << q.received << ")";
      ++shown;
    }
    return s.str();
  }

  // Takes every message waiting from `p`, verifying it and the PUT before it.
  void drain(int p) {
    Peer& peer = peers_[p];
    if (!peer.connected) return;
    for (;;) {
      void* m = nullptr;
      uint8_t tag = GNI_SMSG_ANY_TAG;
      gni_return_t rc = GNI_SmsgGetNextWTag(peer.ep, &m, &tag);
      if (rc == GNI_RC_NOT_DONE) return;
      check(rc, "GNI_SmsgGetNextWTag", p);
      bool good = tag == 9 && !peer.received && peer.wanted;
      const auto* b = static_cast<const uint8_t*>(m);
      for (size_t i = 0; good && i < o_.msg; ++i) good = b[i] == pattern(p, rank_, 0, i);
      const auto* land = reinterpret_cast<const uint8_t*>(peer.mine.land);
      for (size_t i = 0; good && i < o_.payload; ++i) good = land[i] == pattern(p, rank_, 1, i);
      check(GNI_SmsgRelease(peer.ep), "GNI_SmsgRelease", p);
      if (!good) {
        std::fprintf(stderr, "connect_bench rank %d: message or PUT from %d is wrong\n", rank_, p);
        failed_ = true;
      }
      peer.received = true;
      ++received_;
    }
  }

  void receive_all() {
    const double deadline = now_us() + o_.timeout_s * 1e6;
    while (received_ < wanted_) {
      gni_cq_entry_t ev;
      gni_return_t rc = GNI_CqWaitEvent(rcq_, 500, &ev);
      if (rc == GNI_RC_SUCCESS && !GNI_CQ_OVERRUN(ev)) {
        const int p = static_cast<int>(GNI_CQ_GET_INST_ID(ev));
        if (p >= 0 && p < size_ && p != rank_) {
          drain(p);
          continue;
        }
      }
      if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TIMEOUT && rc != GNI_RC_ERROR_RESOURCE)
        check(rc, "GNI_CqWaitEvent (rx)");
      // Timeout, overrun or an event we cannot attribute: look at every channel.
      for (int p = 0; p < size_; ++p) drain(p);
      if (now_us() > deadline) die(stuck("receiving"));
    }
  }

  void report(double wire_us, double done_us, long shm0) {
    const long rss = proc_kb("/proc/self/status", "VmRSS");
    const long shmem = proc_kb("/proc/self/status", "RssShmem");
    std::printf("rank %d wire_us %.0f done_us %.0f modex_us %.0f peers %d channels_opened %d rss_kb %ld shmem_kb %ld mbox_user_b %" PRIu64
                " %s\n",
                rank_, wire_us, done_us, modex_us_, wanted_, channels_, rss, shmem, slots_->user_bytes(), failed_ ? "FAIL" : "ok");
    if (rank_ == 0) {
      // The daemons are our launcher's other children.
      long d_rss = 0, d_shmem = 0, d_pss = 0;
      double d_cpu_ms = 0;
      int daemons = 0;
      const std::string ppid = std::to_string(getppid());
      std::ifstream kids("/proc/" + ppid + "/task/" + ppid + "/children");
      pid_t pid;
      while (kids >> pid) {
        std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
        std::string name;
        comm >> name;
        if (name != "nicemu") continue;
        const std::string dir = "/proc/" + std::to_string(pid);
        d_rss += proc_kb(dir + "/status", "VmRSS");
        d_shmem += proc_kb(dir + "/status", "RssShmem");
        d_pss += proc_kb(dir + "/smaps_rollup", "Pss");
        // utime and stime: fields 14 and 15 of stat, after the parenthesised command name.
        std::ifstream st(dir + "/stat");
        std::string all((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
        std::istringstream rest(all.substr(all.rfind(')') + 2));
        std::string f;
        long ut = 0, stime = 0;
        for (int i = 3; i <= 15 && rest >> f; ++i) {
          if (i == 14) ut = std::atol(f.c_str());
          if (i == 15) stime = std::atol(f.c_str());
        }
        d_cpu_ms += 1000.0 * static_cast<double>(ut + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
        ++daemons;
      }
      std::printf("daemons %d rss_kb %ld shmem_kb %ld pss_kb %ld cpu_ms %.0f\n", daemons, d_rss, d_shmem, d_pss, d_cpu_ms);
      std::printf("shm_delta_kb %ld\n", proc_kb("/proc/meminfo", "Shmem") - shm0);
      std::printf("smsg_per_channel msg %u credits %u buffer_size_needed %u shm_mailbox %" PRIu64 "\n", o_.msg,
                  o_.credits, slots_->mbox_size(), nicemu::abi::mbox_bytes(o_.credits, o_.msg));
    }
    std::fflush(stdout);
  }

  Options o_;
  int rank_, size_;
  std::vector<Peer> peers_;
  std::vector<uint32_t> addrs_;
  std::optional<Slots> slots_;
  std::vector<uint8_t> src_;
  gni_cdm_handle_t cdm_ = nullptr;
  gni_nic_handle_t nic_ = nullptr;
  uint32_t addr_ = 0;
  gni_cq_handle_t cq_ = nullptr, rcq_ = nullptr;
  gni_ep_handle_t wc_ep_ = nullptr;
  ConnInfo wc_in_{};
  int wanted_ = 0, sent_ = 0, received_ = 0, channels_ = 0, in_flight_ = 0;
  bool failed_ = false;
  double modex_us_ = 0;
};

void usage() {
  std::fprintf(stderr,
               "usage: connect_bench [--static|--on-demand] [--stencil|--all] [--msg B] [--credits C]\n"
               "                     [--payload B] [--window W] [--timeout S] [--hold S]   (run under nicemu-run)\n"
               "       connect_bench --buffer-sizes   GNI_SmsgBufferSizeNeeded for common settings\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto num = [&]() -> long {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return std::atol(argv[++i]);
    };
    if (a == "--static") o.on_demand = false;
    else if (a == "--on-demand") o.on_demand = true;
    else if (a == "--stencil") o.stencil = true;
    else if (a == "--all") o.stencil = false;
    else if (a == "--msg") o.msg = static_cast<uint32_t>(num());
    else if (a == "--credits") o.credits = static_cast<uint32_t>(num());
    else if (a == "--payload") o.payload = static_cast<uint32_t>(num());
    else if (a == "--window") o.window = static_cast<int>(num());
    else if (a == "--timeout") o.timeout_s = static_cast<int>(num());
    else if (a == "--hold") o.hold_s = static_cast<int>(num());
    else if (a == "--buffer-sizes") {
      std::printf("%8s %8s %12s\n", "msg_max", "credits", "bytes");
      for (uint32_t m : {64u, 128u, 256u, 512u, 1024u})
        for (uint32_t c : {4u, 8u, 16u, 32u}) {
          gni_smsg_attr_t at{};
          at.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
          at.mbox_maxcredit = static_cast<uint16_t>(c);
          at.msg_maxsize = m;
          unsigned sz = 0;
          check(GNI_SmsgBufferSizeNeeded(&at, &sz), "GNI_SmsgBufferSizeNeeded");
          std::printf("%8u %8u %12u\n", m, c, sz);
        }
      return 0;
    } else {
      usage();
      return 2;
    }
  }
  if (o.msg == 0 || o.msg > GNI_SMSG_MAX_SIZE || o.credits == 0 || o.payload == 0 || o.window < 1) {
    usage();
    return 2;
  }
  int spawned = 0, rank = 0, size = 0;
  if (PMI_Init(&spawned) != PMI_SUCCESS || PMI_Get_rank(&rank) != PMI_SUCCESS || PMI_Get_size(&size) != PMI_SUCCESS) {
    std::fprintf(stderr, "connect_bench: PMI_Init failed (run it with nicemu-run)\n");
    return 1;
  }
  g_rank = rank;
  Rank r(o, rank, size);
  r.run();
  const bool ok = r.ok();
  PMI_Finalize();
  return ok ? 0 : 1;
}
