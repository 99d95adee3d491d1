// One nicemu-run job: N rank processes placed in contiguous blocks over K emulated nodes,
// their PMI server, their tagged output, and the teardown rule — the first failure (a rank
// exiting non-zero or killed, PMI_Abort, a signal to the launcher, the timeout) ends the
// job: SIGTERM to every remaining rank, SIGKILL 2 s later.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nicemu::run {

class SignalPipe;

// The uGNI side of the job; absent under --no-nic.
struct NicEnv {
  std::vector<uint32_t> node_addrs;  // NIC address of each node, by node index
  uint8_t ptag = 0;
  uint32_t cookie = 0;
  std::string rundir;
  std::vector<std::string> node_rundirs;  // --fabric udp: each node's own run directory
};

struct JobConfig {
  int np = 1;
  int nodes = 1;
  int ranks_per_node = 0;  // 0: blocks of equal size; else fill each node with this many (aprun -N)
  std::vector<std::string> command;  // program and its arguments
  bool tag_output = true;
  bool pmi_over_tcp = false;  // PMI_PORT + PMI_ID instead of an inherited PMI_FD
  double timeout_s = 0;       // 0: none
  std::optional<NicEnv> nic;
};

// Exit statuses of the launcher besides the ranks' own.
inline constexpr int kExitTimeout = 124;       // --timeout expired (as timeout(1))
inline constexpr int kExitNotFound = 127;      // the program cannot be executed
inline constexpr int kExitLaunchFailure = 1;   // setup failed, or a PMI barrier deadlocked

// Runs the job to its end and returns the launcher's exit status: 0 if every rank exited
// 0, else the status of the first failure (128+N for a signal N).
int run_job(const JobConfig& cfg, SignalPipe& signals);

}  // namespace nicemu::run
