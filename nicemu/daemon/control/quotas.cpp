#include "nicemu/daemon/control/quotas.h"

#include <map>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "nicemu/daemon/control/request.h"

namespace nicemu::daemon {

std::array<uint64_t, 2> Quotas::usage(Resource r, pid_t pid, const Credential& c) const {
  std::array<uint64_t, 2> u{0, 0};
  // A process's registrations are in one MDD table for all its CDMs of one domain
  // (process_mdd.h): count the room granted to it (control::reg_budget) once per (process, domain).
  std::map<std::pair<pid_t, Credential>, uint64_t> regs;
  // The CDMs of the credential, then those of the process under other credentials.
  std::vector<uint64_t> ids = cdms_.index().of_credential(c);
  for (uint64_t id : cdms_.index().of_process(pid))
    if (const CdmRegion* r = cdms_.get(id); r && !(r->credential() == c)) ids.push_back(id);
  for (uint64_t id : ids) {
    const CdmRegion* cdm = cdms_.get(id);
    if (!cdm) continue;
    const bool mine = cdm->pid() == pid, ours = cdm->credential() == c;
    uint64_t n = 0;
    switch (r) {
      case Resource::kCdms: n = 1; break;
      case Resource::kRegistrations: {
        uint64_t& m = regs[{cdm->pid(), cdm->credential()}];
        m = cdm->mdd().granted;
        continue;
      }
      case Resource::kCqs: n = cdm->live_cqs(); break;
      case Resource::kMailboxes: n = cdm->mailboxes(); break;
      case Resource::kDatagrams: n = dgrams_.posts_of(id); break;
    }
    if (mine) u[0] += n;
    if (ours) u[1] += n;
  }
  for (const auto& [key, n] : regs) {
    if (key.first == pid) u[0] += n;
    if (key.second == c) u[1] += n;
  }
  return u;
}

bool Quotas::may_take(Peer& peer, Resource r, pid_t pid, const Credential& c) {
  const size_t i = static_cast<size_t>(r);
  auto [by_process, by_credential] = usage(r, pid, c);
  const bool process_full = by_process >= limits_.per_process[i];
  if (!process_full && by_credential < limits_.per_credential[i]) return true;
  ++ctr_.resource_refused;
  ++peer.refusals;
  if (peer.refusals <= 8 || peer.refusals % 1000 == 0)
    spdlog::warn("nic {}: {} limit reached for pid {} (ptag {}): {} {} of max {}", nic_addr_, kResourceNames[i],
                 pid, c.ptag, process_full ? "process holds" : "credential holds",
                 process_full ? by_process : by_credential,
                 process_full ? limits_.per_process[i] : limits_.per_credential[i]);
  return false;
}

}  // namespace nicemu::daemon
