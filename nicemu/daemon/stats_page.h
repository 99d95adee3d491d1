// The node's counter page (layout in nicemu/abi/counters_layout.h): a file next to the
// control socket that the daemon alone writes and any local tool maps read-only. Node and
// link counters are updated in place; the CDM counters that clients keep in their regions
// are copied in by refresh().
#pragma once
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "nicemu/abi/counters_layout.h"

namespace nicemu::daemon {

// One counter slot of the page. Relaxed atomics: readers want a recent value, not an
// ordering. One writer, the daemon's event loop (the BTE threads keep no page counters), so
// an increment is a plain load and store: a locked add on the hot paths would wait for the
// stores before it, into lines a rank is polling, at every message.
class Counter {
 public:
  Counter() = default;
  explicit Counter(std::atomic<uint64_t>* slot) : slot_(slot) {}
  Counter& operator++() {
    add(1);
    return *this;
  }
  void operator++(int) { add(1); }
  void add(uint64_t n) { slot_->store(slot_->load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void set(uint64_t n) { slot_->store(n, std::memory_order_relaxed); }
  uint64_t value() const { return slot_->load(std::memory_order_relaxed); }
  operator uint64_t() const { return value(); }

 private:
  static inline std::atomic<uint64_t> unbound_{0};  // until bound to the page
  std::atomic<uint64_t>* slot_ = &unbound_;
};

class StatsPage {
 public:
  // Creates the page at `path` (replacing a stale file atomically, mode 0644) or, with an
  // empty path, in private memory (unit tests). Throws std::runtime_error with the path
  // and errno text.
  StatsPage(const std::string& path, uint32_t nic_addr);
  // Marks the page stopped and removes the file.
  ~StatsPage();
  StatsPage(const StatsPage&) = delete;
  StatsPage& operator=(const StatsPage&) = delete;

  const std::string& path() const { return path_; }
  Counter node(abi::counters::node::Counter c) { return Counter(&node_[c]); }
  uint64_t total(abi::counters::cdm::Counter c) const { return totals_[c].load(std::memory_order_relaxed); }

  // A CDM attached: gets a page entry if one is free (else it is counted in totals only).
  void cdm_attached(uint64_t attach_id, pid_t pid, uid_t uid, uint32_t inst_id, uint32_t ptag, uint32_t cookie);
  // Copies the client's block into the CDM's entry and adds what grew since the last copy
  // to the totals. `block` may be null (a region without one).
  void refresh(uint64_t attach_id, const abi::counters::CdmCounterBlock* block);
  // The CDM is gone: a last refresh, then its entry is freed.
  void cdm_detached(uint64_t attach_id, const abi::counters::CdmCounterBlock* block);
  // Stamps the time of a completed refresh round.
  void refreshed();

  // A counter of the link to the daemon of `peer_addr` (entry made on first use).
  Counter link(uint32_t peer_addr, abi::counters::link::Counter c);
  // One message to that daemon: sent (`bytes` long) or refused. One look-up of the entry:
  // the fabric port counts every message it sends with it.
  void link_sent(uint32_t peer_addr, uint64_t bytes, bool ok);

  const abi::counters::PageHeader& header() const { return *hdr_; }

 private:
  struct Tracked {
    int entry = -1;  // index in the CDM table, -1 = untracked (table full)
    std::array<uint64_t, abi::counters::kCdmSlots> last{};
  };
  abi::counters::CdmEntry* cdm_entry(int i) const;
  abi::counters::LinkEntry* link_entry(int i) const;
  // The link entry of `peer_addr`, made on first use; nullptr when the table is full.
  abi::counters::LinkEntry* link_of(uint32_t peer_addr);

  std::string path_;
  char* base_ = nullptr;
  abi::counters::PageHeader* hdr_ = nullptr;
  std::atomic<uint64_t>* node_ = nullptr;
  std::atomic<uint64_t>* totals_ = nullptr;
  std::map<uint64_t, Tracked> cdms_;   // attach_id -> its entry and last copied values
  std::map<uint32_t, int> links_;      // peer NIC address -> entry
};

}  // namespace nicemu::daemon
