// What a job's environment says about this process, as ALPS would report it: the GNI
// credential of every device and the placement of the ranks over the emulated nodes.
// Shared by libalpslli (apid, credentials) and libalpsutil (placement).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nicemu/common/placement.h"

namespace nicemu::alps {

struct GniDevice {
  uint32_t device_id = 0;
  int32_t local_addr = 0;
  uint32_t cookie = 0;
  uint32_t ptag = 0;
};

struct JobEnv {
  std::vector<GniDevice> devices;  // PMI_GNI_* (colon-separated per device)
  uint64_t apid = 0;               // derived from the first device's credential
  int rank = 0;                    // this process's PE
  int size = 1;                    // PEs of the job
  std::vector<int32_t> nodes;      // NIC addresses of the job's nodes, in placement order
  int node_index = 0;              // this rank's node in `nodes`
  int per_node = 0;                // NICEMU_JOB_RANKS_PER_NODE (aprun -N); 0: equal blocks
};

// Reads the environment: the credential always, the placement (rank, size, nodes) when
// `placement` is set. Returns false with `error` set when there is no credential (no
// PMI_GNI_PTAG / PMI_GNI_COOKIE: not started by a nicemu launcher) or the variables read
// contradict each other.
bool read_job_env(JobEnv& job, std::string& error, bool placement);

// The apid of a credential: the job's identity, the same in all its ranks.
inline uint64_t apid_of(uint32_t ptag, uint32_t cookie) {
  return (uint64_t{cookie} << 8) | (ptag & 0xFF);
}

}  // namespace nicemu::alps
