// udreg_bench: cost of a uDREG cache hit and of a miss, in the same run.
//
//   hit    UDREG_Register of a range covered by a cached entry, with N live entries (100,
//          1 000 and 10 000 by default: the growth shows the O(log n) lookup). Entries are
//          one-page registrations of distinct pages; each lookup asks for a random one of
//          them (a sub-range of it), so the index is walked from the root every time rather
//          than served from a hot path. Timed in batches of --batch calls; the figure is the
//          median over batches of the time per call. The references are released afterwards,
//          outside the timed part (their cost is printed as "release").
//   miss   UDREG_Register of a range no entry covers, with the 10 000 entries cached: the
//          lookup, a real GNI_MemRegister through the nicemu daemon (a control-socket round
//          trip), the userfaultfd registration of the range when that source is on, and the
//          insertion. Each call timed alone; median over --misses calls. The entry is then
//          dropped with UDREG_Unregister (GNI_MemDeregister), outside the timed part.
//   direct GNI_MemRegister alone (no cache), for reference.
//
// All registrations are real (GNI_MemRegister through the daemon), so the device table holds
// 10 000+ registrations. The daemon is --socket, else $NICEMU_SOCKET, else node $NICEMU_NODE
// in $NICEMU_RUNDIR (else the first daemon found there); bench/run-udreg starts a private
// one. Invalidation sources as in any process (NICEMU_UDREG_INVALIDATION, default auto).
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "gni_pub.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/ctl/ctl_client.h"
#include "socket_choice.h"
#include "udreg_pub.h"

namespace {

constexpr uint64_t kPage = 4096;

struct Options {
  std::vector<uint32_t> sizes = {100, 1000, 10000};
  uint32_t batch = 1000;
  uint32_t batches = 200;
  uint32_t misses = 300;
  int cpu = -1;
  bool csv = false;
  std::string socket;
};
Options opt;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "udreg_bench: %s\n", what.c_str());
  std::exit(2);
}

double now_ns() {
  return double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The device: GNI_MemRegister / GNI_MemDeregister on one NIC handle.
gni_nic_handle_t g_nic = nullptr;
uint64_t g_regs = 0, g_deregs = 0;

void* device_reg(void* addr, uint64_t len, void*) {
  auto* h = new gni_mem_handle_t;
  gni_return_t rc = GNI_MemRegister(g_nic, uint64_t(addr), len, nullptr, GNI_MEM_READWRITE, uint32_t(-1), h);
  if (rc != GNI_RC_SUCCESS) {
    delete h;
    return rc == GNI_RC_ERROR_RESOURCE ? nullptr : UDREG_DEVICE_REG_FAILED;
  }
  ++g_regs;
  return h;
}

uint32_t device_dereg(void* data, void*) {
  auto* h = static_cast<gni_mem_handle_t*>(data);
  gni_return_t rc = GNI_MemDeregister(g_nic, h);
  delete h;
  ++g_deregs;
  return rc == GNI_RC_SUCCESS ? 0 : 1;
}


void attach(const std::string& sock) {
  nicemu::abi::ctl::Cred req{};
  req.h.op = uint16_t(nicemu::abi::ctl::Op::kCredIssue);
  req.uid = getuid();
  nicemu::abi::ctl::CredReply rep{};
  nicemu::ctl::Connection c;
  if (!c.connect(sock) || !c.call(req, rep) || rep.r.rc != 0) die("cannot obtain a credential from " + sock);
  setenv("NICEMU_SOCKET", sock.c_str(), 1);
  gni_cdm_handle_t cdm = nullptr;
  uint32_t addr = 0;
  if (GNI_CdmCreate(1, uint8_t(rep.ptag), rep.cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm) != GNI_RC_SUCCESS ||
      GNI_CdmAttach(cdm, 0, &addr, &g_nic) != GNI_RC_SUCCESS)
    die("cannot attach to the NIC at " + sock);
}

void report(const char* what, uint64_t entries, double value, const char* unit) {
  if (opt.csv)
    std::printf("%s,%llu,%.6g,%s\n", what, static_cast<unsigned long long>(entries), value, unit);
  else
    std::printf("%-10s %8llu %12.1f  %s\n", what, static_cast<unsigned long long>(entries), value, unit);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"udreg_bench: uDREG hit and miss cost (miss = a real GNI_MemRegister through the daemon)"};
  app.add_option("--entries", opt.sizes, "live entries for the hit measurement (default 100 1000 10000)");
  app.add_option("--batch", opt.batch, "Register calls per timed hit batch (default 1000)");
  app.add_option("--batches", opt.batches, "hit batches per size; the median is reported (default 200)");
  app.add_option("--misses", opt.misses, "timed misses (default 300)");
  app.add_option("--cpu", opt.cpu, "pin the benchmark to this CPU (sched_setaffinity)");
  app.add_flag("--csv", opt.csv, "print what,entries,value,unit lines");
  app.add_option("--socket", opt.socket,
                 "control socket of the nicemu daemon (default: $NICEMU_SOCKET, else node $NICEMU_NODE in "
                 "$NICEMU_RUNDIR)");
  CLI11_PARSE(app, argc, argv);
  if (opt.sizes.empty() || opt.batch == 0 || opt.batches == 0 || opt.misses == 0) die("empty measurement");
  std::sort(opt.sizes.begin(), opt.sizes.end());
  uint32_t max_n = opt.sizes.back();
  if (max_n < opt.batch) die("--batch must not exceed the largest --entries");

  if (opt.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(opt.cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity failed");
  }
  std::string sock = resolve_socket(opt.socket);
  if (sock.empty()) die("no nicemu daemon: give --socket or set NICEMU_RUNDIR/NICEMU_NODE");
  attach(sock);

  udreg_cache_attr_t attr{};
  std::snprintf(attr.cache_name, sizeof attr.cache_name, "udreg_bench");
  attr.max_entries = max_n + 1;  // the cached pages plus the one being missed
  // EVICT_W_UNREG: a miss's entry is dropped by UDREG_Unregister, outside the timed part,
  // so no timed miss has to evict; hits are released with UDREG_DecrRefcount and stay.
  attr.modes = UDREG_CC_MODE_USE_KERNEL_CACHE | UDREG_CC_MODE_USE_LAZY_DEREG | UDREG_CC_MODE_USE_EVICT_W_UNREG;
  attr.device_reg_func = device_reg;
  attr.device_dereg_func = device_dereg;
  if (UDREG_CacheCreate(&attr) != UDREG_RC_SUCCESS) die("UDREG_CacheCreate failed");
  udreg_cache_handle_t cache = nullptr;
  if (UDREG_CacheAccess("udreg_bench", &cache) != UDREG_RC_SUCCESS) die("UDREG_CacheAccess failed");

  // One page per entry, every other page, so no entry covers its neighbour's range.
  auto* area = static_cast<char*>(
      mmap(nullptr, 2 * uint64_t(max_n) * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* miss_area = static_cast<char*>(
      mmap(nullptr, 2 * uint64_t(opt.misses) * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (area == MAP_FAILED || miss_area == MAP_FAILED) die("mmap failed");
  std::memset(area, 1, 2 * uint64_t(max_n) * kPage);
  std::memset(miss_area, 1, 2 * uint64_t(opt.misses) * kPage);
  auto page = [&](uint32_t i) { return area + 2 * uint64_t(i) * kPage; };

  if (!opt.csv) std::printf("%-10s %8s %12s  %s\n", "what", "entries", "value", "unit");
  std::mt19937 rng(42);
  std::vector<udreg_entry_t*> held(opt.batch);
  uint32_t live = 0;
  double hit_at_max = 0;
  for (uint32_t n : opt.sizes) {
    for (; live < n; ++live) {  // grow the cache to n entries (misses, not timed)
      udreg_entry_t* e = nullptr;
      if (UDREG_Register(cache, page(live), kPage, &e) != UDREG_RC_SUCCESS) die("filling the cache failed");
      UDREG_DecrRefcount(cache, e);
    }
    uint64_t hits_before = 0;
    UDREG_GetStat(cache, UDREG_STAT_CACHE_HIT, &hits_before);
    std::vector<double> per_hit, per_release;
    std::vector<uint32_t> idx(opt.batch);
    for (uint32_t b = 0; b < opt.batches; ++b) {
      for (auto& i : idx) i = uint32_t(rng() % n);
      double t0 = now_ns();
      for (uint32_t k = 0; k < opt.batch; ++k) UDREG_Register(cache, page(idx[k]) + 64, 256, &held[k]);
      double t1 = now_ns();
      for (uint32_t k = 0; k < opt.batch; ++k) UDREG_DecrRefcount(cache, held[k]);
      double t2 = now_ns();
      per_hit.push_back((t1 - t0) / opt.batch);
      per_release.push_back((t2 - t1) / opt.batch);
    }
    uint64_t hits_after = 0;
    UDREG_GetStat(cache, UDREG_STAT_CACHE_HIT, &hits_after);
    if (hits_after - hits_before != uint64_t(opt.batch) * opt.batches) die("lookups that should hit did not");
    double h = median(per_hit);
    report("hit", n, h, "ns");
    report("release", n, median(per_release), "ns");
    if (n == max_n) hit_at_max = h;
  }

  // Misses against the full cache: every one a real registration.
  std::vector<double> per_miss;
  uint64_t regs_before = g_regs;
  for (uint32_t i = 0; i < opt.misses; ++i) {
    udreg_entry_t* e = nullptr;
    char* p = miss_area + 2 * uint64_t(i) * kPage;
    double t0 = now_ns();
    udreg_return_t rc = UDREG_Register(cache, p, kPage, &e);
    double t1 = now_ns();
    if (rc != UDREG_RC_SUCCESS) die("a miss failed");
    per_miss.push_back(t1 - t0);
    UDREG_Unregister(cache, e);
  }
  if (g_regs - regs_before != opt.misses) die("misses did not all register");
  double miss = median(per_miss);
  report("miss", max_n, miss / 1000.0, "us");

  // GNI_MemRegister alone, the device part of a miss.
  std::vector<double> per_direct;
  for (uint32_t i = 0; i < opt.misses; ++i) {
    gni_mem_handle_t h;
    char* p = miss_area + 2 * uint64_t(i) * kPage;
    double t0 = now_ns();
    gni_return_t rc = GNI_MemRegister(g_nic, uint64_t(p), kPage, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &h);
    double t1 = now_ns();
    if (rc != GNI_RC_SUCCESS) die("GNI_MemRegister failed");
    per_direct.push_back(t1 - t0);
    GNI_MemDeregister(g_nic, &h);
  }
  report("direct", 0, median(per_direct) / 1000.0, "us");
  report("ratio", max_n, miss / hit_at_max, "miss/hit");

  UDREG_CacheRelease(cache);
  UDREG_CacheDestroy(cache);
  if (g_regs != g_deregs) die("registrations leaked");
  return 0;
}
