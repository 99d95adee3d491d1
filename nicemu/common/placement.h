// Where a job's ranks sit: the one block placement of ranks over emulated nodes. nicemu-run
// starts each rank on the node it names, libalpsutil reports the same layout
// (alps_get_placement_info), and tools/lib/nicemu-rank asks nicemu-run for it
// (`nicemu-run --place RANK`), so the three agree by construction.
// Header-only: the libraries link nothing for it.
#pragma once
#include <algorithm>

namespace nicemu::placement {

// Node index of `rank` when `np` ranks are spread over `nodes` nodes in contiguous blocks
// whose sizes differ by at most one, or, with `per_node` > 0, in blocks of `per_node`
// ranks each, the last node taking the rest (aprun -N, nicemu-run --ranks-per-node).
// Needs 0 <= rank < np and nodes >= 1.
inline int node_of_rank(int rank, int np, int nodes, int per_node = 0) {
  if (per_node > 0) return std::min(rank / per_node, nodes - 1);
  // 64-bit product: rank * nodes overflows int from 2^20 ranks on 2^11 nodes.
  return static_cast<int>(static_cast<long long>(rank) * nodes / np);
}

}  // namespace nicemu::placement
