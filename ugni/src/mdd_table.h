// The process's MDD table of one credential on one node, as its owner writes it
// (nicemu/daemon/cdm/process_mdd.h has the daemon's side): every CDM of the process and
// credential maps the same memfd into its region; the owner keeps one writable mapping, made
// before it sealed the memfd, and writes plain registrations there without asking the daemon.
// Slot allocation is the library's alone, so the daemon writes only slots handed to it.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/shm_layout.h"

namespace nicemu::ugni {

struct Nic;

class MddTable {
 public:
  // The table behind the MDD memfd `fd` of a CDM just attached (the caller keeps the fd):
  // the one this process already writes, or a fresh one, mapped writable and sealed.
  // nullptr if it cannot be (a sealed memfd we have no writable mapping of).
  static std::shared_ptr<MddTable> attach(int fd);
  ~MddTable();
  MddTable(const MddTable&) = delete;
  MddTable& operator=(const MddTable&) = delete;

  enum SlotUse : uint8_t { kFree = 0, kOurs = 1, kDaemons = 2 };

  // Takes a free slot for a registration through memory domain `domain`, within the room the
  // daemon granted (asked for more through `n` when used up). kRegSlots if none.
  uint32_t take(Nic* n, uint32_t domain, SlotUse use);
  // Gives `slot` back (its entry is already free); room well beyond what is in use goes back
  // to the daemon through `n`, so the other processes of the job may have it.
  void give(Nic* n, uint32_t slot);
  // Writes a plain registration into `slot` (taken with kOurs), with a new generation.
  void publish(uint32_t slot, uint64_t address, uint64_t length, uint32_t flags, uint32_t dst_cq,
                   uint32_t domain);
  // Frees the entry of handle `f` if its slot is ours and holds that registration (domain,
  // first page); false otherwise.
  bool unpublish(const abi::mdh::Fields& f);
  SlotUse use(uint32_t slot);
  // The CDM of `domain` is gone (the daemon cleared its entries): its slots are free again.
  void forget_domain(uint32_t domain);

 private:
  MddTable() = default;
  abi::RegEntry& entry(uint32_t slot) const { return reinterpret_cast<abi::RegEntry*>(rw_)[slot]; }

  ino_t ino_ = 0;
  dev_t dev_ = 0;
  char* rw_ = nullptr;
  std::mutex mu_;
  std::vector<uint8_t> use_ = std::vector<uint8_t>(abi::kRegSlots, kFree);
  std::vector<uint16_t> domain_ = std::vector<uint16_t>(abi::kRegSlots, 0);
  // Free slots, the most recently freed last: taken from the back, so a process that
  // registers and deregisters keeps using the same few entries (warm pages and cache lines
  // for it, its peers and the daemon) instead of walking the whole table.
  std::vector<uint32_t> free_;
  uint64_t granted_ = 0;  // room the daemon gave us (ctl::RegBudget); in use: kRegSlots - free_.size()
};

}  // namespace nicemu::ugni
