#include "nicemu/daemon/stats_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace nicemu::daemon {

using namespace nicemu::abi::counters;

namespace {

uint64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error("counter page " + path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

StatsPage::StatsPage(const std::string& path, uint32_t nic_addr) : path_(path) {
  // A file page is built under a temporary name and renamed into place, so a reader never
  // maps a page that is not initialised yet, and a stale page of a dead daemon is replaced
  // whole.
  std::string tmp = path + ".tmp-" + std::to_string(getpid());
  void* p;
  if (path.empty()) {
    p = mmap(nullptr, kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("mmap", "(private)");
  } else {
    int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) fail("create " + tmp, path);
    if (fchmod(fd, 0644) != 0 || ftruncate(fd, static_cast<off_t>(kPageSize)) != 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = e;
      fail("size", path);
    }
    p = mmap(nullptr, kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      ::unlink(tmp.c_str());
      errno = e;
      fail("mmap", path);
    }
  }
  base_ = static_cast<char*>(p);
  hdr_ = new (base_) PageHeader{};
  hdr_->magic = kMagic;
  hdr_->version = kVersion;
  hdr_->header_size = sizeof(PageHeader);
  hdr_->nic_addr = nic_addr;
  hdr_->daemon_pid = static_cast<uint32_t>(getpid());
  hdr_->node_count = node::kCount;
  hdr_->cdm_count = cdm::kCount;
  hdr_->link_count = link::kCount;
  hdr_->cdm_entries = kCdmEntries;
  hdr_->link_entries = kLinkEntries;
  hdr_->page_size = kPageSize;
  hdr_->started_unix_ns = clock_ns(CLOCK_REALTIME);
  hdr_->node_offset = kNodeOffset;
  hdr_->totals_offset = kTotalsOffset;
  hdr_->cdm_table_offset = kCdmTableOffset;
  hdr_->link_table_offset = kLinkTableOffset;
  hdr_->refreshed_ns.store(clock_ns(CLOCK_MONOTONIC), std::memory_order_relaxed);
  hdr_->state.store(kPageLive, std::memory_order_release);
  node_ = reinterpret_cast<std::atomic<uint64_t>*>(base_ + kNodeOffset);
  totals_ = reinterpret_cast<std::atomic<uint64_t>*>(base_ + kTotalsOffset);
  if (!path.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    munmap(base_, kPageSize);
    base_ = nullptr;
    ::unlink(tmp.c_str());
    errno = e;
    fail("rename into place", path);
  }
}

StatsPage::~StatsPage() {
  if (!base_) return;
  hdr_->state.store(kPageStopped, std::memory_order_release);
  if (!path_.empty()) ::unlink(path_.c_str());
  munmap(base_, kPageSize);
}

CdmEntry* StatsPage::cdm_entry(int i) const {
  return reinterpret_cast<CdmEntry*>(base_ + kCdmTableOffset) + i;
}

LinkEntry* StatsPage::link_entry(int i) const {
  return reinterpret_cast<LinkEntry*>(base_ + kLinkTableOffset) + i;
}

void StatsPage::cdm_attached(uint64_t attach_id, pid_t pid, uid_t uid, uint32_t inst_id, uint32_t ptag,
                             uint32_t cookie) {
  Tracked t;
  for (uint32_t i = 0; i < kCdmEntries; ++i) {
    CdmEntry* e = cdm_entry(static_cast<int>(i));
    if (e->state != kEntryFree) continue;
    uint32_t s = e->seq.load(std::memory_order_relaxed);
    e->seq.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e->attach_id = attach_id;
    e->pid = static_cast<uint32_t>(pid);
    e->uid = static_cast<uint32_t>(uid);
    e->inst_id = inst_id;
    e->ptag = ptag;
    e->cookie = cookie;
    e->attached_unix_ns = clock_ns(CLOCK_REALTIME);
    for (auto& v : e->v) v.store(0, std::memory_order_relaxed);
    e->refreshed_ns.store(clock_ns(CLOCK_MONOTONIC), std::memory_order_relaxed);
    e->state = kEntryLive;
    e->seq.store(s + 2, std::memory_order_release);
    t.entry = static_cast<int>(i);
    break;
  }
  if (t.entry < 0) node(node::cdms_untracked).add(1);
  cdms_[attach_id] = t;
  node(node::cdms_attached).set(cdms_.size());
}

void StatsPage::refresh(uint64_t attach_id, const CdmCounterBlock* block) {
  auto it = cdms_.find(attach_id);
  if (it == cdms_.end() || !block) return;
  // The block is the client's: any value may be there. The magic is checked on every copy
  // (the client could overwrite it), and only growth is added to the totals.
  if (block->magic != kBlockMagic) return;
  Tracked& t = it->second;
  CdmEntry* e = t.entry >= 0 ? cdm_entry(t.entry) : nullptr;
  for (uint32_t c = 0; c < cdm::kCount; ++c) {
    uint64_t v = block->v[c].load(std::memory_order_relaxed);
    if (v > t.last[c]) {
      // Saturating: a client can report any growth, and a total that wrapped would go
      // backwards (found by fuzz/counter_block.cpp). One writer: load and store.
      const uint64_t cur = totals_[c].load(std::memory_order_relaxed), d = v - t.last[c];
      totals_[c].store(d > UINT64_MAX - cur ? UINT64_MAX : cur + d, std::memory_order_relaxed);
    }
    t.last[c] = v;
    if (e) e->v[c].store(v, std::memory_order_relaxed);
  }
  if (e) e->refreshed_ns.store(clock_ns(CLOCK_MONOTONIC), std::memory_order_relaxed);
}

void StatsPage::cdm_detached(uint64_t attach_id, const CdmCounterBlock* block) {
  refresh(attach_id, block);
  auto it = cdms_.find(attach_id);
  if (it == cdms_.end()) return;
  if (it->second.entry >= 0) {
    CdmEntry* e = cdm_entry(it->second.entry);
    uint32_t s = e->seq.load(std::memory_order_relaxed);
    e->seq.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e->state = kEntryFree;
    e->attach_id = 0;
    e->seq.store(s + 2, std::memory_order_release);
  } else {
    node(node::cdms_untracked).set(node(node::cdms_untracked).value() - 1);
  }
  cdms_.erase(it);
  node(node::cdms_attached).set(cdms_.size());
}

void StatsPage::refreshed() { hdr_->refreshed_ns.store(clock_ns(CLOCK_MONOTONIC), std::memory_order_relaxed); }

LinkEntry* StatsPage::link_of(uint32_t peer_addr) {
  auto it = links_.find(peer_addr);
  if (it == links_.end()) {
    if (links_.size() >= kLinkEntries) return nullptr;
    int i = static_cast<int>(links_.size());
    LinkEntry* e = link_entry(i);
    e->seq.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e->peer_addr = peer_addr;
    e->state = kEntryLive;
    e->seq.store(2, std::memory_order_release);
    it = links_.emplace(peer_addr, i).first;
  }
  return link_entry(it->second);
}

Counter StatsPage::link(uint32_t peer_addr, link::Counter c) {
  static std::atomic<uint64_t> overflow{0};  // links beyond the table are not shown
  LinkEntry* e = link_of(peer_addr);
  return Counter(e ? &e->v[c] : &overflow);
}

void StatsPage::link_sent(uint32_t peer_addr, uint64_t bytes, bool ok) {
  LinkEntry* e = link_of(peer_addr);
  if (!e) return;  // beyond the table: not shown
  if (!ok) {
    Counter(&e->v[link::send_failures]).add(1);
    return;
  }
  Counter(&e->v[link::messages_sent]).add(1);
  Counter(&e->v[link::bytes_sent]).add(bytes);
}

}  // namespace nicemu::daemon
