// librca over nicemu's emulated torus (nicemu/common/torus.h): the node is the NIC
// address the launcher gave this process, the machine is the job's nodes (or NICEMU_TORUS).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "nicemu/common/params.h"
#include "nicemu/common/torus.h"
#include "rca_lib.h"

namespace {

// First number of a colon/comma list ("5" or "5:5"), nullopt if absent or malformed.
std::optional<uint64_t> first_number(const char* s) {
  if (!s || !*s) return std::nullopt;
  std::string_view v(s);
  v = v.substr(0, v.find_first_of(":,"));
  return nicemu::params::parse_uint_text(v);
}

std::optional<uint64_t> my_addr() {
  if (auto a = first_number(std::getenv("PMI_GNI_LOC_ADDR"))) return a;
  return first_number(std::getenv(nicemu::params::param("client_node").env.data()));
}

// Highest NIC address of the job + 1: the job's nodes as nicemu-run lists them
// (NICEMU_JOB_NODES), else this node's address + 1.
uint64_t machine_nodes() {
  uint64_t highest = 0;
  bool any = false;
  if (const char* list = std::getenv("NICEMU_JOB_NODES"); list && *list) {
    std::string_view v(list);
    while (!v.empty()) {
      size_t end = v.find(',');
      if (auto a = nicemu::params::parse_uint_text(v.substr(0, end))) {
        highest = std::max(highest, *a);
        any = true;
      }
      v = end == std::string_view::npos ? std::string_view{} : v.substr(end + 1);
    }
  }
  if (auto a = my_addr(); a && (!any || *a > highest)) {
    highest = *a;
    any = true;
  }
  return any ? highest + 1 : 1;
}

// The torus, or nullopt (reported once on stderr) when NICEMU_TORUS is malformed.
std::optional<nicemu::torus::Dims> dims() {
  std::string error;
  auto d = nicemu::torus::from_env(machine_nodes(), &error);
  if (!d) {
    static std::once_flag said;  // the queries may come from several threads
    std::call_once(said, [&] { std::fprintf(stderr, "librca: %s\n", error.c_str()); });
  }
  return d;
}

rs_node_t describe(uint64_t nid) {
  rs_node_t n;
  n.rs_node_flat = 0;
  n.rs_node_s._node_state = RS_CS_READY;
  n.rs_node_s._node_id = nid & 0xFFFF;
  n.rs_node_s._node_modcomp = nid % 4;
  n.rs_node_s._node_link = nid % 4 / 2;
  n.rs_node_s._node_slot = nid / 4 % 8;
  n.rs_node_s._node_cage = nid / 32 % 3;
  n.rs_node_s._node_x = nid / 96 % 16;
  n.rs_node_s._node_row = nid / (96 * 16) % 256;
  return n;
}

}  // namespace

extern "C" {

int rca_get_nodeid(rs_node_t* node) {
  auto a = my_addr();
  if (!node || !a || *a > 0xFFFF) return -1;
  *node = describe(*a);
  return 0;
}

int rca_get_meshcoord(uint16_t nid, rca_mesh_coord_t* xyz) {
  if (!xyz) return -1;
  auto d = dims();
  if (!d) return -1;
  auto c = nicemu::torus::coord_of(*d, nid);
  if (!c) return -1;
  *xyz = {static_cast<uint16_t>(c->x), static_cast<uint16_t>(c->y), static_cast<uint16_t>(c->z)};
  return 0;
}

int rca_get_max_dimension(rca_mesh_coord_t* max) {
  if (!max) return -1;
  auto d = dims();
  if (!d) return -1;
  auto m = nicemu::torus::max_coord(*d);
  *max = {static_cast<uint16_t>(m.x), static_cast<uint16_t>(m.y), static_cast<uint16_t>(m.z)};
  return 0;
}

int rca_get_meshtopology(int* topology_class) {
  if (!topology_class) return -1;
  *topology_class = RCA_TOPO_TORUS3D;
  return 0;
}

int rca_get_sysnodes(rs_node_array_t* nodes) {
  if (!nodes) return -1;
  auto d = dims();
  if (!d) return -1;
  // Ids are 16 bits: a larger torus lists its first 65536 nodes.
  uint64_t n = std::min<uint64_t>(d->nodes(), 0x10000);
  auto* ids = static_cast<rs_node_t*>(std::malloc(n * sizeof(rs_node_t)));
  if (!ids) return -1;
  for (uint64_t i = 0; i < n; ++i) ids[i] = describe(i);
  nodes->na_len = static_cast<uint32_t>(n);
  nodes->na_ids = ids;
  return 0;
}

int rs_phys2str(const rs_node_t* node, char* buf) {
  if (!node || !buf) return -1;
  const auto& s = node->rs_node_s;
  std::snprintf(buf, 32, "c%u-%uc%us%un%u", static_cast<unsigned>(s._node_x), static_cast<unsigned>(s._node_row),
                static_cast<unsigned>(s._node_cage), static_cast<unsigned>(s._node_slot),
                static_cast<unsigned>(s._node_modcomp));
  return 0;
}

}  // extern "C"
