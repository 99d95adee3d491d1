// The job's facts from the launcher's environment (docs/launchers.md, "ALPS"):
//   credential  PMI_GNI_PTAG, PMI_GNI_COOKIE, PMI_GNI_DEV_ID, PMI_GNI_LOC_ADDR (colon lists)
//   rank        ALPS_APP_PE, PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID
//   size        PMI_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
//   nodes       NICEMU_JOB_NODES (comma list of NIC addresses the ranks are placed
//               over in blocks: nicemu/common/placement.h), else the one node
//               PMI_GNI_LOC_ADDR / NICEMU_NODE
#include "job_env.h"

#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace nicemu::alps {
namespace {

const char* first_env(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v && *v) return v;
  return nullptr;
}

bool parse_u64(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  std::string str(s);
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(str.c_str(), &end, 0);
  if (errno != 0 || end == str.c_str() || *end != '\0' || str[0] == '-') return false;
  out = v;
  return true;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return parts;
}

// A colon list of numbers, one per device; `count` entries expected (a single value is
// used for every device, as launchers give one device id for all).
bool parse_list(const char* name, const char* value, size_t count, std::vector<uint64_t>& out,
                std::string& error) {
  out.clear();
  for (std::string_view part : split(value, ':')) {
    uint64_t v = 0;
    if (!parse_u64(part, v)) {
      error = std::string(name) + "=" + value + " is not a colon-separated list of numbers";
      return false;
    }
    out.push_back(v);
  }
  if (count != 0 && out.size() == 1 && count > 1) out.resize(count, out[0]);
  if (count != 0 && out.size() != count) {
    error = std::string(name) + "=" + value + " names " + std::to_string(out.size()) +
            " devices, PMI_GNI_PTAG " + std::to_string(count);
    return false;
  }
  return true;
}

bool parse_int(const char* name, const char* value, int& out, std::string& error) {
  uint64_t v = 0;
  if (!parse_u64(value, v) || v > 0x7FFFFFFF) {
    error = std::string(name) + "=" + value + " is not a rank or size";
    return false;
  }
  out = static_cast<int>(v);
  return true;
}

}  // namespace

bool read_job_env(JobEnv& job, std::string& error, bool placement) {
  job = JobEnv{};
  const char* ptag_s = std::getenv("PMI_GNI_PTAG");
  const char* cookie_s = std::getenv("PMI_GNI_COOKIE");
  if (!ptag_s || !cookie_s) {
    error = "no job credential: PMI_GNI_PTAG and PMI_GNI_COOKIE are not set (start the job with "
            "nicemu-run, or export the --daemons-only environment)";
    return false;
  }
  std::vector<uint64_t> ptags, cookies, dev_ids, addrs;
  if (!parse_list("PMI_GNI_PTAG", ptag_s, 0, ptags, error)) return false;
  if (!parse_list("PMI_GNI_COOKIE", cookie_s, ptags.size(), cookies, error)) return false;
  const char* dev_s = std::getenv("PMI_GNI_DEV_ID");
  if (!parse_list("PMI_GNI_DEV_ID", dev_s ? dev_s : "0", ptags.size(), dev_ids, error)) return false;
  const char* addr_s = first_env({"PMI_GNI_LOC_ADDR", "NICEMU_NODE"});
  if (!parse_list("PMI_GNI_LOC_ADDR", addr_s ? addr_s : "0", ptags.size(), addrs, error)) return false;
  for (size_t i = 0; i < ptags.size(); ++i) {
    if (ptags[i] > 0xFF || cookies[i] > 0xFFFFFFFFu || addrs[i] > 0x7FFFFFFF) {
      error = "PMI_GNI_* values out of range (ptag 8 bits, cookie 32 bits)";
      return false;
    }
    job.devices.push_back({static_cast<uint32_t>(dev_ids[i]), static_cast<int32_t>(addrs[i]),
                           static_cast<uint32_t>(cookies[i]), static_cast<uint32_t>(ptags[i])});
  }
  job.apid = apid_of(job.devices[0].ptag, job.devices[0].cookie);
  if (!placement) return true;

  const char* rank_s = first_env({"ALPS_APP_PE", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"});
  const char* size_s = first_env({"PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"});
  if (rank_s && !parse_int("rank", rank_s, job.rank, error)) return false;
  if (size_s && !parse_int("size", size_s, job.size, error)) return false;
  if (!rank_s && !size_s) {
    job.rank = 0;  // no launcher: a singleton, as libpmi treats it
    job.size = 1;
  } else if (!size_s || job.size < 1 || job.rank >= job.size) {
    error = "rank " + std::string(rank_s ? rank_s : "?") + " of size " + std::string(size_s ? size_s : "?") +
            ": the launcher's rank and size variables do not fit";
    return false;
  }

  if (const char* nodes_s = std::getenv("NICEMU_JOB_NODES"); nodes_s && *nodes_s) {
    for (std::string_view part : split(nodes_s, ',')) {
      uint64_t v = 0;
      if (!parse_u64(part, v) || v > 0x7FFFFFFF) {
        error = std::string("NICEMU_JOB_NODES=") + nodes_s + " is not a comma-separated list of node addresses";
        return false;
      }
      job.nodes.push_back(static_cast<int32_t>(v));
    }
    // More nodes than ranks: the placement uses the first `size` (nicemu-run never starts
    // an empty node's ranks; the block formula already leaves none empty when nodes <= size).
    if (const char* per_s = std::getenv("NICEMU_JOB_RANKS_PER_NODE"); per_s && *per_s) {
      uint64_t v = 0;
      if (!parse_u64(per_s, v) || v < 1 || v > 0x7FFFFFFF ||
          static_cast<uint64_t>(job.size) > v * job.nodes.size()) {
        error = std::string("NICEMU_JOB_RANKS_PER_NODE=") + per_s + " does not place " + std::to_string(job.size) +
                " ranks on the " + std::to_string(job.nodes.size()) + " nodes of NICEMU_JOB_NODES";
        return false;
      }
      job.per_node = static_cast<int>(v);
    }
    job.node_index = placement::node_of_rank(job.rank, job.size, static_cast<int>(job.nodes.size()), job.per_node);
    int32_t mine = job.devices[0].local_addr;
    if (job.nodes[job.node_index] != mine) {
      error = "rank " + std::to_string(job.rank) + " of " + std::to_string(job.size) + " is placed on node " +
              std::to_string(job.nodes[job.node_index]) + " of NICEMU_JOB_NODES=" + nodes_s +
              " but its PMI_GNI_LOC_ADDR is " + std::to_string(mine) +
              " (ranks must be placed in blocks, as nicemu-run and tools/lib/nicemu-rank do)";
      return false;
    }
  } else {
    job.nodes.push_back(job.devices[0].local_addr);  // every rank on this one node
    job.node_index = 0;
  }
  return true;
}

}  // namespace nicemu::alps
