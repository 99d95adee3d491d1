// The launcher's view of the emulated nodes of a job: finds running daemons or starts them
// (the embedded default), and obtains the job credential (ptag/cookie) from them.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nicemu::run {

struct JobCredential {
  uint8_t ptag = 0;
  uint32_t cookie = 0;
};

struct Node {
  uint32_t nic_addr = 0;
  std::string socket;
  std::string rundir;  // where its socket is (differs per node with --fabric udp)
};

class DaemonSet {
 public:
  // Uses the daemons already listening in `rundir` if there are at least `nodes` of them;
  // otherwise starts the missing ones with the `nicemu` binary found next to the running
  // executable (or in PATH). Throws std::runtime_error with context on failure.
  static std::unique_ptr<DaemonSet> start_or_find(int nodes, const std::string& rundir,
                                                  const std::string& log_level);
  // --fabric udp: starts `nodes` daemons as if each were on a host of its own — its own run
  // directory under `rundir`, reachable from the others only over UDP on loopback, with a
  // fresh cluster key and fabric map — so a job exercises the multi-host path.
  // `data`: the daemons' fabric_data setting (udp, or ofi: PUT/GET rank to rank over libfabric).
  static std::unique_ptr<DaemonSet> start_fabric(int nodes, const std::string& rundir, const std::string& log_level,
                                                 const std::string& data = "udp");
  ~DaemonSet();  // stops (SIGTERM, then waits) the daemons this set started

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::string& rundir() const { return rundir_; }

  // Issues one credential on the first node for `uid` and grants it on the others.
  JobCredential issue_credential(uid_t uid);
  void revoke_credential(const JobCredential& cred);

 private:
  std::string rundir_;
  std::vector<Node> nodes_;
  std::vector<pid_t> started_;
  struct Starting {
    pid_t pid;
    uint32_t addr;
    std::string socket;
  };
  // Forks `bin --node addr args...`; wait_up() then waits for every daemon started this way,
  // all at once (hundreds of daemons start in parallel, not one after the other).
  void spawn(const std::string& bin, uint32_t addr, const std::string& sock, const std::vector<std::string>& args);
  void wait_up();
  std::vector<Starting> starting_;
  std::string fabric_dir_;  // removed with the set
};

}  // namespace nicemu::run
