// Reading the daemons' counter pages (nicemu/abi/counters_layout.h) without talking to the
// daemons: each page is mapped read-only, validated, and copied into a snapshot.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nicemu::tools {

struct CdmSnapshot {
  uint64_t attach_id = 0;
  uint32_t pid = 0, uid = 0, inst_id = 0, ptag = 0, cookie = 0;
  uint64_t attached_unix_ns = 0;
  uint64_t refreshed_ns = 0;     // CLOCK_MONOTONIC of the daemon's copy
  std::vector<uint64_t> v;       // indexed by abi::counters::cdm::Counter
};

struct LinkSnapshot {
  uint32_t peer_addr = 0;
  std::vector<uint64_t> v;       // indexed by abi::counters::link::Counter
};

struct NodeSnapshot {
  std::string page;              // file the snapshot was read from
  uint32_t nic_addr = 0;
  uint32_t daemon_pid = 0;
  bool running = false;          // page live and its daemon process exists
  uint64_t started_unix_ns = 0;
  uint64_t refreshed_ns = 0;     // CLOCK_MONOTONIC of the last refresh round
  std::vector<uint64_t> node;    // indexed by abi::counters::node::Counter
  std::vector<uint64_t> totals;  // indexed by abi::counters::cdm::Counter
  std::vector<CdmSnapshot> cdms;
  std::vector<LinkSnapshot> links;
};

// Reads the page at `path`; throws CtlError naming the file and what is wrong with it.
// Counters the writer has and this reader does not know are left out; counters this
// reader knows and the writer does not have read as 0.
NodeSnapshot read_counter_page(const std::string& path);

}  // namespace nicemu::tools
