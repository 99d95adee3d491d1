// Control requests about a CDM's memory and queues: registrations, CQs, peer lookups and
// mailboxes, the BTE ring, bandwidth injection.
#include "nicemu/daemon/bte/bte_engine.h"
#include "nicemu/daemon/cdm/bandwidth_injection.h"
#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/credentials.h"
#include "nicemu/daemon/control/handlers.h"
#include "nicemu/daemon/control/quotas.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>

#include <spdlog/spdlog.h>

#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/daemon/cdm/process_mdd.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

namespace {

// A registration of `cdm` that needs the daemon, in MDD `slot` (the library's choice). With
// GNI_MEM_USE_VMDH it takes an index of the node's vMDH block of its protection domain:
// `vmdh_index`, or the first free one below `mdd_block` for (uint32_t)-1. An index is in use
// while the CDM it is bound to still holds a registration under it (bindings are checked,
// never trusted).
int register_memory(const NicInfo& nic, CdmTable& cdms, VmdhTable& table, CdmRegion& cdm, RegSpec& spec,
                    uint32_t slot, uint32_t vmdh_index, uint32_t mdd_block, ctl::MemRegisterReply& rep) {
  if (int r = cdm.check_register(spec); r != rc::kSuccess) return r;
  const Credential c = cdm.credential();
  auto in_use = [&](uint32_t index) {
    auto d = table.domain(c.ptag, c.cookie, index);
    CdmRegion* holder = d ? cdms.find_by_domain(c, *d) : nullptr;
    return holder && holder->mdd().vmdh_slot(index, holder->mem_domain()).has_value();
  };
  spec.reserved = spec.flags & gni::kMemReserveRegion;
  if (spec.flags & gni::kMemUseVmdh) {
    if (mdd_block == 0 || mdd_block > mdh::kVmdhIndices) return rc::kInvalidParam;  // no GNI_SetMddResources
    uint32_t index = vmdh_index;
    if (index == UINT32_MAX) {
      for (index = 0; index < mdd_block && in_use(index); ++index) {
      }
      if (index == mdd_block) return rc::kErrorResource;
    } else if (index >= mdd_block) {
      return rc::kInvalidParam;
    } else if (in_use(index)) {
      spdlog::debug("nic {}: vMDH index {} of ptag {} is in use (registration by pid {})", nic.nic_addr, index,
                    c.ptag, cdm.pid());
      return rc::kErrorResource;
    }
    spec.vmdh = index + 1;
  }
  int r = cdm.mdd().store(slot, spec, spec.dst_cq, cdm.mem_domain(), rep);
  if (r == rc::kSuccess && spec.vmdh) table.bind(c.ptag, c.cookie, spec.vmdh - 1, cdm.mem_domain());
  return r;
}

}  // namespace

// Registrations that need the daemon (process_mdd.h); plain ones the library writes itself.
// Every registration counts against the room the process was granted (reg_budget), so
// no registration limit is checked here.
void control::mem_register(Request& q, const NicInfo& nic, CdmTable& cdms, VmdhTable& vmdh, Counters& ctr) {
  with_cdm<ctl::MemRegister, ctl::MemRegisterReply>(
      q, ctr, cdms.owned(q.peer), [&](CdmRegion& cdm, const ctl::MemRegister& req, ctl::MemRegisterReply& r) {
        if (req.flags & gni::kMemUpdateRegion) {
          const int code = cdm.mdd().update(req.qword1, req.qword2, req.address, req.length);
          if (code == rc::kSuccess) {
            r.qword1 = req.qword1;
            r.qword2 = req.qword2;
          }
          return code;
        }
        RegSpec spec{req.address, req.length, req.flags, req.dst_cq, {}};
        const int code = register_memory(nic, cdms, vmdh, cdm, spec, req.slot, req.vmdh_index, req.mdd_block, r);
        if (code == rc::kSuccess) ++ctr.registrations;
        return code;
      });
}

void control::mem_register_segments(Request& q, const NicInfo& nic, CdmTable& cdms, VmdhTable& vmdh, Counters& ctr) {
  // Variable length: the fixed part, then exactly `count` segments.
  constexpr size_t fixed = offsetof(ctl::MemRegisterSegments, segments);
  auto req = std::make_unique<ctl::MemRegisterSegments>();
  if (q.len < fixed || q.len > sizeof(*req)) return bad(q, ctr);
  std::memcpy(req.get(), q.msg, q.len);
  if (req->count > ctl::kMaxMemSegments || q.len != fixed + size_t{req->count} * sizeof(ctl::MemSegment))
    return bad(q, ctr);
  auto& r = init_reply<ctl::MemRegisterReply>(q.reply, q.h);
  CdmRegion* cdm = cdms.owned(q.peer);
  RegSpec spec{0, 0, req->flags, req->dst_cq, {req->segments, req->segments + req->count}};
  for (const ctl::MemSegment& g : spec.segments) spec.length += g.length;  // overflow: check_register
  if (!cdm)
    r.r.rc = rc::kInvalidState;
  else
    r.r.rc = register_memory(nic, cdms, vmdh, *cdm, spec, req->slot, req->vmdh_index, req->mdd_block, r);
  if (r.r.rc == rc::kSuccess) ++ctr.registrations;
}

void control::mem_deregister(Request& q, CdmTable& cdms, VmdhTable& vmdh, Counters& ctr) {
  with_cdm<ctl::MemDeregister, PlainReply>(
      q, ctr, cdms.owned(q.peer), [&](CdmRegion& cdm, const ctl::MemDeregister& req, PlainReply&) {
        auto f = mdh::decode(req.qword1, req.qword2);
        const uint32_t index = f ? cdm.mdd().made_vmdh(f->slot) : 0;  // a vMDH binding goes with the registration
        const uint32_t origin_domain = f ? f->domain : 0;
        const int code = cdm.mdd().deregister(req.qword1, req.qword2);
        if (code != rc::kSuccess) return code;
        if (index) vmdh.unbind(cdm.credential().ptag, cdm.credential().cookie, index - 1, origin_domain);
        ++ctr.deregistrations;
        return code;
      });
}

// Room for the registrations the library makes itself: what the process's and its
// credential's limits leave (resource_limits.h), counted once per process and credential.
void control::reg_budget(Request& q, CdmTable& cdms, Quotas& quotas, Counters& ctr) {
  ctl::RegBudget req;
  if (!parse(q, req)) return bad(q, ctr);
  auto& r = init_reply<ctl::RegBudgetReply>(q.reply, q.h);
  CdmRegion* cdm = cdms.owned(q.peer);
  if (!cdm) {
    r.r.rc = rc::kInvalidState;
    return;
  }
  ProcessMdd& mdd = cdm->mdd();
  mdd.granted -= std::min<uint64_t>(mdd.granted, req.give_back);
  const std::array<uint64_t, 2> used = quotas.usage(Resource::kRegistrations, cdm->pid(), cdm->credential());
  const uint64_t i = static_cast<size_t>(Resource::kRegistrations);
  const ResourceLimits& lim = quotas.limits();
  const uint64_t room = std::min(lim.per_process[i] - std::min(lim.per_process[i], used[0]),
                                 lim.per_credential[i] - std::min(lim.per_credential[i], used[1]));
  const uint64_t added = std::min<uint64_t>(room, req.want);
  mdd.granted += added;
  r.added = static_cast<uint32_t>(added);
  r.granted = static_cast<uint32_t>(mdd.granted);
  if (req.want > 0 && added == 0) quotas.may_take(q.peer, Resource::kRegistrations, cdm->pid(), cdm->credential());  // counts and says why
  r.r.rc = rc::kSuccess;
}

void control::cq_create(Request& q, CdmTable& cdms, Quotas& quotas, Counters& ctr) {
  with_cdm<ctl::CqCreate, ctl::CqCreateReply>(
      q, ctr, cdms.owned(q.peer), [&](CdmRegion& cdm, const ctl::CqCreate& req, ctl::CqCreateReply& r) {
        if (!quotas.may_take(q.peer, Resource::kCqs, cdm.pid(), cdm.credential())) return int{rc::kErrorResource};
        const int code = cdm.cq_create(req, r);
        if (code == rc::kSuccess) ++ctr.cq_creates;
        return code;
      });
}

void control::cq_destroy(Request& q, CdmTable& cdms, Counters& ctr) {
  with_cdm<ctl::CqDestroy, PlainReply>(q, ctr, cdms.owned(q.peer),
                                       [&](CdmRegion& cdm, const ctl::CqDestroy& req, PlainReply&) {
                                         const int code = cdm.cq_destroy(req);
                                         if (code == rc::kSuccess) ++ctr.cq_destroys;
                                         return code;
                                       });
}

void control::peer_lookup(Request& q, const NicInfo& nic, Credentials& creds, CdmTable& cdms, Counters& ctr) {
  ctl::PeerLookup req;
  if (!parse(q, req)) return bad(q, ctr);
  auto& r = init_reply<ctl::PeerLookupReply>(q.reply, q.h);
  ++ctr.peer_lookups;
  Credential c{req.ptag, req.cookie};
  CdmRegion* t = nullptr;
  if (req.nic_addr != nic.nic_addr) {
    r.r.rc = rc::kNoMatch;
  } else if (!creds.may_use(q.peer, c)) {
    r.r.rc = creds.refuse(q.peer, "peer lookup", c);
  } else if (!(t = cdms.find_by_domain(c, req.mem_domain))) {
    r.r.rc = rc::kNoMatch;
  } else if (!t->mdd().owner_sealed()) {
    // Its owner has not sealed its MDD table yet (it does in GNI_CdmAttach): handing it out
    // now would let the peer map the owner's registrations writable.
    r.r.rc = rc::kNoMatch;
  } else {
    r.r.rc = rc::kSuccess;
    r.pid = static_cast<uint32_t>(t->pid());
    r.mem_domain = t->mem_domain();
    r.attach_id = t->attach_id();
    r.region_size = t->region_size();
    r.ro_size = kRoSize;
    q.pass_fds = {t->ro_memfd(), t->mdd_memfd(), t->heap_memfd()};
  }
  if (r.r.rc != rc::kSuccess) {
    ++ctr.peer_lookup_failures;
    spdlog::debug("nic {}: peer lookup of memory domain {} (ptag {}) by pid {} failed: rc {}", nic.nic_addr,
                  req.mem_domain, req.ptag, q.peer.pid, r.r.rc);
  }
}

void control::mbox_open(Request& q, Credentials& creds, CdmTable& cdms, Quotas& quotas, Counters& ctr) {
  ctl::MboxOpen req;
  if (!parse(q, req)) return bad(q, ctr);
  auto& r = init_reply<ctl::MboxOpenReply>(q.reply, q.h);
  Credential c{req.ptag, req.cookie};
  CdmRegion* t = nullptr;
  if (!creds.may_use(q.peer, c))
    r.r.rc = creds.refuse(q.peer, "mailbox open", c);
  else if (!(t = cdms.find_by_domain(c, mdh::route_of(req.qword1, req.qword2))))
    r.r.rc = rc::kNoMatch;
  else if ((r.r.rc = t->mbox_open(req, r, false)) == rc::kErrorResource)  // not open yet
    r.r.rc = quotas.may_take(q.peer, Resource::kMailboxes, t->pid(), c) ? t->mbox_open(req, r) : rc::kErrorResource;
  if (r.r.rc == rc::kSuccess) ++ctr.mbox_opens;
}

void control::bte_open(Request& q, CdmTable& cdms, BteEngine& bte, Counters& ctr) {
  with_cdm<ctl::BteOpen, ctl::BteOpenReply>(
      q, ctr, cdms.owned(q.peer), [&](CdmRegion& cdm, const ctl::BteOpen&, ctl::BteOpenReply& r) {
        uint64_t off = 0;
        int code = cdm.bte_ring(off);
        if (code == rc::kSuccess) code = bte.open_ring(cdm.attach_id(), off, kBteRingCapacity, q.pass_fds[0]);
        if (code == rc::kSuccess) {
          r.ctl_offset = off;
          r.capacity = kBteRingCapacity;
        }
        return code;
      });
}

void control::bi_config_set(Request& q, BandwidthInjection& bi, Counters& ctr) {
  ctl::BiConfigSet req;
  if (!parse(q, req)) return bad(q, ctr);
  init_reply<PlainReply>(q.reply, q.h).r.rc = bi.set(req.bw, req.aot_bw, req.modes);
}

void control::bi_config_get(Request& q, BandwidthInjection& bi, Counters& ctr) {
  ctl::BiConfigGet req;
  if (!parse(q, req)) return bad(q, ctr);
  auto& r = init_reply<ctl::BiConfigReply>(q.reply, q.h);
  bi.get(r);
  r.r.rc = rc::kSuccess;
}

}  // namespace nicemu::daemon
