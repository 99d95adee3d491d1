// The resource limits (resource_limits.h) as the handlers apply them: what a process and a
// credential hold now of the node's CDMs, registrations, CQs, mailboxes and datagram posts,
// and whether one more fits.
#pragma once
#include <sys/types.h>

#include <array>
#include <cstdint>

#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/node_counters.h"
#include "nicemu/daemon/remote/datagram_matcher.h"
#include "nicemu/daemon/resource_limits.h"

namespace nicemu::daemon {

struct Peer;

class Quotas {
 public:
  // `dgrams` is used after construction only.
  Quotas(uint32_t nic_addr, const ResourceLimits& limits, const CdmTable& cdms, const DatagramMatcher& dgrams,
         Counters& ctr)
      : nic_addr_(nic_addr), limits_(limits), cdms_(cdms), dgrams_(dgrams), ctr_(ctr) {}

  const ResourceLimits& limits() const { return limits_; }
  // Use of `r` now by process `pid` ({process, credential `c`}).
  std::array<uint64_t, 2> usage(Resource r, pid_t pid, const Credential& c) const;
  // False (counted and logged) if one more `r` for process `pid` in domain `c` would exceed
  // the per-process or per-credential limit.
  bool may_take(Peer& peer, Resource r, pid_t pid, const Credential& c);

 private:
  uint32_t nic_addr_;
  const ResourceLimits& limits_;
  const CdmTable& cdms_;
  const DatagramMatcher& dgrams_;
  Counters& ctr_;
};

}  // namespace nicemu::daemon
