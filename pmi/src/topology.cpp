// Node and topology queries (shared/spec/pmi-api.md §2.2 clique functions, §3 Cray
// extensions), answered from the job layout (layout.h). Mesh coordinates are those of the
// node's NIC address on the emulated torus (nicemu/common/torus.h), which librca answers too.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "client.h"
#include "layout.h"
#include "nicemu/common/torus.h"
#include "pmi.h"

using nicemu::pmi::Client;
using nicemu::pmi::get_layout;
using nicemu::pmi::guarded;
using nicemu::pmi::Layout;

namespace {

// Runs `body(layout)` once the layout is available.
template <typename F>
int with_layout(F&& body) {
  return guarded([&] {
    int rc = PMI_SUCCESS;
    const Layout* layout = get_layout(&rc);
    return layout ? body(*layout) : rc;
  });
}

int local_ranks_out(int* ranks, int length) {
  if (!ranks) return PMI_ERR_INVALID_ARG;
  return with_layout([&](const Layout& l) {
    if (length < static_cast<int>(l.local_ranks.size())) return PMI_ERR_INVALID_LENGTH;
    std::memcpy(ranks, l.local_ranks.data(), l.local_ranks.size() * sizeof(int));
    return PMI_SUCCESS;
  });
}

int local_count_out(int* num) {
  if (!num) return PMI_ERR_INVALID_ARG;
  return with_layout([&](const Layout& l) {
    *num = static_cast<int>(l.local_ranks.size());
    return PMI_SUCCESS;
  });
}

// Local facts of a single-application job (nicemu-run starts one MPMD app).
int job_fact(int* out, int value) {
  if (!out) return PMI_ERR_INVALID_ARG;
  if (!Client::get().known()) return PMI_ERR_INIT;
  *out = value;
  return PMI_SUCCESS;
}

// The torus of this job: NICEMU_TORUS, else sized by the highest NIC address of the job
// (node_nic_addr; what librca derives from NICEMU_JOB_NODES). nullopt when NICEMU_TORUS is malformed.
std::optional<nicemu::torus::Dims> job_torus(const Layout& l) {
  int highest = 0;
  for (int nid = 0; nid < l.num_nodes; ++nid) highest = std::max(highest, nicemu::pmi::node_nic_addr(l, nid));
  std::string error;
  auto d = nicemu::torus::from_env(static_cast<uint64_t>(highest) + 1, &error);
  if (!d) Client::get().report(error);
  return d;
}

}  // namespace

extern "C" {

int PMI_Get_clique_size(int* size) { return local_count_out(size); }
int PMI_Get_clique_ranks(int ranks[], int length) { return local_ranks_out(ranks, length); }
int PMI_Get_numpes_on_smp(int* num) { return local_count_out(num); }
int PMI_Get_pes_on_smp(int* pes, int num) { return local_ranks_out(pes, num); }
int PMI_Get_numpes_in_app_on_smp(int* num) { return local_count_out(num); }

int PMI_Get_nid(int rank, int* nid) {
  if (!nid) return PMI_ERR_INVALID_ARG;
  return with_layout([&](const Layout& l) {
    if (rank < 0 || rank >= static_cast<int>(l.nid_of_rank.size())) return PMI_ERR_INVALID_ARG;
    *nid = l.nid_of_rank[rank];
    return PMI_SUCCESS;
  });
}

int PMI_Get_nidlist_ptr(void** nidlist) {
  if (!nidlist) return PMI_ERR_INVALID_ARG;
  return with_layout([&](const Layout& l) {
    *nidlist = const_cast<int*>(l.nid_of_rank.data());
    return PMI_SUCCESS;
  });
}

int PMI_Get_meshcoord(pmi_nid_t nid, pmi_mesh_coord_t* xyz) {
  if (!xyz) return PMI_ERR_INVALID_ARG;
  return with_layout([&](const Layout& l) {
    auto d = job_torus(l);
    if (!d) return PMI_FAIL;
    auto c = nicemu::torus::coord_of(*d, static_cast<uint64_t>(nicemu::pmi::node_nic_addr(l, nid)));
    if (!c) return PMI_ERR_INVALID_ARG;
    xyz->mesh_x = static_cast<uint16_t>(c->x);
    xyz->mesh_y = static_cast<uint16_t>(c->y);
    xyz->mesh_z = static_cast<uint16_t>(c->z);
    return PMI_SUCCESS;
  });
}

int PMI_Get_max_dimension(pmi_mesh_coord_t* max) {
  if (!max) return PMI_ERR_INVALID_ARG;
  return with_layout([&](const Layout& l) {
    auto d = job_torus(l);
    if (!d) return PMI_FAIL;
    auto m = nicemu::torus::max_coord(*d);
    max->mesh_x = static_cast<uint16_t>(m.x);
    max->mesh_y = static_cast<uint16_t>(m.y);
    max->mesh_z = static_cast<uint16_t>(m.z);
    return PMI_SUCCESS;
  });
}

// One NIC per node: every requested entry is that NIC's address.
int PMI_nid_to_nicaddrs(int nid, int count, pmi_nic_addr_t* nicaddrs) {
  if (count < 1 || !nicaddrs) return PMI_ERR_INVALID_ARG;
  return with_layout([&](const Layout& l) {
    if (nid < 0 || nid >= l.num_nodes) return PMI_ERR_INVALID_ARG;
    int addr = nicemu::pmi::node_nic_addr(l, nid);
    for (int i = 0; i < count; ++i) nicaddrs[i] = addr;
    return PMI_SUCCESS;
  });
}

int PMI_Get_rank_in_app(int* rank) { return job_fact(rank, Client::get().rank()); }

// Reported as a Cray PMI 5 library (the generation whose symbols this one exports).
int PMI_Get_version_info(int* major, int* minor, int* revision) {
  if (!major || !minor || !revision) return PMI_ERR_INVALID_ARG;
  *major = 5;
  *minor = 0;
  *revision = 0;
  return PMI_SUCCESS;
}

int PMI_CRAY_Get_app_size(int* size) { return job_fact(size, Client::get().size()); }
int PMI_CRAY_Get_num_apps(int* num_apps) { return job_fact(num_apps, 1); }
int PMI_CRAY_Get_rank_in_app(int* rank) { return job_fact(rank, Client::get().rank()); }
int PMI_CRAY_Get_base_rank_in_app(int* base_rank) { return job_fact(base_rank, 0); }

// "nid00012" is node 12 (Cray host names); this host's own name is this rank's node.
int PMI_CRAY_gethostbyname(const char* hostname, int* nid) {
  if (!hostname || !nid) return PMI_ERR_INVALID_ARG;
  if (std::strncmp(hostname, "nid", 3) == 0 && hostname[3] >= '0' && hostname[3] <= '9') {
    char* end = nullptr;
    long v = std::strtol(hostname + 3, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 0xFFFF) {
      *nid = static_cast<int>(v);
      return PMI_SUCCESS;
    }
    return PMI_ERR_INVALID_ARG;
  }
  char self[256] = {};
  if (::gethostname(self, sizeof self - 1) != 0 || std::strcmp(self, hostname) != 0)
    return PMI_FAIL;
  return with_layout([&](const Layout& l) {
    *nid = l.my_nid;
    return PMI_SUCCESS;
  });
}

}  // extern "C"
