// reg_bench: what a registration costs, next to what the kernel's own pin and unpin of the
// same pages cost, in the same run (issue 37, docs/performance.md).
//
//   gni    GNI_MemRegister + GNI_MemDeregister of a range (4 KiB .. 1 MiB by default)
//   mlock  mlock + munlock of the same range (the kernel pinning and unpinning its pages)
//   udreg  with --udreg: a uDREG miss (UDREG_Register of a range no entry covers, then
//          UDREG_Unregister with the entry dropped: the cache's lookup, insertion and
//          invalidation source on top of GNI_MemRegister/GNI_MemDeregister)
//
// With --procs 1,2,4,8, that many processes of the node register at once (each its own CDM
// of one job, each its own buffer), as in the first seed's Figure 6. Each process runs
// --rounds rounds; a round times --iters pairs of each kind in turn (gni, mlock[, udreg]),
// so the kinds are interleaved and share the host's noise. Figures: per pair, the median over
// every process's rounds, and the 10th and 90th percentiles (the spread).
//
// The daemon is --socket, else $NICEMU_SOCKET; bench/run-reg starts a private one.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "gni_pub.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/ctl/ctl_client.h"
#include "udreg_pub.h"

namespace {

struct Options {
  std::vector<uint64_t> sizes = {4096, 65536, 1 << 20};
  std::vector<int> procs = {1, 2, 4, 8};
  int rounds = 30;
  int iters = 50;
  bool udreg = false;
  bool csv = false;
  std::string socket;
};
Options opt;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "reg_bench: %s\n", what.c_str());
  std::exit(2);
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

gni_nic_handle_t g_nic = nullptr;

void attach(uint32_t ptag, uint32_t cookie, uint32_t inst) {
  gni_cdm_handle_t cdm = nullptr;
  uint32_t addr = 0;
  if (GNI_CdmCreate(inst, uint8_t(ptag), cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm) != GNI_RC_SUCCESS ||
      GNI_CdmAttach(cdm, 0, &addr, &g_nic) != GNI_RC_SUCCESS)
    die("cannot attach to the NIC at " + opt.socket);
}

void* device_reg(void* addr, uint64_t len, void*) {
  auto* h = new gni_mem_handle_t;
  if (GNI_MemRegister(g_nic, uint64_t(addr), len, nullptr, GNI_MEM_READWRITE, uint32_t(-1), h) != GNI_RC_SUCCESS) {
    delete h;
    return UDREG_DEVICE_REG_FAILED;
  }
  return h;
}
uint32_t device_dereg(void* data, void*) {
  auto* h = static_cast<gni_mem_handle_t*>(data);
  gni_return_t rc = GNI_MemDeregister(g_nic, h);
  delete h;
  return rc == GNI_RC_SUCCESS ? 0 : 1;
}

enum Kind { kGni, kMlock, kUdreg, kKinds };
const char* const kNames[kKinds] = {"gni", "mlock", "udreg"};

// One process's rounds: per size and kind, the time per pair of each round (µs).
std::vector<double> run_child(uint32_t ptag, uint32_t cookie, uint32_t inst) {
  attach(ptag, cookie, inst);
  const uint64_t max = *std::max_element(opt.sizes.begin(), opt.sizes.end());
  // A few buffers, so uDREG misses find no entry; pages touched once, as an application's are.
  const int kBufs = 4;
  auto* mem = static_cast<char*>(mmap(nullptr, max * kBufs, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) die("mmap");
  std::memset(mem, 1, max * kBufs);
  udreg_cache_handle_t cache = nullptr;
  if (opt.udreg) {
    udreg_cache_attr_t a{};
    std::snprintf(a.cache_name, sizeof a.cache_name, "reg_bench");
    a.max_entries = 16;
    a.modes = 0;
    a.device_reg_func = device_reg;
    a.device_dereg_func = device_dereg;
    if (UDREG_CacheCreate(&a) != UDREG_RC_SUCCESS || UDREG_CacheAccess(a.cache_name, &cache) != UDREG_RC_SUCCESS)
      die("uDREG cache");
  }
  std::vector<double> out;
  for (uint64_t size : opt.sizes)
    for (int r = 0; r < opt.rounds; ++r)
      for (int k = 0; k < kKinds; ++k) {
        if (k == kUdreg && !opt.udreg) continue;
        double t0 = now_us();
        for (int i = 0; i < opt.iters; ++i) {
          char* p = mem + (i % kBufs) * max;
          if (k == kGni) {
            gni_mem_handle_t h;
            if (GNI_MemRegister(g_nic, uint64_t(p), size, nullptr, GNI_MEM_READWRITE, uint32_t(-1), &h) !=
                    GNI_RC_SUCCESS ||
                GNI_MemDeregister(g_nic, &h) != GNI_RC_SUCCESS)
              die("GNI_MemRegister/GNI_MemDeregister failed");
          } else if (k == kMlock) {
            if (mlock(p, size) != 0 || munlock(p, size) != 0) die(std::string("mlock: ") + strerror(errno));
          } else {
            udreg_entry_t* e = nullptr;
            if (UDREG_Register(cache, p, size, &e) != UDREG_RC_SUCCESS) die("UDREG_Register");
            if (UDREG_Unregister(cache, e) != UDREG_RC_SUCCESS) die("UDREG_Unregister");
            UDREG_Evict(cache);  // the entry goes now, so the next one is a miss
          }
        }
        out.push_back((now_us() - t0) / opt.iters);
      }
  return out;
}

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"reg_bench: GNI_MemRegister+GNI_MemDeregister next to mlock+munlock, 1..8 processes at once"};
  app.add_option("--sizes", opt.sizes, "bytes per registration (default 4096,65536,1048576)")->delimiter(',');
  app.add_option("--procs", opt.procs, "processes registering at once (default 1,2,4,8)")->delimiter(',');
  app.add_option("--rounds", opt.rounds, "rounds per size (default 30)");
  app.add_option("--iters", opt.iters, "pairs of each kind per round (default 50)");
  app.add_flag("--udreg", opt.udreg, "also time a uDREG miss");
  app.add_flag("--csv", opt.csv, "print procs,size,kind,median_us,p10_us,p90_us lines");
  app.add_option("--socket", opt.socket, "control socket of the nicemu daemon (default: $NICEMU_SOCKET)");
  CLI11_PARSE(app, argc, argv);
  if (opt.socket.empty()) {
    if (const char* s = std::getenv("NICEMU_SOCKET")) opt.socket = s;
  }
  if (opt.socket.empty()) die("no daemon: --socket or NICEMU_SOCKET");
  if (opt.sizes.empty() || opt.procs.empty() || opt.rounds <= 0 || opt.iters <= 0) die("empty measurement");
  setenv("NICEMU_SOCKET", opt.socket.c_str(), 1);

  nicemu::abi::ctl::Cred req{};
  req.h.op = uint16_t(nicemu::abi::ctl::Op::kCredIssue);
  req.uid = getuid();
  nicemu::abi::ctl::CredReply rep{};
  {
    nicemu::ctl::Connection c;
    if (!c.connect(opt.socket) || !c.call(req, rep) || rep.r.rc != 0) die("cannot obtain a credential");
  }
  if (opt.csv)
    std::printf("procs,size,kind,median_us,p10_us,p90_us\n");
  else
    std::printf("%5s %8s %6s %10s %10s %10s %8s\n", "procs", "bytes", "kind", "median_us", "p10_us", "p90_us",
                "vs_mlock");
  const int kinds = opt.udreg ? 3 : 2;
  for (int np : opt.procs) {
    std::vector<int> fds;
    std::vector<pid_t> kids;
    int go[2];
    if (pipe(go) != 0) die("pipe");
    for (int p = 0; p < np; ++p) {
      int fd[2];
      if (pipe(fd) != 0) die("pipe");
      pid_t k = fork();
      if (k == 0) {
        close(fd[0]);
        close(go[1]);
        char b;
        if (read(go[0], &b, 1) != 1) _exit(3);  // all start together
        std::vector<double> v = run_child(rep.ptag, rep.cookie, 100 + uint32_t(p));
        size_t bytes = v.size() * sizeof(double);
        if (write(fd[1], v.data(), bytes) != static_cast<ssize_t>(bytes)) _exit(4);
        _exit(0);
      }
      close(fd[1]);
      fds.push_back(fd[0]);
      kids.push_back(k);
    }
    close(go[0]);
    for (int p = 0; p < np; ++p)
      if (write(go[1], "g", 1) != 1) die("start");
    close(go[1]);
    const size_t per_child = opt.sizes.size() * size_t(opt.rounds) * size_t(kinds);
    std::vector<std::vector<double>> samples(opt.sizes.size() * kinds);
    for (int fd : fds) {
      std::vector<double> v(per_child);
      size_t got = 0, want = per_child * sizeof(double);
      while (got < want) {
        ssize_t n = read(fd, reinterpret_cast<char*>(v.data()) + got, want - got);
        if (n <= 0) die("a registering process failed");
        got += size_t(n);
      }
      close(fd);
      for (size_t i = 0; i < per_child; ++i) samples[(i / (size_t(opt.rounds) * kinds)) * kinds + i % kinds].push_back(v[i]);
    }
    for (pid_t k : kids) {
      int st = 0;
      waitpid(k, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("a registering process failed");
    }
    for (size_t s = 0; s < opt.sizes.size(); ++s) {
      const double mlock_med = pct(samples[s * kinds + kMlock], 0.5);
      for (int k = 0; k < kinds; ++k) {
        const auto& v = samples[s * kinds + k];
        const double med = pct(v, 0.5);
        if (opt.csv)
          std::printf("%d,%llu,%s,%.3f,%.3f,%.3f\n", np, static_cast<unsigned long long>(opt.sizes[s]), kNames[k], med,
                      pct(v, 0.1), pct(v, 0.9));
        else
          std::printf("%5d %8llu %6s %10.2f %10.2f %10.2f %8.2f\n", np, static_cast<unsigned long long>(opt.sizes[s]),
                      kNames[k], med, pct(v, 0.1), pct(v, 0.9), med / mlock_med);
      }
    }
    std::fflush(stdout);
  }
  return 0;
}
