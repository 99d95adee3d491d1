// cred_latency RUNDIR UID [N]: the time of what the SPANK plugin asks of a node's daemons,
// through the plugin's own calls (nicemu_slurm.h): nicemu_slurm_issue when a step starts,
// nicemu_slurm_revoke in the job epilog, each listing RUNDIR and connecting afresh as the
// plugin does. N pairs (default 2000) of ptag 200 with a new cookie each, as root; prints the
// median and 99th percentile of each in microseconds (docs/performance.md, *Slurm*).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <unistd.h>

#include "nicemu_slurm.h"

namespace {

bool parse_u32(const char* s, uint32_t& out) {
  char* end = nullptr;
  unsigned long v = std::strtoul(s, &end, 10);
  if (!*s || *end || v > 0xFFFFFFFFul) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

void report(const char* name, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  std::printf("%s: median %.1f us, p99 %.1f us, n %zu\n", name, us[us.size() / 2], us[us.size() * 99 / 100],
              us.size());
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t uid = 0, n = 2000;
  if (argc < 3 || argc > 4 || !parse_u32(argv[2], uid) || (argc == 4 && (!parse_u32(argv[3], n) || n == 0))) {
    std::fprintf(stderr, "usage: cred_latency RUNDIR UID [N]  (N pairs, at least 1; default 2000)\n");
    return 2;
  }
  // The plugin revokes as root, whoever holds the credential; any other user's revoke
  // is refused, and each pair would leave its grant behind.
  if (geteuid() != 0) {
    std::fprintf(stderr, "cred_latency: run as root, as the plugin runs (slurmstepd, the job epilog)\n");
    return 2;
  }
  const char* rundir = argv[1];
  std::vector<double> issue, revoke;
  char err[512];
  using clock = std::chrono::steady_clock;
  for (uint32_t i = 0; i < n; ++i) {
    nicemu_job_cred cred{200, ((128 + i % 60000) << 16) | 0x1234};
    uint32_t nic = 0;
    int revoked = 0;
    auto t0 = clock::now();
    if (nicemu_slurm_issue(rundir, uid, &cred, 5000, &nic, err, sizeof err) != 0) {
      std::fprintf(stderr, "cred_latency: issue: %s (ptag 200 must be free)\n", err);
      return 1;
    }
    auto t1 = clock::now();
    if (nicemu_slurm_revoke(rundir, &cred, 5000, &revoked, err, sizeof err) != 0 || revoked == 0) {
      std::fprintf(stderr, "cred_latency: revoke: %s\n", revoked == 0 ? "no daemon held the credential" : err);
      return 1;
    }
    auto t2 = clock::now();
    issue.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    revoke.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  report("issue (grant)", issue);
  report("revoke", revoke);
  return 0;
}
