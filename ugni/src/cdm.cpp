// Communication domains, attach to the emulated NIC, and device/version/job queries.
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "fault_engine.h"
#include "internal.h"
#include "ofi_port.h"
#include "mdd_table.h"
#include "nicemu/common/params.h"

using namespace nicemu;
using namespace nicemu::ugni;

namespace {
std::mutex g_cdms_mu;
std::vector<Cdm*> g_cdms;  // for GNI_GetPtag
}  // namespace

extern "C" {

gni_return_t GNI_CdmCreate(uint32_t inst_id, uint8_t ptag, uint32_t cookie, uint32_t modes,
                           gni_cdm_handle_t* cdm_hndl) {
  if (!cdm_hndl || ptag == 0 || ptag == GNI_PTAG_LB || (modes & GNI_CDM_MODE_PRIV_MASK)) return GNI_RC_INVALID_PARAM;
  auto* c = new (std::nothrow) Cdm;
  if (!c) return GNI_RC_ERROR_NOMEM;
  c->inst_id = inst_id;
  c->ptag = ptag;
  c->cookie = cookie;
  c->modes = modes;
  {
    std::lock_guard<std::mutex> lk(g_cdms_mu);
    g_cdms.push_back(c);
  }
  *cdm_hndl = reinterpret_cast<gni_cdm_handle_t>(c);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CdmDestroy(gni_cdm_handle_t cdm_hndl) {
  Cdm* c = as_cdm(cdm_hndl);
  if (!c) return GNI_RC_INVALID_PARAM;
  {
    std::lock_guard<std::mutex> lk(g_cdms_mu);
    std::erase(g_cdms, c);
  }
  if (c->nic) {
    c->nic->magic = 0;
    // Closing the attach connection makes the daemon reclaim everything; wait until it has
    // (it closes its end then), so the CDM's registrations are gone when we return, as on
    // the hardware. Bounded: a hung daemon costs at most 2 s here.
    if (int fd = c->nic->conn.fd(); fd >= 0 && ::shutdown(fd, SHUT_WR) == 0) {
      char sink[64];
      for (int i = 0; i < 20; ++i) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) < 0 && errno != EINTR) break;
        if (!p.revents) continue;
        ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;  // closed by the daemon
      }
    }
    // The daemon cleared the CDM's registrations from the process's MDD table: their slots
    // are ours to reuse.
    if (c->nic->mdd) c->nic->mdd->forget_domain(c->nic->mem_domain);
    fault_forget_nic(c->nic);
    ofi_close(c->nic);
    ce_forget_nic(c->nic);
    delete c->nic;
  }
  c->magic = 0;
  delete c;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CdmAttach(gni_cdm_handle_t cdm_hndl, uint32_t device_id, uint32_t* local_addr,
                           gni_nic_handle_t* nic_hndl) {
  Cdm* c = as_cdm(cdm_hndl);
  if (!c || !local_addr || !nic_hndl) return GNI_RC_INVALID_PARAM;
  // Cray's header: device_id (uint32_t)-1 attaches to the nearest device, which here is the
  // node's one NIC (device 0).
  if (device_id != 0 && device_id != kNearestDevice) return GNI_RC_NO_MATCH;
  if (c->nic) return GNI_RC_INVALID_STATE;
  std::string path = daemon_socket();
  auto nic = std::make_unique<Nic>();
  if (path.empty() || !nic->conn.connect(path)) return GNI_RC_ERROR_RESOURCE;  // no NIC on this node
  // Same-host peers access our registered memory with process_vm_readv/writev.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  abi::ctl::Attach req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kAttach);
  req.inst_id = c->inst_id;
  req.ptag = c->ptag;
  req.cookie = c->cookie;
  req.modes = c->modes;
  req.pid = static_cast<uint32_t>(getpid());
  req.abi_version = abi::kAbiVersion;
  abi::ctl::AttachReply rep{};
  int fds[3] = {-1, -1, -1};  // read-only section, MDD table, heap
  if (!nic->conn.call(req, rep, fds, 3)) return GNI_RC_ERROR_RESOURCE;
  if (rep.r.rc != GNI_RC_SUCCESS || fds[2] < 0) {
    for (int fd : fds)
      if (fd >= 0) close(fd);
    return rep.r.rc != GNI_RC_SUCCESS ? static_cast<gni_return_t>(rep.r.rc) : GNI_RC_ERROR_RESOURCE;
  }
  // Our writable view of the MDD table first (it seals the memfd), then the region.
  nic->mdd = MddTable::attach(fds[1]);
  nic->self = nic->mdd ? Region::map(fds, rep.region_size, rep.ro_size) : nullptr;
  if (!nic->self) {
    for (int fd : fds)
      if (fd >= 0) close(fd);
    return GNI_RC_ERROR_NOMEM;
  }
  nic->mem_domain = rep.mem_domain;
  nic->counters = map_counter_block(*nic->self);
  nic->cdm = c;
  nic->nic_addr = rep.nic_addr;
  nic->device_type = rep.device_type;
  nic->rundir = nicemu::ctl::default_rundir();
  nic->fault_page = fault_map_page(path);
  ofi_open(nic.get(), rep);  // the daemon runs the ofi fabric: our own endpoint (ofi_port.h)
  // Our own memory domain: Nic::resolve answers it with `self` (no second mapping).
  if (nic->self->header()->mem_domain != rep.mem_domain) return GNI_RC_INVALID_STATE;
  c->nic = nic.release();
  *local_addr = c->nic->nic_addr;
  *nic_hndl = reinterpret_cast<gni_nic_handle_t>(c->nic);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CdmGetNicAddress(uint32_t device_id, uint32_t* address, uint32_t* cpu_id) {
  if (device_id != 0 && device_id != kNearestDevice) return GNI_RC_NO_MATCH;
  abi::ctl::HelloReply h;
  if (!daemon_hello(h)) return GNI_RC_NO_MATCH;
  if (address) *address = h.nic_addr;
  if (cpu_id) {
    int cpu = sched_getcpu();
    *cpu_id = cpu < 0 ? 0 : static_cast<uint32_t>(cpu);
  }
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetDeviceType(gni_nic_device_t* dev_type) {
  abi::ctl::HelloReply h;
  if (!daemon_hello(h)) return GNI_RC_ERROR_RESOURCE;
  if (dev_type) *dev_type = static_cast<gni_nic_device_t>(h.device_type);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetNumLocalDevices(int* num_devices) {
  if (!num_devices) return GNI_RC_INVALID_PARAM;
  abi::ctl::HelloReply h;
  *num_devices = daemon_hello(h) ? 1 : 0;
  return *num_devices ? GNI_RC_SUCCESS : GNI_RC_ERROR_RESOURCE;
}

gni_return_t GNI_GetLocalDeviceIds(int len, int* device_ids) {
  if (len <= 0 || !device_ids) return GNI_RC_INVALID_PARAM;
  abi::ctl::HelloReply h;
  if (!daemon_hello(h)) return GNI_RC_ERROR_RESOURCE;
  device_ids[0] = 0;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetVersion(uint32_t* version) {
  if (!version) return GNI_RC_INVALID_PARAM;
  *version = GNI_VERSION;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetVersionInformation(gni_version_info_t* version_info) {
  if (!version_info) return GNI_RC_INVALID_PARAM;
  std::memset(version_info, 0, sizeof(*version_info));
  version_info->ugni_version = GNI_VERSION;
  version_info->ugni_svn_revision = 0;
  std::snprintf(version_info->ugni_build_string, sizeof(version_info->ugni_build_string),
                "nicemu libugni (emulated NIC), ABI %u", unsigned{abi::kAbiVersion});
  version_info->kgni_version = GNI_VERSION;
  std::snprintf(version_info->kgni_build_string, sizeof(version_info->kgni_build_string),
                "nicemu daemon (no kernel driver)");
  return GNI_RC_SUCCESS;
}

// GNI_JOB_RES_FMA's limit: the daemon's default max_cdms_per_process (123, the FMA
// descriptors an Aries NIC leaves to user CDMs; docs/decisions.md), from the one parameter
// table, so a client that attaches up to the reported limit is refused only past it (a
// daemon configured otherwise is not asked).
constexpr uint64_t kFmaDescriptorsPerProcess =
    nicemu::params::default_uint(nicemu::params::param("max_cdms_per_process"));

gni_return_t GNI_GetJobResInfo(uint32_t device_id, uint8_t ptag, gni_job_res_t res_type,
                               gni_job_res_desc_t* res_desc) {
  if (device_id != 0 || !res_desc || !gni_job_res_valid(res_type)) return GNI_RC_INVALID_PARAM;
  uint64_t used = 0;
  bool known = false;
  {
    std::lock_guard<std::mutex> lk(g_cdms_mu);
    for (Cdm* c : g_cdms) {
      if (c->ptag != ptag) continue;
      known = true;
      if (!c->nic) continue;
      used += res_type == GNI_JOB_RES_MDD  ? c->nic->live_regs.load()
              : res_type == GNI_JOB_RES_CQ ? c->nic->live_cqs.load()
                                           : 1;  // FMA: one descriptor per attached CDM
    }
  }
  (void)known;
  switch (res_type) {
    case GNI_JOB_RES_FMA:
      // Each attached CDM holds one FMA descriptor, as a dedicated-FMA CDM does on the
      // hardware; the limit is the daemon's default max_cdms_per_process (libfabric's gni
      // provider divides it among the node's ranks to size its NIC pool).
      res_desc->used = used;
      res_desc->limit = kFmaDescriptorsPerProcess;
      return GNI_RC_SUCCESS;
    case GNI_JOB_RES_MDD:
      res_desc->used = used;
      res_desc->limit = abi::kRegSlots;
      return GNI_RC_SUCCESS;
    case GNI_JOB_RES_CQ:
      res_desc->used = used;
      res_desc->limit = abi::kCqSlots;
      return GNI_RC_SUCCESS;
    default:
      return GNI_RC_ILLEGAL_OP;
  }
}

// Device-wide resources as this process sees them: every attached CDM has its own region
// with a table of kRegSlots registrations (MDD) and kCqSlots CQs, so `total` is that limit
// times the CDMs attached here (one CDM's worth before the first attach) and `held` what
// they use. Other processes' usage would need the daemon and is not counted. Resources
// nicemu has no equivalent for (FMA windows, DLA, CE, ...) return GNI_RC_ILLEGAL_OP.
gni_return_t GNI_GetDevResInfo(uint32_t device_id, gni_dev_res_t res_type, gni_dev_res_desc_t* res_desc) {
  if (device_id != 0 || !res_desc || !gni_dev_res_valid(res_type)) return GNI_RC_INVALID_PARAM;
  uint64_t per_cdm;
  switch (res_type) {
    case GNI_DEV_RES_MDD:
      per_cdm = abi::kRegSlots;
      break;
    case GNI_DEV_RES_CQ:
      per_cdm = abi::kCqSlots;
      break;
    default:
      return GNI_RC_ILLEGAL_OP;
  }
  abi::ctl::HelloReply h;
  if (!daemon_hello(h)) return GNI_RC_ERROR_RESOURCE;  // no NIC on this node
  uint64_t cdms = 0, held = 0;
  {
    std::lock_guard<std::mutex> lk(g_cdms_mu);
    for (Cdm* c : g_cdms) {
      if (!c->nic) continue;
      ++cdms;
      held += res_type == GNI_DEV_RES_MDD ? c->nic->live_regs.load() : c->nic->live_cqs.load();
    }
  }
  res_desc->total = per_cdm * std::max<uint64_t>(cdms, 1);
  res_desc->held = held;
  res_desc->reserved = 0;
  res_desc->available = res_desc->total > held ? res_desc->total - held : 0;
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetNicStat(gni_nic_handle_t nic_hndl, gni_statistic_t stat, uint32_t* value) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !value || static_cast<unsigned>(stat) >= GNI_NUM_STATS) return GNI_RC_INVALID_PARAM;
  *value = n->stats[stat].load(std::memory_order_relaxed);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_ResetNicStat(gni_nic_handle_t nic_hndl, gni_statistic_t stat) {
  Nic* n = as_nic(nic_hndl);
  if (!n || static_cast<unsigned>(stat) >= GNI_NUM_STATS) return GNI_RC_INVALID_PARAM;
  n->stats[stat].store(0, std::memory_order_relaxed);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_GetPtag(uint32_t device_id, uint32_t cookie, uint8_t* ptag) {
  if (device_id != 0 || !ptag) return GNI_RC_INVALID_PARAM;
  {
    std::lock_guard<std::mutex> lk(g_cdms_mu);
    for (Cdm* c : g_cdms)
      if (c->cookie == cookie) {
        *ptag = c->ptag;
        return GNI_RC_SUCCESS;
      }
  }
  // The launcher's credential (first entries of the PMI_GNI_* lists).
  const char* pt = std::getenv("PMI_GNI_PTAG");
  const char* ck = std::getenv("PMI_GNI_COOKIE");
  if (pt && ck && std::strtoul(ck, nullptr, 10) == cookie) {
    *ptag = static_cast<uint8_t>(std::strtoul(pt, nullptr, 10));
    return GNI_RC_SUCCESS;
  }
  // A credential shared with us by DRC (drc_access hands out only the cookie): the daemon
  // answers if we may use it.
  nicemu::ctl::Connection conn;
  std::string path = daemon_socket();
  if (path.empty() || !conn.connect(path)) return GNI_RC_NO_MATCH;
  abi::ctl::Drc req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kDrc);
  req.action = static_cast<uint32_t>(abi::ctl::DrcAction::kLookup);
  req.cookie = cookie;
  abi::ctl::DrcReply rep{};
  if (!conn.call(req, rep) || rep.r.rc != GNI_RC_SUCCESS) return GNI_RC_NO_MATCH;
  *ptag = static_cast<uint8_t>(rep.ptag);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
