#include "nicemu/daemon/cdm/cdm_region.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "nicemu/abi/bte_ring.h"
#include "nicemu/abi/counters_layout.h"
#include "nicemu/abi/futex.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/region_map.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;

CdmRegion::CdmRegion(uint32_t nic_addr, uint32_t device_type, const ctl::Attach& req, pid_t pid,
                     uint64_t attach_id, uint64_t region_size, uint32_t mem_domain, std::shared_ptr<ProcessMdd> mdd)
    : mdd_(std::move(mdd)),
      size_(region_size),
      attach_id_(attach_id),
      inst_id_(req.inst_id),
      mem_domain_(mem_domain),
      cred_{req.ptag, req.cookie},
      pid_(pid),
      heap_(kRoSize, region_size) {
  // Three memfds (region_map.h): the read-only section, the process's MDD table, the heap.
  if (size_ <= kRoSize) throw std::runtime_error("region size " + std::to_string(size_) + " leaves no heap");
  std::string name = "nicemu-cdm-" + std::to_string(pid) + "-" + std::to_string(req.inst_id);
  auto fail = [&](const char* what) {
    int e = errno;
    if (ro_fd_ >= 0) close(ro_fd_);
    if (heap_fd_ >= 0) close(heap_fd_);
    throw std::runtime_error(std::string(what) + " of the region of pid " + std::to_string(pid) + ": " + strerror(e));
  };
  ro_fd_ = memfd_create((name + "-ro").c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  heap_fd_ = memfd_create((name + "-heap").c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (ro_fd_ < 0 || heap_fd_ < 0) fail("memfd_create");
  if (ftruncate(ro_fd_, static_cast<off_t>(kRoSize)) != 0 ||
      ftruncate(heap_fd_, static_cast<off_t>(size_ - kRoSize)) != 0)
    fail("sizing");
  // The MDD table read-only here: once its owner sealed it, only ProcessMdd's first mapping
  // writes it (and that is where the daemon writes it).
  base_ = map_region(ro_fd_, mdd_->memfd(), heap_fd_, size_, PROT_READ | PROT_WRITE, PROT_READ);
  if (!base_) fail("mapping");
  // Sealed after the daemon's own writable mapping exists: it keeps working, and nobody
  // (the daemon included) can map the read-only section writable again.
  if (fcntl(ro_fd_, F_ADD_SEALS, kRoSeals) != 0 || fcntl(heap_fd_, F_ADD_SEALS, kHeapSeals) != 0) {
    munmap(base_, size_);
    base_ = nullptr;
    fail("sealing");
  }
  auto* h = new (base_) RegionHeader{};
  h->magic = kRegionMagic;
  h->abi_version = kAbiVersion;
  h->header_size = sizeof(RegionHeader);
  h->nic_addr = nic_addr;
  h->inst_id = req.inst_id;
  h->mem_domain = mem_domain;
  h->ptag = req.ptag;
  h->cookie = req.cookie;
  h->owner_pid = static_cast<uint32_t>(pid);
  h->device_type = device_type;
  h->modes = req.modes;
  h->attach_id = attach_id;
  h->region_size = size_;
  h->ro_size = kRoSize;
  h->reg_table_offset = kRegTableOffset;
  h->cq_table_offset = kCqTableOffset;
  h->reg_slots = kRegSlots;
  h->cq_slots = kCqSlots;
  // The AMO lock table first, so its offset is the start of the heap (it must fit the
  // header's 32-bit field); the fresh memfd is zero, i.e. every lock free.
  static_assert(kRoSize + uint64_t{kAmoLocks} * sizeof(AmoLock) <= UINT32_MAX);
  if (auto off = heap_.allocate(uint64_t{kAmoLocks} * sizeof(AmoLock)); off && *off <= UINT32_MAX) {
    h->amo_lock_offset = static_cast<uint32_t>(*off);
    h->amo_lock_count = kAmoLocks;
  }
  // The client's counter block (counters_layout.h), also below 4 GiB; zero counters.
  if (auto off = heap_.allocate(sizeof(counters::CdmCounterBlock)); off && *off <= UINT32_MAX) {
    auto* b = new (base_ + *off) counters::CdmCounterBlock{};
    b->magic = counters::kBlockMagic;
    b->version = counters::kVersion;
    b->slots = counters::kCdmSlots;
    h->counters_offset = static_cast<uint32_t>(*off);
    counters_ = b;
  }
  h->state.store(kRegionAlive, std::memory_order_release);
}

CdmRegion::~CdmRegion() {
  if (base_) munmap(base_, size_);
  if (ro_fd_ >= 0) close(ro_fd_);
  if (heap_fd_ >= 0) close(heap_fd_);
}

bool CdmRegion::alive() const { return header()->state.load(std::memory_order_acquire) == kRegionAlive; }

int CdmRegion::check_register(const RegSpec& spec) const {
  if (!alive()) return rc::kInvalidState;
  if (spec.length == 0) return rc::kInvalidParam;
  if (spec.segments.empty()) {
    if (spec.address + spec.length < spec.address) return rc::kInvalidParam;
    uint64_t first_page = spec.address & ~(kPageSize - 1);
    if ((spec.address + spec.length - first_page + kPageSize - 1) / kPageSize > 0xFFFFFFF) return rc::kInvalidParam;
  } else {
    if (spec.segments.size() > kMaxRegSegments) return rc::kInvalidParam;
    uint64_t total = 0;
    for (const ctl::MemSegment& g : spec.segments) {
      if (g.address == 0 || g.length == 0 || g.address + g.length < g.address || total + g.length < total)
        return rc::kInvalidParam;
      total += g.length;
    }
    if (total != spec.length || (total + kPageSize - 1) / kPageSize > 0xFFFFFFF) return rc::kInvalidParam;
  }
  if (spec.dst_cq != kNoCq && !cqs_.contains(spec.dst_cq)) return rc::kInvalidParam;
  return rc::kSuccess;
}

int CdmRegion::cq_create(const ctl::CqCreate& req, ctl::CqCreateReply& rep) {
  if (!alive()) return rc::kInvalidState;
  if (req.entry_count == 0 || req.entry_count > (1u << 24)) return rc::kInvalidParam;
  uint32_t cap = 16;
  while (cap < req.entry_count) cap <<= 1;
  uint32_t slot = kCqSlots;
  for (uint32_t s = 0; s < kCqSlots; ++s)
    if (!cqs_.contains(s)) {
      slot = s;
      break;
    }
  if (slot == kCqSlots) return rc::kErrorResource;
  uint64_t bytes = sizeof(CqRingCtl) + uint64_t{cap} * sizeof(uint64_t);
  auto off = heap_.allocate(bytes);
  if (!off) return rc::kErrorNomem;
  std::memset(base_ + *off, 0, bytes);
  new (base_ + *off) CqRingCtl{};
  CqDesc* d = cq(slot);
  d->mode = req.mode;
  d->capacity = cap;
  d->ctl_offset = *off;
  d->entries_offset = *off + sizeof(CqRingCtl);
  d->state.store(kCqLive, std::memory_order_release);
  cqs_[slot] = *off;
  rep.cq_index = slot;
  rep.capacity = cap;
  rep.ctl_offset = d->ctl_offset;
  rep.entries_offset = d->entries_offset;
  return rc::kSuccess;
}

int CdmRegion::cq_destroy(const ctl::CqDestroy& req) {
  auto it = cqs_.find(req.cq_index);
  if (it == cqs_.end()) return rc::kInvalidParam;
  // Registrations that name this CQ for remote events lose it (their later remote events
  // are dropped): clients destroy their receive CQ before deregistering the mailboxes that
  // feed it (Open MPI's btl/ugni does), and §11.2 refuses only while an EP uses the CQ.
  mdd_->drop_cq(mem_domain_, req.cq_index);
  CqDesc* d = cq(req.cq_index);
  d->state.store(kCqFree, std::memory_order_release);
  uint64_t bytes = sizeof(CqRingCtl) + uint64_t{d->capacity} * sizeof(uint64_t);
  release_heap(it->second, bytes);
  cqs_.erase(it);
  return rc::kSuccess;
}

void CdmRegion::release_heap(uint64_t offset, uint64_t bytes) {
  heap_.release(offset);
  // Give whole pages of large blocks back to the kernel.
  uint64_t first = (offset + kPageSize - 1) & ~(kPageSize - 1);
  uint64_t last = (offset + bytes) & ~(kPageSize - 1);
  if (last > first && last - first >= 16 * kPageSize)
    fallocate(heap_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first - kRoSize),
              static_cast<off_t>(last - first));
}

int CdmRegion::mbox_open(const ctl::MboxOpen& req, ctl::MboxOpenReply& rep, bool may_create) {
  if (!alive()) return rc::kInvalidState;
  if (req.credits == 0 || req.credits > 65535 || req.max_size == 0 || req.max_size > 65535)
    return rc::kInvalidParam;
  auto f = mdh::decode(req.qword1, req.qword2);
  if (!f) return rc::kInvalidParam;
  RegEntry copy;  // the owner writes its table: decide on one consistent copy
  if (f->slot >= kRegSlots || !region_read_entry(mdd_->entry(f->slot), copy)) return rc::kInvalidParam;
  const RegEntry* e = &copy;
  if (e->state != kRegLive || !region_entry_owner(*f, *e)) return rc::kInvalidParam;
  // The mailbox must lie inside the registration, as the RDMA writes of real SMSG would.
  uint64_t need = smsg_buffer_size(req.credits, req.max_size);
  uint64_t start = req.msg_buffer + req.mbox_offset;
  if (start < e->address || start + need > e->address + e->length) return rc::kInvalidParam;
  MboxKey key{f->slot, e->gen, req.mbox_offset};
  if (auto it = mboxes_.find(key); it != mboxes_.end()) {
    if (it->second.credits != req.credits || it->second.max_size != req.max_size) return rc::kInvalidParam;
    rep.ctl_offset = it->second.ctl_offset;
    rep.bytes = it->second.bytes;
    rep.dst_cq = e->dst_cq;
    return rc::kSuccess;
  }
  if (!may_create) return rc::kErrorResource;
  uint64_t bytes = mbox_bytes(req.credits, req.max_size);
  auto off = heap_.allocate(bytes);
  if (!off) return rc::kErrorNomem;
  std::memset(base_ + *off, 0, bytes);
  auto* m = new (base_ + *off) MboxCtl{};
  m->magic = kMboxMagic;
  m->credits = req.credits;
  m->slot_size = mbox_slot_size(req.max_size);
  m->max_size = req.max_size;
  mboxes_[key] = Mbox{*off, bytes, req.credits, req.max_size};
  rep.ctl_offset = *off;
  rep.bytes = bytes;
  rep.dst_cq = e->dst_cq;
  return rc::kSuccess;
}

int CdmRegion::bte_ring(uint64_t& ctl_offset) {
  if (!alive()) return rc::kInvalidState;
  if (bte_ring_offset_ == 0) {
    uint64_t bytes = bte_ring_bytes(kBteRingCapacity);
    auto off = heap_.allocate(bytes);
    if (!off) return rc::kErrorNomem;
    std::memset(base_ + *off, 0, bytes);  // every slot unpublished (seq 0)
    bte_ring_offset_ = *off;
  }
  ctl_offset = bte_ring_offset_;
  return rc::kSuccess;
}

int CdmRegion::dgram_ring(uint64_t& ctl_offset) {
  if (!alive()) return rc::kInvalidState;
  if (!dgram_ring_.valid()) {
    uint64_t bytes = dgram_ring_bytes(kDgramRingCapacity);
    auto off = heap_.allocate(bytes);
    if (!off) return rc::kErrorNomem;
    std::memset(base_ + *off, 0, bytes);
    dgram_ring_offset_ = *off;
    dgram_ring_.ctl = reinterpret_cast<DgramRingCtl*>(base_ + *off);
    dgram_ring_.events = reinterpret_cast<DgramEvent*>(base_ + *off + sizeof(DgramRingCtl));
    dgram_ring_.mask = kDgramRingCapacity - 1;
  }
  ctl_offset = dgram_ring_offset_;
  return rc::kSuccess;
}

bool CdmRegion::push_datagram(const DgramEvent& e) {
  if (!dgram_ring_.valid() || !alive()) return false;
  if (dgram_ring_.push(e)) return true;
  // Full: ask for a kick, then look again in case the library drained meanwhile.
  dgram_ring_.ctl->stalled.store(1, std::memory_order_seq_cst);
  return dgram_ring_.push(e);
}

void CdmRegion::notify_datagram() {
  header()->dgram_seq.fetch_add(1, std::memory_order_release);
  futex_wake_all(&header()->dgram_seq);
}

std::optional<uint64_t> CdmRegion::heap_block(uint64_t bytes) {
  if (!alive()) return std::nullopt;
  auto off = heap_.allocate(bytes);
  if (off) std::memset(base_ + *off, 0, bytes);
  return off;
}

char* CdmRegion::heap_ptr(uint64_t offset, uint64_t bytes) const {
  if (!region_in_heap(size_, offset, bytes)) return nullptr;
  return base_ + offset;
}

bool CdmRegion::push_cqe(uint32_t slot, uint64_t entry) const { return push_cqes(slot, &entry, 1) == 1; }

size_t CdmRegion::push_cqes(uint32_t slot, const uint64_t* entries, size_t n) const {
  if (!alive()) return 0;
  CqRingView v = region_cq_view(base_, size_, slot);
  return v.valid() ? v.push_n(entries, n) : 0;
}

void CdmRegion::kill(RegionState why) {
  RegionHeader* h = header();
  if (h->state.load() != kRegionAlive) return;
  // State first: a peer that then finds a registration gone knows why (peer gone, not a
  // protection error).
  h->state.store(why, std::memory_order_seq_cst);
  // Its registrations go (those through its siblings stay: the table is the process's).
  mdd_->drop_domain(mem_domain_);
  h->down_futex.fetch_add(1);
  futex_wake_all(&h->down_futex);
  h->dgram_seq.fetch_add(1);
  futex_wake_all(&h->dgram_seq);
  for (auto& [slot, off] : cqs_) {
    auto* ctl = reinterpret_cast<CqRingCtl*>(base_ + off);
    ctl->futex.fetch_add(1);
    futex_wake_all(&ctl->futex);
    cq(slot)->state.store(kCqFree, std::memory_order_release);
  }
  cqs_.clear();
  mboxes_.clear();
}

}  // namespace nicemu::daemon
