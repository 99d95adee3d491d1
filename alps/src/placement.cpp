// libalpsutil: alps_get_placement_info from the job's environment (job_env.h). ALPS reads
// a placement file written at launch; here the launcher's block placement of ranks over
// the emulated nodes is recomputed (nicemu/common/placement.h, which nicemu-run uses).
#include <netinet/in.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "alps/libalpsutil.h"
#include "job_env.h"

namespace {

template <typename T>
T* alloc_array(size_t n) {
  return static_cast<T*>(std::calloc(std::max<size_t>(n, 1), sizeof(T)));
}

}  // namespace

extern "C" int alps_get_placement_info(uint64_t apid, alpsAppLayout_t* appLayout, int** placementList,
                                       int** targetNids, int** targetPes, int** targetLen,
                                       struct in_addr** targetIps, int** startPe, int** totalPes,
                                       int** nodePes, int** peCpus) {
  using namespace nicemu::alps;
  if (!appLayout) {
    errno = EINVAL;
    return -1;
  }
  JobEnv job;
  std::string error;
  if (!read_job_env(job, error, true)) {
    std::fprintf(stderr, "nicemu libalpsutil: %s\n", error.c_str());
    errno = error.rfind("no job credential", 0) == 0 ? ENOENT : EINVAL;
    return -1;
  }
  if (apid != job.apid) {
    errno = ENOENT;  // ALPS finds no placement file for another application
    return -1;
  }
  const int nnodes = static_cast<int>(job.nodes.size());
  int first = -1, here = 0, most = 0;
  {
    int count_on = 0, cur = -1;
    for (int r = 0; r < job.size; ++r) {
      int n = nicemu::placement::node_of_rank(r, job.size, nnodes, job.per_node);
      if (n != cur) {
        cur = n;
        count_on = 0;
      }
      ++count_on;
      most = std::max(most, count_on);
      if (n == job.node_index) {
        if (first < 0) first = r;
        ++here;
      }
    }
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpu_mask = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < 31; ++c)
      if (CPU_ISSET(c, &set)) cpu_mask |= 1 << c;

  alpsAppLayout_t layout{};
  layout.totLength = sizeof layout;
  layout.apid = job.apid;
  layout.controlNid = -1;
  layout.firstPe = first;
  layout.numPesHere = here;
  layout.cpuMask = cpu_mask;
  layout.peDepth = 1;
  layout.cmdNumber = 0;
  layout.numPes = job.size;
  layout.numTargets = 0;
  layout.numCmds = 1;

  // Allocate everything first so that a failure leaves no output half-written.
  int* placement = placementList ? alloc_array<int>(job.size) : nullptr;
  int* t_nids = targetNids ? alloc_array<int>(0) : nullptr;
  int* t_pes = targetPes ? alloc_array<int>(0) : nullptr;
  int* t_len = targetLen ? alloc_array<int>(0) : nullptr;
  in_addr* t_ips = targetIps ? alloc_array<in_addr>(0) : nullptr;
  int* s_pe = startPe ? alloc_array<int>(1) : nullptr;
  int* t_pe = totalPes ? alloc_array<int>(1) : nullptr;
  int* n_pe = nodePes ? alloc_array<int>(1) : nullptr;
  int* p_cpu = peCpus ? alloc_array<int>(1) : nullptr;
  if ((placementList && !placement) || (targetNids && !t_nids) || (targetPes && !t_pes) ||
      (targetLen && !t_len) || (targetIps && !t_ips) || (startPe && !s_pe) || (totalPes && !t_pe) ||
      (nodePes && !n_pe) || (peCpus && !p_cpu)) {
    for (void* p : {static_cast<void*>(placement), static_cast<void*>(t_nids), static_cast<void*>(t_pes),
                    static_cast<void*>(t_len), static_cast<void*>(t_ips), static_cast<void*>(s_pe),
                    static_cast<void*>(t_pe), static_cast<void*>(n_pe), static_cast<void*>(p_cpu)})
      std::free(p);
    errno = ENOMEM;
    return -1;
  }
  if (placement)
    for (int r = 0; r < job.size; ++r)
      placement[r] = job.nodes[nicemu::placement::node_of_rank(r, job.size, nnodes, job.per_node)];
  if (s_pe) s_pe[0] = 0;
  if (t_pe) t_pe[0] = job.size;
  if (n_pe) n_pe[0] = most;
  if (p_cpu) p_cpu[0] = 1;

  *appLayout = layout;
  if (placementList) *placementList = placement;
  if (targetNids) *targetNids = t_nids;
  if (targetPes) *targetPes = t_pes;
  if (targetLen) *targetLen = t_len;
  if (targetIps) *targetIps = t_ips;
  if (startPe) *startPe = s_pe;
  if (totalPes) *totalPes = t_pe;
  if (nodePes) *nodePes = n_pe;
  if (peCpus) *peCpus = p_cpu;
  return 1;
}
