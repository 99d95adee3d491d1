// The MPICH "vector" process mapping served under the KVS key PMI_process_mapping by Hydra
// and nicemu-run (shared/spec/pmi-api.md §4.2): `(vector,(start,nodes,ranks_per_node),...)`.
// Each block gives `ranks_per_node` consecutive ranks to each of the nodes start ..
// start+nodes-1 in turn; when the blocks describe fewer ranks than the job has, the list
// is applied again from the top (how MPICH reads cyclic layouts).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nicemu::pmi::wire {

struct MappingBlock {
  int start_node = 0;
  int nodes = 0;
  int ranks_per_node = 0;
  bool operator==(const MappingBlock&) const = default;
};

// Parses the vector text (spaces tolerated). nullopt when malformed.
std::optional<std::vector<MappingBlock>> parse_process_mapping(std::string_view text);

// Node index of each of the `size` ranks; nullopt if the blocks describe no rank at all.
std::optional<std::vector<int>> map_ranks_to_nodes(const std::vector<MappingBlock>& blocks,
                                                   int size);

// The shortest vector text describing `node_of_rank` (any layout; contiguous blocks give
// one entry per run of equally loaded consecutive nodes).
std::string format_process_mapping(const std::vector<int>& node_of_rank);

}  // namespace nicemu::pmi::wire
