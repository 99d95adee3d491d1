// ce_bench: barrier and 8-byte allreduce latency through the collective engine against the
// same collectives built from SMSG (a dissemination barrier, a recursive-doubling
// allreduce), run under nicemu-run by bench/run-ce. The four are interleaved in every
// repetition so that load changes on the host hit all alike; each reports the median over
// repetitions of the mean time per operation. Waiting ranks block in GNI_CqWaitEvent (its
// bounded spin, then a futex), never a busy loop: the host may have fewer cores than ranks.
//   ce_bench [--reps R] [--iters K] [--ce-only]   prints: ranks nodes op ce_us smsg_us
// (--ce-only: no SMSG collectives, whose all-to-all mailboxes a job of hundreds of ranks
// need not pay for; smsg_us is then 0.)
// The CE tree is one channel per node with its ranks as children. The nodes' channels hang
// from the first node's (as Cray's examples build it) while they fit in its 32 child slots
// (GNI_CE_MAX_CHILDREN); beyond, they form a tree of up to 16 node channels per parent.
#include <sched.h>
#include <sys/time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gni_pub.h"
#include "pmi.h"

namespace {

int rank_ = 0, size_ = 1;

void check(gni_return_t rc, const char* what) {
  if (rc == GNI_RC_SUCCESS) return;
  std::fprintf(stderr, "ce_bench rank %d: %s failed (rc %d)\n", rank_, what, rc);
  PMI_Abort(1, what);
  std::exit(1);
}

double now_us() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return tv.tv_sec * 1e6 + tv.tv_usec;
}

struct Smsg {
  gni_cq_handle_t tx_cq = nullptr, rx_cq = nullptr;
  std::vector<gni_ep_handle_t> eps;
  char* mbox = nullptr;

  void init(gni_nic_handle_t nic, const std::vector<uint32_t>& addr) {
    check(GNI_CqCreate(nic, 4096, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &tx_cq), "GNI_CqCreate");
    check(GNI_CqCreate(nic, 4096, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &rx_cq), "GNI_CqCreate");
    gni_smsg_attr_t a{};
    a.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    a.mbox_maxcredit = 16;
    a.msg_maxsize = 64;
    unsigned need = 0;
    check(GNI_SmsgBufferSizeNeeded(&a, &need), "GNI_SmsgBufferSizeNeeded");
    need = (need + 63) / 64 * 64;
    mbox = static_cast<char*>(std::aligned_alloc(4096, (size_t(need) * size_ + 4095) / 4096 * 4096));
    std::memset(mbox, 0, size_t(need) * size_);
    gni_mem_handle_t mh;
    check(GNI_MemRegister(nic, uint64_t(mbox), uint64_t(need) * size_, rx_cq, GNI_MEM_READWRITE, uint32_t(-1), &mh),
          "GNI_MemRegister");
    // Everybody's buffer and handle; the mailbox for peer p is at offset p * need.
    struct Mine {
      uint64_t base;
      gni_mem_handle_t mh;
    } me{uint64_t(mbox), mh};
    std::vector<Mine> all(size_);
    PMI_Allgather(&me, all.data(), sizeof me);
    eps.assign(size_, nullptr);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      check(GNI_EpCreate(nic, tx_cq, &eps[p]), "GNI_EpCreate");
      check(GNI_EpBind(eps[p], addr[p], uint32_t(p)), "GNI_EpBind");
      gni_smsg_attr_t local = a, remote = a;
      local.msg_buffer = mbox;
      local.buff_size = need * size_;
      local.mem_hndl = mh;
      local.mbox_offset = need * uint32_t(p);
      remote.msg_buffer = reinterpret_cast<void*>(all[p].base);
      remote.buff_size = need * size_;
      remote.mem_hndl = all[p].mh;
      remote.mbox_offset = need * uint32_t(rank_);
      check(GNI_SmsgInit(eps[p], &local, &remote), "GNI_SmsgInit");
    }
    PMI_Barrier();
  }

  void drain_tx() {
    gni_cq_entry_t e;
    while (GNI_CqGetEvent(tx_cq, &e) == GNI_RC_SUCCESS) {
    }
  }

  void send(int p, uint64_t v) {
    for (;;) {
      gni_return_t rc = GNI_SmsgSend(eps[p], &v, sizeof v, nullptr, 0, 0);
      if (rc == GNI_RC_SUCCESS) break;
      if (rc != GNI_RC_NOT_DONE) check(rc, "GNI_SmsgSend");
      drain_tx();
      sched_yield();  // out of credits: the receiver must run to release
    }
    drain_tx();
  }

  uint64_t recv(int p) {
    for (;;) {
      void* msg = nullptr;
      gni_return_t rc = GNI_SmsgGetNext(eps[p], &msg);
      if (rc == GNI_RC_SUCCESS) {
        uint64_t v;
        std::memcpy(&v, msg, sizeof v);
        GNI_SmsgRelease(eps[p]);
        return v;
      }
      if (rc != GNI_RC_NOT_DONE) check(rc, "GNI_SmsgGetNext");
      // The message may be in already (an event taken while waiting for another peer):
      // the mailbox is looked at again before every wait.
      gni_cq_entry_t e;
      rc = GNI_CqWaitEvent(rx_cq, 1, &e);
      if (rc == GNI_RC_ERROR_RESOURCE) {  // overrun: events were lost, the mailboxes were not
        while (GNI_CqGetEvent(rx_cq, &e) != GNI_RC_NOT_DONE) {
        }
      }
    }
  }

  void barrier() {  // dissemination
    for (int k = 1; k < size_; k <<= 1) {
      send((rank_ + k) % size_, 0);
      recv((rank_ - k + size_) % size_);
    }
  }

  uint64_t allreduce(uint64_t v) {  // recursive doubling (powers of two)
    for (int k = 1; k < size_; k <<= 1) {
      const int partner = rank_ ^ k;
      send(partner, v);
      v += recv(partner);
    }
    return v;
  }
};

struct Ce {
  gni_cq_handle_t cq = nullptr;
  gni_ce_handle_t ce = nullptr;
  gni_ep_handle_t leaf = nullptr;
  gni_ce_result_t* res = nullptr;
  gni_mem_handle_t mh{};
  uint64_t red = 1;

  void init(gni_nic_handle_t nic, const std::vector<uint32_t>& addr) {
    check(GNI_CqCreate(nic, 1024, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &cq), "GNI_CqCreate");
    res = static_cast<gni_ce_result_t*>(std::aligned_alloc(64, 64));
    check(GNI_MemRegister(nic, uint64_t(res), sizeof *res, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &mh),
          "GNI_MemRegister");
    std::vector<int> leader(size_);
    for (int r = 0; r < size_; ++r) {
      leader[r] = r;
      for (int q = 0; q < r; ++q)
        if (addr[q] == addr[r]) {
          leader[r] = q;
          break;
        }
    }
    std::vector<gni_ep_handle_t> eps(size_);
    for (int p = 0; p < size_; ++p) {
      check(GNI_EpCreate(nic, cq, &eps[p]), "GNI_EpCreate");
      check(GNI_EpBind(eps[p], addr[p], uint32_t(p)), "GNI_EpBind");
    }
    uint32_t id = ~0u;
    if (leader[rank_] == rank_) {
      check(GNI_CeCreate(nic, &ce), "GNI_CeCreate");
      check(GNI_CeGetId(ce, &id), "GNI_CeGetId");
    }
    std::vector<uint32_t> ids(size_);
    PMI_Allgather(&id, ids.data(), sizeof id);
    // Slots: the node's ranks first, then the node channels below this one.
    std::vector<int> slot(size_, 0), kids_of(size_, 0);
    for (int r = 0; r < size_; ++r) slot[r] = kids_of[leader[r]]++;
    std::vector<int> leaders;  // node channels' owners, in rank order
    for (int r = 0; r < size_; ++r)
      if (leader[r] == r) leaders.push_back(r);
    const int per_node = *std::max_element(kids_of.begin(), kids_of.end());
    const int max_vce = 32 - per_node;  // GNI_CE_MAX_CHILDREN
    if (max_vce < 1) {
      std::fprintf(stderr, "ce_bench: %d ranks on one node leave no CE child slot for other nodes\n", per_node);
      PMI_Abort(1, "too many ranks per node");
    }
    const int fanout = int(leaders.size()) - 1 <= max_vce ? max_vce : std::min(16, max_vce);
    std::vector<int> vce_slot(size_, -1), parent_of(size_, -1);
    for (size_t j = 1; j < leaders.size(); ++j) {
      const int p = leaders[(j - 1) / size_t(fanout)];
      parent_of[leaders[j]] = p;
      vce_slot[leaders[j]] = kids_of[p]++;
    }
    if (leader[rank_] == rank_) {
      std::vector<gni_ep_handle_t> kids;
      for (int r = 0; r < size_; ++r)
        if (leader[r] == rank_) {
          check(GNI_EpSetCeAttr(eps[r], r == rank_ ? id : uint32_t(-1), uint32_t(slot[r]), GNI_CE_CHILD_PE),
                "GNI_EpSetCeAttr");
          kids.push_back(eps[r]);
        }
      for (int r = 0; r < size_; ++r)
        if (parent_of[r] == rank_) {
          check(GNI_EpSetCeAttr(eps[r], ids[r], uint32_t(vce_slot[r]), GNI_CE_CHILD_VCE), "GNI_EpSetCeAttr");
          kids.push_back(eps[r]);
        }
      gni_ep_handle_t parent = nullptr;
      if (parent_of[rank_] >= 0) {
        const int p = parent_of[rank_];
        parent = eps[p];
        check(GNI_EpSetCeAttr(parent, ids[p], uint32_t(vce_slot[rank_]), GNI_CE_CHILD_VCE), "GNI_EpSetCeAttr");
      }
      check(GNI_CeConfigure(ce, kids.data(), uint32_t(kids.size()), parent, nullptr, GNI_CE_MODE_CQE_ONERR),
            "GNI_CeConfigure");
    } else {
      check(GNI_EpSetCeAttr(eps[leader[rank_]], ids[leader[rank_]], uint32_t(slot[rank_]), GNI_CE_CHILD_PE),
            "GNI_EpSetCeAttr");
    }
    leaf = eps[leader[rank_]];
    PMI_Barrier();
  }

  uint64_t allreduce(uint64_t v, gni_ce_cmd_type_t cmd = GNI_FMA_CE_IADD) {
    gni_post_descriptor_t d{};
    d.type = GNI_POST_CE;
    d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    d.local_addr = uint64_t(res);
    d.local_mem_hndl = mh;
    d.ce_cmd = cmd;
    d.ce_red_id = red++;
    d.first_operand = v;
    res->control = 0;
    check(GNI_PostFma(leaf, &d), "GNI_PostFma (CE)");
    gni_cq_entry_t e;
    check(GNI_CqWaitEvent(cq, 60000, &e), "GNI_CqWaitEvent (CE)");
    gni_post_descriptor_t* done;
    GNI_GetCompleted(cq, e, &done);
    check(GNI_CeCheckResult(res, sizeof *res), "GNI_CeCheckResult");
    return res->result1;
  }
  void barrier() { allreduce(0, GNI_FMA_CE_AND); }
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 9, iters = 50;
  bool ce_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ce-only")) {
      ce_only = true;
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--reps")) {
      reps = std::atoi(argv[++i]);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--iters")) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: ce_bench [--reps R] [--iters K] [--ce-only]   (run it under nicemu-run)\n");
      return 2;
    }
  }
  int spawned;
  if (PMI_Init(&spawned) != PMI_SUCCESS) return 1;
  PMI_Get_rank(&rank_);
  PMI_Get_size(&size_);
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t my_addr;
  check(GNI_CdmCreate(uint32_t(rank_), uint8_t(std::strtoul(std::getenv("PMI_GNI_PTAG"), nullptr, 0)),
                      uint32_t(std::strtoul(std::getenv("PMI_GNI_COOKIE"), nullptr, 0)), 0, &cdm),
        "GNI_CdmCreate");
  check(GNI_CdmAttach(cdm, 0, &my_addr, &nic), "GNI_CdmAttach");
  std::vector<uint32_t> addr(size_);
  PMI_Allgather(&my_addr, addr.data(), sizeof my_addr);
  int nodes = 0;
  for (int r = 0; r < size_; ++r) nodes += std::find(addr.begin(), addr.end(), addr[r]) - addr.begin() == r;
  Smsg sm;
  if (!ce_only) sm.init(nic, addr);
  Ce ce;
  ce.init(nic, addr);
  // Both give the same sum (checked once), then the timed repetitions.
  const bool pow2 = (size_ & (size_ - 1)) == 0;
  const uint64_t want = uint64_t(size_) * uint64_t(size_ - 1) / 2;
  const uint64_t got = ce.allreduce(uint64_t(rank_));
  if (got != want || (!ce_only && pow2 && sm.allreduce(uint64_t(rank_)) != want)) {
    std::fprintf(stderr, "ce_bench rank %d: wrong allreduce result (CE %" PRIu64 ", want %" PRIu64 ")\n", rank_, got,
                 want);
    PMI_Abort(1, "wrong result");
  }
  std::vector<double> t[4];
  for (int r = 0; r < reps; ++r) {
    for (int op = 0; op < 4; ++op) {
      if ((op == 3 && !pow2) || (ce_only && (op == 1 || op == 3))) continue;
      PMI_Barrier();
      const double t0 = now_us();
      for (int i = 0; i < iters; ++i) {
        switch (op) {
          case 0: ce.barrier(); break;
          case 1: sm.barrier(); break;
          case 2: ce.allreduce(uint64_t(rank_)); break;
          case 3: sm.allreduce(uint64_t(rank_)); break;
        }
      }
      t[op].push_back((now_us() - t0) / iters);
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (rank_ == 0) {
    std::printf("%d %d barrier %.1f %.1f\n", size_, nodes, median(t[0]), median(t[1]));
    if (pow2 || ce_only) std::printf("%d %d allreduce8 %.1f %.1f\n", size_, nodes, median(t[2]), median(t[3]));
    std::fflush(stdout);
  }
  PMI_Barrier();
  PMI_Finalize();
  return 0;
}
