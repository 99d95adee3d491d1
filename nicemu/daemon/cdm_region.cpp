#include "nicemu/daemon/cdm_region.h"

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

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;

CdmRegion::CdmRegion(uint32_t nic_addr, uint32_t device_type, const ctl::Attach& req, pid_t pid,
                     uint64_t attach_id, uint64_t region_size)
    : size_(region_size),
      attach_id_(attach_id),
      inst_id_(req.inst_id),
      cred_{req.ptag, req.cookie},
      pid_(pid),
      heap_(kRoSize, region_size) {
  std::string name = "nicemu-cdm-" + std::to_string(pid) + "-" + std::to_string(req.inst_id);
  memfd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd_ < 0) throw std::runtime_error("memfd_create: " + std::string(strerror(errno)));
  if (ftruncate(memfd_, static_cast<off_t>(size_)) != 0 ||
      fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    int e = errno;
    close(memfd_);
    throw std::runtime_error("sizing region: " + std::string(strerror(e)));
  }
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(memfd_);
    throw std::runtime_error("mmap region: " + std::string(strerror(e)));
  }
  base_ = static_cast<char*>(p);
  auto* h = new (base_) RegionHeader{};
  h->magic = kRegionMagic;
  h->abi_version = kAbiVersion;
  h->header_size = sizeof(RegionHeader);
  h->nic_addr = nic_addr;
  h->inst_id = req.inst_id;
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
  if (memfd_ >= 0) close(memfd_);
}

bool CdmRegion::alive() const { return header()->state.load(std::memory_order_acquire) == kRegionAlive; }

int CdmRegion::mem_register(const ctl::MemRegister& req, ctl::MemRegisterReply& rep) {
  if (!alive()) return rc::kInvalidState;
  if (req.length == 0 || req.address + req.length < req.address) return rc::kInvalidParam;
  uint64_t first_page = req.address & ~(kPageSize - 1);
  uint64_t npages = (req.address + req.length - first_page + kPageSize - 1) / kPageSize;
  if (npages > 0xFFFFFFF) return rc::kInvalidParam;
  if (req.dst_cq != kNoCq && !cqs_.contains(req.dst_cq)) return rc::kInvalidParam;
  // Round-robin slot search, so a just-freed slot (and its generation) is reused last.
  uint32_t slot = kRegSlots;
  for (uint32_t i = 0; i < kRegSlots; ++i) {
    uint32_t s = (next_reg_slot_ + i) % kRegSlots;
    if (reg(s)->state == kRegFree) {
      slot = s;
      break;
    }
  }
  if (slot == kRegSlots) return rc::kErrorResource;
  next_reg_slot_ = (slot + 1) % kRegSlots;
  RegEntry* e = reg(slot);
  uint32_t seq = e->seq.load(std::memory_order_relaxed);
  e->seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e->gen = (e->gen + 1) & mdh::kGenMask;
  e->flags = req.flags;
  e->address = req.address;
  e->length = req.length;
  e->dst_cq = req.dst_cq;
  e->state = kRegLive;
  e->seq.store(seq + 2, std::memory_order_release);
  ++live_regs_;

  mdh::Fields f = mdh::registration_fields(req.address, req.length, e->gen, slot, req.flags & rc::kMemReadOnly);
  mdh::encode(f, rep.qword1, rep.qword2);
  return rc::kSuccess;
}

int CdmRegion::mem_deregister(const ctl::MemDeregister& req) {
  auto f = mdh::decode(req.qword1, req.qword2);
  if (!f) return rc::kInvalidParam;
  RegEntry* e = reg(f->slot);
  if (e->state != kRegLive || e->gen != f->gen || (e->address & ~(kPageSize - 1)) != f->va)
    return rc::kInvalidParam;
  uint32_t seq = e->seq.load(std::memory_order_relaxed);
  e->seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e->state = kRegFree;
  e->seq.store(seq + 2, std::memory_order_release);
  --live_regs_;
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
  for (uint32_t s = 0; s < kRegSlots; ++s)
    if (reg(s)->state == kRegLive && reg(s)->dst_cq == req.cq_index) return rc::kErrorResource;
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
    fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first),
              static_cast<off_t>(last - first));
}

int CdmRegion::mbox_open(const ctl::MboxOpen& req, ctl::MboxOpenReply& rep) {
  if (!alive()) return rc::kInvalidState;
  if (req.credits == 0 || req.credits > 65535 || req.max_size == 0 || req.max_size > 65535)
    return rc::kInvalidParam;
  auto f = mdh::decode(req.qword1, req.qword2);
  if (!f) return rc::kInvalidParam;
  RegEntry* e = reg(f->slot);
  if (e->state != kRegLive || e->gen != f->gen) return rc::kInvalidParam;
  // The mailbox must lie inside the registration, as the RDMA writes of real SMSG would.
  uint64_t need = smsg_buffer_size(req.credits, req.max_size);
  uint64_t start = req.msg_buffer + req.mbox_offset;
  if (start < e->address || start + need > e->address + e->length) return rc::kInvalidParam;
  MboxKey key{f->slot, f->gen, req.mbox_offset};
  if (auto it = mboxes_.find(key); it != mboxes_.end()) {
    if (it->second.credits != req.credits || it->second.max_size != req.max_size) return rc::kInvalidParam;
    rep.ctl_offset = it->second.ctl_offset;
    rep.bytes = it->second.bytes;
    rep.dst_cq = e->dst_cq;
    return rc::kSuccess;
  }
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

void CdmRegion::notify_datagram() {
  header()->dgram_seq.fetch_add(1, std::memory_order_release);
  futex_wake_all(&header()->dgram_seq);
}

void CdmRegion::kill(RegionState why) {
  RegionHeader* h = header();
  if (h->state.load() != kRegionAlive) return;
  // State first: a peer that then finds a registration gone knows why (peer gone, not a
  // protection error).
  h->state.store(why, std::memory_order_seq_cst);
  for (uint32_t s = 0; s < kRegSlots; ++s) {
    RegEntry* e = reg(s);
    if (e->state != kRegLive) continue;
    uint32_t seq = e->seq.load(std::memory_order_relaxed);
    e->seq.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e->state = kRegFree;
    e->seq.store(seq + 2, std::memory_order_release);
  }
  live_regs_ = 0;
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
