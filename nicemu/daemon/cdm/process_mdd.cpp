#include "nicemu/daemon/cdm/process_mdd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>
#include <cstring>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/region_map.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;

ProcessMdd::ProcessMdd(pid_t pid) {
  std::string name = "nicemu-mdd-" + std::to_string(pid);
  fd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(kMddBytes)) != 0 || fcntl(fd_, F_ADD_SEALS, kMddDaemonSeals) != 0) {
    int e = errno;
    if (fd_ >= 0) close(fd_);
    throw std::runtime_error("MDD table of pid " + std::to_string(pid) + ": " + strerror(e));
  }
  void* b = mmap(nullptr, kMddBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (b == MAP_FAILED) {
    int e = errno;
    close(fd_);
    throw std::runtime_error("mapping the MDD table of pid " + std::to_string(pid) + ": " + strerror(e));
  }
  base_ = static_cast<char*>(b);
}

ProcessMdd::~ProcessMdd() {
  if (base_) munmap(base_, kMddBytes);
  if (fd_ >= 0) close(fd_);
}

bool ProcessMdd::owner_sealed() const { return fd_write_sealed(fd_); }

// Several segments are addressed by peers as offsets 0 .. total-1 of their concatenation.
// The segment list goes into the table first; the entry that refers to it is published
// last, so no reader sees it half written.
int ProcessMdd::store(uint32_t slot, const RegSpec& spec, uint32_t dst_cq, uint32_t domain,
                      ctl::MemRegisterReply& rep) {
  if (slot >= kRegSlots || made_.contains(slot)) return rc::kInvalidParam;
  RegEntry& e = entries()[slot];
  uint32_t seq = 0;
  if (!reg_write_begin(e, seq)) return rc::kInvalidParam;
  if (e.state != kRegFree) {  // the library chose a slot it holds itself
    reg_write_end(e, seq);
    return rc::kInvalidParam;
  }
  Made m{0, spec.vmdh, domain};
  const uint32_t count = static_cast<uint32_t>(spec.segments.size());
  uint32_t first = 0;
  if (count) {
    auto run = segs_.allocate(uint64_t{count} * sizeof(SegEntry), sizeof(SegEntry));
    if (!run) {  // segment table full: like running out of MDDs
      reg_write_end(e, seq);
      return rc::kErrorResource;
    }
    m.seg_run = *run;
    first = static_cast<uint32_t>((*run - 64) / sizeof(SegEntry));
    SegEntry* seg = segments() + first;
    uint64_t offset = 0;
    for (uint32_t i = 0; i < count; ++i) {
      seg[i] = SegEntry{offset, spec.segments[i].address, spec.segments[i].length, 0};
      offset += spec.segments[i].length;
    }
  }
  const uint32_t gen = (e.gen + 1) & mdh::kGenMask;
  e.gen = gen;
  e.flags = spec.flags;
  e.address = count ? 0 : spec.address;
  e.length = spec.length;
  e.dst_cq = dst_cq;
  e.seg_count = count;
  e.seg_first = first;
  e.domain = domain;
  e.vmdh = spec.vmdh;
  e.state = spec.reserved ? kRegReserved : kRegLive;
  reg_write_end(e, seq);
  made_[slot] = m;
  mdh::Fields f = mdh::registration_fields(count ? 0 : spec.address, spec.length, domain, slot,
                                           spec.flags & rc::kMemReadOnly, spec.vmdh);
  mdh::encode(f, rep.qword1, rep.qword2);
  return rc::kSuccess;
}

bool ProcessMdd::clear(uint32_t slot, uint32_t domain) {
  RegEntry& e = entries()[slot];
  uint32_t seq = 0;
  bool taken = false;
  for (int tries = 0; tries < 1000 && !(taken = reg_write_begin(e, seq)); ++tries) {
  }
  if (taken) {
    // Under the lock, the entry is still the one we meant (the owner may have reused the
    // slot for another CDM since we looked).
    if (domain == 0 || e.domain == domain) e.state = kRegFree;
    reg_write_end(e, seq);
  }
  // Only now may the segments be reused: a reader of the old entry sees its seq move.
  if (auto it = made_.find(slot); it != made_.end()) {
    if (it->second.seg_run) segs_.release(it->second.seg_run);
    made_.erase(it);
  }
  return taken;
}

int ProcessMdd::deregister(uint64_t qword1, uint64_t qword2) {
  auto f = mdh::decode(qword1, qword2);
  if (!f || !made_.contains(f->slot)) return rc::kInvalidParam;
  RegEntry e;
  if (!region_read_entry(entries()[f->slot], e)) return rc::kInvalidParam;
  if (!region_entry_holds(*f, e)) {
    spdlog::debug("deregister of slot {} (domain {}, va {:#x}): not the registration there (state {}, domain {})",
                  f->slot, f->domain, f->va, e.state, e.domain);
    return rc::kInvalidParam;
  }
  clear(f->slot);
  return rc::kSuccess;
}

int ProcessMdd::update(uint64_t qword1, uint64_t qword2, uint64_t address, uint64_t length) {
  auto f = mdh::decode(qword1, qword2);
  if (!f || !made_.contains(f->slot)) return rc::kInvalidParam;
  RegEntry& e = entries()[f->slot];
  uint32_t seq = 0;
  if (!reg_write_begin(e, seq)) return rc::kInvalidParam;
  int code = rc::kSuccess;
  if (!region_entry_holds(*f, e)) {
    code = rc::kInvalidParam;
  } else if (e.seg_count == 0) {
    // The pages filled in must lie in the reserved range.
    const uint64_t first = e.address & ~(kPageSize - 1);
    const uint64_t end = (e.address + e.length + kPageSize - 1) & ~(kPageSize - 1);
    if (length == 0 || address < first || address > end || length > end - address) code = rc::kInvalidParam;
  }
  if (code == rc::kSuccess && e.state == kRegReserved) e.state = kRegLive;
  reg_write_end(e, seq);
  return code;
}

void ProcessMdd::drop_domain(uint32_t domain) {
  uint32_t stuck = 0;
  for (uint32_t s = 0; s < kRegSlots; ++s) {
    const RegEntry& e = entries()[s];
    if (e.state != kRegFree && e.domain == domain && !clear(s, domain)) ++stuck;
  }
  // Readers refuse what they cannot copy consistently, and the CDM is dead for them anyway.
  if (stuck)
    spdlog::warn("MDD table: {} entries of memory domain {} keep their seqlock taken (the owner's writer is stuck "
                 "or hostile); left as they are",
                 stuck, domain);
  for (auto it = made_.begin(); it != made_.end();) {  // ours, whatever the owner wrote over them
    auto next = std::next(it);
    if (it->second.domain == domain) clear(it->first);
    it = next;
  }
}

void ProcessMdd::drop_cq(uint32_t domain, uint32_t cq) {
  for (uint32_t s = 0; s < kRegSlots; ++s) {
    RegEntry& e = entries()[s];
    uint32_t seq = 0;
    if (e.state == kRegFree || e.domain != domain || e.dst_cq != cq || !reg_write_begin(e, seq)) continue;
    if (e.domain == domain && e.dst_cq == cq) e.dst_cq = kNoCq;
    reg_write_end(e, seq);
  }
}

size_t ProcessMdd::live(uint32_t domain) const {
  size_t n = 0;
  for (uint32_t s = 0; s < kRegSlots; ++s) {
    const RegEntry& e = entries()[s];
    if (e.state != kRegFree && e.domain == domain) ++n;
  }
  return n;
}

std::optional<uint32_t> ProcessMdd::vmdh_slot(uint32_t index, uint32_t domain) const {
  for (const auto& [slot, m] : made_)
    if (m.vmdh == index + 1 && m.domain == domain) return slot;
  return std::nullopt;
}

uint32_t ProcessMdd::made_vmdh(uint32_t slot) const {
  auto it = made_.find(slot);
  return it == made_.end() ? 0 : it->second.vmdh;
}

}  // namespace nicemu::daemon
