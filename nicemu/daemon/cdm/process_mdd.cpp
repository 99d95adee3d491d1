#include "nicemu/daemon/cdm/process_mdd.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;

int mdd_register(CdmRegion& caller, const std::vector<CdmRegion*>& family, const RegSpec& spec,
                 ctl::MemRegisterReply& rep) {
  if (int r = caller.check_register(spec); r != rc::kSuccess) return r;
  // Round-robin from the caller's hint, so a just-freed slot (and its generation) is reused
  // last; the slot must be free in every region of the family.
  uint32_t slot = kRegSlots;
  for (uint32_t i = 0; i < kRegSlots && slot == kRegSlots; ++i) {
    uint32_t s = (caller.reg_hint() + i) % kRegSlots;
    if (std::all_of(family.begin(), family.end(), [s](const CdmRegion* r) { return r->reg_free(s); })) slot = s;
  }
  if (slot == kRegSlots) return rc::kErrorResource;
  caller.set_reg_hint(slot + 1);
  // A generation newer than any the slot had in any region: a mailbox keyed on the old
  // registration (cdm_region.h, MboxKey) is not mistaken for one in the new.
  uint32_t gen = 0;
  for (const CdmRegion* r : family) gen = std::max(gen, r->reg_entry(slot).gen);
  gen = (gen + 1) & mdh::kGenMask;
  for (CdmRegion* r : family) {
    if (int e = r->reg_store(slot, gen, spec, r == &caller ? spec.dst_cq : kNoCq, caller.attach_id(),
                             caller.mem_domain());
        e != rc::kSuccess) {
      for (CdmRegion* done : family) done->reg_clear(slot);  // all or none
      return e;
    }
  }
  mdh::Fields f = mdh::registration_fields(spec.segments.empty() ? spec.address : 0, spec.length, caller.mem_domain(), slot,
                                           spec.flags & rc::kMemReadOnly, spec.vmdh);
  mdh::encode(f, rep.qword1, rep.qword2);
  return rc::kSuccess;
}

namespace {
// The caller's registration a handle it was given names: the slot's entry, registered (live
// or reserved) by the handle's memory domain (or under its vMDH index) for its first page.
bool names_entry(const mdh::Fields& f, const RegEntry& e) {
  return e.state != kRegFree && (e.address & ~(kPageSize - 1)) == f.va && region_entry_owner(f, e);
}
}  // namespace

int mdd_deregister(CdmRegion& caller, const std::vector<CdmRegion*>& family, const ctl::MemDeregister& req) {
  auto f = mdh::decode(req.qword1, req.qword2);
  if (!f) {
    spdlog::debug("deregister by inst {} (pid {}): handle {:#x}:{:#x} does not decode", caller.inst_id(), caller.pid(),
                  req.qword1, req.qword2);
    return rc::kInvalidParam;
  }
  const RegEntry& e = caller.reg_entry(f->slot);
  if (!names_entry(*f, e)) {
    spdlog::debug("deregister by inst {} (pid {}): slot {} domain {} va {:#x} is not live (state {}, domain {})",
                  caller.inst_id(), caller.pid(), f->slot, f->domain, f->va, e.state, e.domain);
    return rc::kInvalidParam;
  }
  for (CdmRegion* r : family) r->reg_clear(f->slot);
  return rc::kSuccess;
}

int mdd_update(CdmRegion& caller, const std::vector<CdmRegion*>& family, const ctl::MemRegister& req,
               ctl::MemRegisterReply& rep) {
  auto f = mdh::decode(req.qword1, req.qword2);
  if (!f || !names_entry(*f, caller.reg_entry(f->slot))) return rc::kInvalidParam;
  const RegEntry& e = caller.reg_entry(f->slot);
  if (e.seg_count == 0) {
    // The pages filled in must lie in the reserved range.
    const uint64_t first = e.address & ~(kPageSize - 1);
    const uint64_t end = (e.address + e.length + kPageSize - 1) & ~(kPageSize - 1);
    if (req.length == 0 || req.address < first || req.address > end || req.length > end - req.address)
      return rc::kInvalidParam;
  }
  for (CdmRegion* r : family) r->reg_make_live(f->slot);
  rep.qword1 = req.qword1;
  rep.qword2 = req.qword2;
  return rc::kSuccess;
}

void mdd_copy_into(CdmRegion& fresh, const CdmRegion& sibling) {
  for (uint32_t s = 0; s < kRegSlots; ++s) {
    const RegEntry& e = sibling.reg_entry(s);
    if (e.state == kRegFree) continue;
    fresh.reg_store(s, e.gen, sibling.reg_spec(s), kNoCq, sibling.reg_origin(s), e.domain);
  }
}

std::vector<uint32_t> mdd_own_slots(const CdmRegion& region) {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < kRegSlots; ++s)
    if (!region.reg_free(s) && region.reg_origin(s) == region.attach_id()) out.push_back(s);
  return out;
}

void mdd_drop_origin(uint64_t origin, const std::vector<uint32_t>& slots, const std::vector<CdmRegion*>& family) {
  for (CdmRegion* r : family)
    for (uint32_t s : slots)
      if (!r->reg_free(s) && r->reg_origin(s) == origin) r->reg_clear(s);
}

}  // namespace nicemu::daemon
