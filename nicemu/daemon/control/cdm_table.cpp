#include "nicemu/daemon/control/cdm_table.h"

#include "nicemu/daemon/control/request.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

CdmRegion* CdmTable::get(uint64_t attach_id) const {
  auto it = cdms_.find(attach_id);
  return it == cdms_.end() ? nullptr : it->second.get();
}

CdmRegion* CdmTable::live(uint64_t attach_id) const {
  CdmRegion* r = get(attach_id);
  return r && r->alive() ? r : nullptr;
}

CdmRegion* CdmTable::owned(const Peer& peer) const { return get(peer.attach_id); }

std::vector<CdmRegion*> CdmTable::family(pid_t pid, const Credential& c) const {
  std::vector<CdmRegion*> out;
  for (uint64_t id : index_.of_process(pid))
    if (CdmRegion* r = get(id); r && r->credential() == c && r->alive()) out.push_back(r);
  return out;
}

CdmRegion* CdmTable::find(const Credential& c, uint32_t inst_id) const {
  for (uint64_t id : index_.with_inst(c, inst_id))
    if (CdmRegion* r = live(id)) return r;
  return nullptr;
}

CdmRegion* CdmTable::find_by_domain(const Credential& c, uint32_t domain) const {
  if (domain & mdh::kVmdhRoute) {
    auto d = vmdh_().domain(c.ptag, c.cookie, domain & ~mdh::kVmdhRoute);
    if (!d) return nullptr;
    domain = *d;
  }
  if (domain == 0 || domain >= domains_.size() || domains_[domain] == 0) return nullptr;
  CdmRegion* r = live(domains_[domain]);
  return r && r->credential() == c ? r : nullptr;
}

uint32_t CdmTable::free_domain() const {
  for (uint32_t i = 0; i < mdh::kMaxDomains; ++i) {
    uint32_t d = (next_domain_ + i) % mdh::kMaxDomains;
    if (d != 0 && domains_[d] == 0) return d;
  }
  return 0;
}

void CdmTable::add(std::unique_ptr<CdmRegion> region, pid_t pid, const Credential& c, uint32_t inst_id) {
  const uint64_t id = region->attach_id();
  const uint32_t domain = region->mem_domain();
  domains_[domain] = id;
  next_domain_ = domain + 1;
  leases_.add(region->header());
  index_.add(id, pid, c, inst_id);
  cdms_[id] = std::move(region);
}

void CdmTable::remove(uint64_t attach_id) {
  auto it = cdms_.find(attach_id);
  if (it == cdms_.end()) return;
  CdmRegion& r = *it->second;
  leases_.remove(r.header());
  domains_[r.mem_domain()] = 0;
  index_.remove(attach_id, r.pid(), r.credential(), r.inst_id());
  cdms_.erase(it);
}

void CdmTable::clear() {
  for (auto& [id, r] : cdms_) leases_.remove(r->header());
  cdms_.clear();
  index_.clear();
  domains_.fill(0);
}

}  // namespace nicemu::daemon
