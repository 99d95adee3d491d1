// The workload-manager job a process belongs to, as libdrc (drc_get_wlm_id) and the daemon
// (DRC grants to a job) both see it: the `job_<id>` cgroup Slurm puts every task in, else
// the process's initial environment (SLURM_JOB_ID, then NICEMU_JOB_ID, which nicemu-run
// sets). Neither is a proof: any user can start a process with any environment, and a user
// with a delegated cgroup subtree (systemd's user@.service) can name a cgroup job_<id>
// (docs/security.md, DRC).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace nicemu::wlm {

struct JobId {
  uint32_t id = 0;
};

inline std::optional<uint32_t> parse_job_number(const std::string& s) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  unsigned long v = std::strtoul(s.c_str(), nullptr, 10);
  if (v == 0 || v > 0xFFFFFFFFul) return std::nullopt;
  return static_cast<uint32_t>(v);
}

inline std::optional<JobId> job_of(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  {
    std::ifstream cg(proc + "/cgroup");
    for (std::string line; std::getline(cg, line);) {
      // "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0" (v2) or
      // "4:memory:/slurm/uid_1000/job_42/step_0" (v1).
      for (size_t at = line.find("/job_"); at != std::string::npos; at = line.find("/job_", at + 1)) {
        size_t end = line.find('/', at + 1);
        auto id = parse_job_number(line.substr(at + 5, end == std::string::npos ? std::string::npos : end - at - 5));
        if (id) return JobId{*id};
      }
    }
  }
  std::ifstream env(proc + "/environ", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
  for (const char* name : {"SLURM_JOB_ID=", "NICEMU_JOB_ID="}) {
    const std::string key = name;
    for (size_t at = 0; at < all.size();) {
      size_t end = all.find('\0', at);
      if (end == std::string::npos) end = all.size();
      if (all.compare(at, key.size(), key) == 0)
        if (auto id = parse_job_number(all.substr(at + key.size(), end - at - key.size()))) return JobId{*id};
      at = end + 1;
    }
  }
  return std::nullopt;
}

}  // namespace nicemu::wlm
