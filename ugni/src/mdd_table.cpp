#include "mdd_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <utility>

#include "internal.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/region_map.h"

namespace nicemu::ugni {

using namespace nicemu::abi;

namespace {
std::mutex g_tables_mu;
std::map<std::pair<dev_t, ino_t>, std::weak_ptr<MddTable>> g_tables;  // by the memfd's inode

// Room asked of the daemon at a time: enough that a registering loop rarely asks, little
// enough that one process does not hold back what its job's others could use.
constexpr uint64_t kRoomStep = 256;

// Asks the daemon for `want` more registrations' room and gives `give_back` back; the room
// added, or -1 if the daemon did not answer.
int64_t room_call(Nic* n, uint64_t want, uint64_t give_back) {
  abi::ctl::RegBudget req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kRegBudget);
  req.want = static_cast<uint32_t>(want);
  req.give_back = static_cast<uint32_t>(give_back);
  abi::ctl::RegBudgetReply rep{};
  return daemon_call(n, req, rep) == GNI_RC_SUCCESS ? int64_t{rep.added} : -1;
}
}  // namespace

std::shared_ptr<MddTable> MddTable::attach(int fd) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != kMddBytes) return nullptr;
  std::lock_guard<std::mutex> lk(g_tables_mu);
  auto key = std::make_pair(st.st_dev, st.st_ino);
  if (auto it = g_tables.find(key); it != g_tables.end())
    if (auto t = it->second.lock()) return t;
  // A fresh table: ours to write through this mapping only, once sealed (region_map.h).
  void* b = mmap(nullptr, kMddBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (b == MAP_FAILED) return nullptr;
  if (fcntl(fd, F_ADD_SEALS, kMddOwnerSeals) != 0) {
    munmap(b, kMddBytes);
    return nullptr;
  }
  std::shared_ptr<MddTable> t(new MddTable);
  t->free_.reserve(kRegSlots);
  for (uint32_t s = kRegSlots; s-- > 0;) t->free_.push_back(s);  // slot 0 first
  t->rw_ = static_cast<char*>(b);
  t->dev_ = st.st_dev;
  t->ino_ = st.st_ino;
  g_tables[key] = t;
  return t;
}

MddTable::~MddTable() {
  {
    std::lock_guard<std::mutex> lk(g_tables_mu);
    if (auto it = g_tables.find({dev_, ino_}); it != g_tables.end() && it->second.expired()) g_tables.erase(it);
  }
  if (rw_) munmap(rw_, kMddBytes);
}

uint32_t MddTable::take(Nic* n, uint32_t domain, SlotUse use) {
  std::lock_guard<std::mutex> lk(mu_);
  if (kRegSlots - free_.size() >= granted_) {
    const int64_t added = room_call(n, std::max<uint64_t>(kRoomStep, std::min<uint64_t>(granted_, kRegSlots)), 0);
    if (added <= 0) return kRegSlots;
    granted_ += static_cast<uint64_t>(added);
  }
  // A reused slot gets a new generation (publish, ProcessMdd::store); an old handle that names
  // it is refused unless the new registration is the same pages of the same memory domain,
  // which the hardware's MDD accepts too.
  if (free_.empty()) return kRegSlots;
  const uint32_t s = free_.back();
  free_.pop_back();
  use_[s] = use;
  domain_[s] = static_cast<uint16_t>(domain);
  return s;
}

void MddTable::give(Nic* n, uint32_t slot) {
  std::lock_guard<std::mutex> lk(mu_);
  if (slot >= kRegSlots || use_[slot] == kFree) return;
  use_[slot] = kFree;
  free_.push_back(slot);
  // Room far beyond what is in use goes back; a step stays for the next registrations.
  const uint64_t used = kRegSlots - free_.size();
  if (granted_ >= used + 4 * kRoomStep) {
    const uint64_t back = granted_ - used - kRoomStep;
    if (room_call(n, 0, back) >= 0) granted_ -= back;
  }
}

void MddTable::publish(uint32_t slot, uint64_t address, uint64_t length, uint32_t flags, uint32_t dst_cq,
                           uint32_t domain) {
  RegEntry& e = entry(slot);
  uint32_t seq = 0;
  // Only the daemon's reclaim of a gone CDM competes for an entry, and never for a slot we
  // hold: the wait is for a writer that is already leaving.
  while (!reg_write_begin(e, seq)) {
  }
  e.gen = (e.gen + 1) & mdh::kGenMask;
  e.flags = flags;
  e.address = address;
  e.length = length;
  e.dst_cq = dst_cq;
  e.seg_count = 0;
  e.seg_first = 0;
  e.domain = domain;
  e.vmdh = 0;
  e.state = kRegLive;
  reg_write_end(e, seq);
}

bool MddTable::unpublish(const mdh::Fields& f) {
  if (f.slot >= kRegSlots || (f.flags & mdh::kFlagVmdh)) return false;  // vMDH ones are the daemon's
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (use_[f.slot] != kOurs || domain_[f.slot] != f.domain) return false;
  }
  RegEntry& e = entry(f.slot);
  uint32_t seq = 0;
  while (!reg_write_begin(e, seq)) {
  }
  const bool named = region_entry_holds(f, e);
  if (named) e.state = kRegFree;
  reg_write_end(e, seq);
  return named;
}

MddTable::SlotUse MddTable::use(uint32_t slot) {
  std::lock_guard<std::mutex> lk(mu_);
  return slot < kRegSlots ? static_cast<SlotUse>(use_[slot]) : kFree;
}

void MddTable::forget_domain(uint32_t domain) {
  std::lock_guard<std::mutex> lk(mu_);
  for (uint32_t s = 0; s < kRegSlots; ++s)
    if (use_[s] != kFree && domain_[s] == domain) {
      use_[s] = kFree;
      free_.push_back(s);
    }
}

}  // namespace nicemu::ugni
