// Where the ranks of the job run: the node of every rank (from the KVS key
// PMI_process_mapping) and every node's NIC address (from nicemu_nic_addrs, set by
// nicemu-run). Fetched once, on first use, and kept for the life of the process: the
// array handed out by PMI_Get_nidlist_ptr must stay valid.
#pragma once
#include <string>
#include <vector>

namespace nicemu::pmi {

struct Layout {
  std::vector<int> nid_of_rank;    // indexed by rank
  std::vector<int> nic_addrs;      // indexed by node id; empty when the key is absent
  std::vector<int> local_ranks;    // ranks on this rank's node, ascending
  int my_nid = 0;
  int num_nodes = 1;               // highest node id + 1 (at least the NIC list's length)
};

// NIC address of node `nid`: from nicemu_nic_addrs when nicemu-run set it, else what the
// node's first rank published (Client::publish_nic_addr, visible after a barrier), else
// the nid itself.
int node_nic_addr(const Layout& l, int nid);

// The layout, loading it on first call. nullptr with *rc set when PMI is not initialized
// or the server cannot be reached. A missing or malformed PMI_process_mapping means one
// node holding every rank.
const Layout* get_layout(int* rc);

// "3,4,5" -> ints in [min, INT_MAX] into `out`; false on an empty or malformed entry (the
// empty string included).
bool parse_int_list(const std::string& s, long min, std::vector<int>& out);

}  // namespace nicemu::pmi
