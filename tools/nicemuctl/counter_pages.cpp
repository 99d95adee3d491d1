#include "counter_pages.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/core.h>

#include "daemon_link.h"
#include "nicemu/abi/counters_layout.h"

namespace nicemu::tools {

using namespace nicemu::abi::counters;

namespace {

class Mapping {
 public:
  Mapping(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw CtlError(fmt::format("counter page {}: {}", path, std::strerror(errno)));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(PageHeader))) {
      ::close(fd);
      throw CtlError(fmt::format("counter page {}: too small to be a counter page", path));
    }
    size_ = static_cast<size_t>(st.st_size);
    void* p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw CtlError(fmt::format("counter page {}: mmap: {}", path, std::strerror(e)));
    base_ = static_cast<const char*>(p);
  }
  ~Mapping() { munmap(const_cast<char*>(base_), size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const char* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  const char* base_ = nullptr;
  size_t size_ = 0;
};

std::vector<uint64_t> read_counters(const std::atomic<uint64_t>* v, uint32_t present, uint32_t known) {
  std::vector<uint64_t> out(known, 0);
  for (uint32_t i = 0; i < known && i < present; ++i) out[i] = v[i].load(std::memory_order_relaxed);
  return out;
}

bool process_exists(uint32_t pid) { return pid != 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

}  // namespace

NodeSnapshot read_counter_page(const std::string& path) {
  Mapping m(path);
  auto bad = [&](const std::string& why) { return CtlError(fmt::format("counter page {}: {}", path, why)); };
  const auto* h = reinterpret_cast<const PageHeader*>(m.base());
  if (h->magic != kMagic) throw bad("not a nicemu counter page (magic)");
  if (h->version != kVersion) throw bad(fmt::format("layout version {}, this nicemuctl reads {}", h->version, kVersion));
  if (h->header_size != sizeof(PageHeader) || h->page_size != m.size()) throw bad("header does not match the file size");
  // Offsets and counts come from the file: every table must lie inside it.
  auto fits = [&](uint64_t off, uint64_t count, uint64_t each) {
    return off % 8 == 0 && count <= m.size() && off <= m.size() && count * each <= m.size() - off;
  };
  if (h->node_count > kNodeSlots || h->cdm_count > kCdmSlots || h->link_count > kLinkSlots ||
      !fits(h->node_offset, kNodeSlots, 8) || !fits(h->totals_offset, kCdmSlots, 8) ||
      !fits(h->cdm_table_offset, h->cdm_entries, sizeof(CdmEntry)) ||
      !fits(h->link_table_offset, h->link_entries, sizeof(LinkEntry)))
    throw bad("tables outside the file");

  NodeSnapshot s;
  s.page = path;
  s.nic_addr = h->nic_addr;
  s.daemon_pid = h->daemon_pid;
  s.running = h->state.load(std::memory_order_acquire) == kPageLive && process_exists(h->daemon_pid);
  s.started_unix_ns = h->started_unix_ns;
  s.refreshed_ns = h->refreshed_ns.load(std::memory_order_relaxed);
  s.node = read_counters(reinterpret_cast<const std::atomic<uint64_t>*>(m.base() + h->node_offset), h->node_count,
                         node::kCount);
  s.totals = read_counters(reinterpret_cast<const std::atomic<uint64_t>*>(m.base() + h->totals_offset),
                           h->cdm_count, cdm::kCount);
  const auto* cdms = reinterpret_cast<const CdmEntry*>(m.base() + h->cdm_table_offset);
  for (uint32_t i = 0; i < h->cdm_entries; ++i) {
    const CdmEntry& e = cdms[i];
    // Identity under the entry's seqlock; the counters are independent relaxed values.
    for (int tries = 0; tries < 100; ++tries) {
      uint32_t s1 = e.seq.load(std::memory_order_acquire);
      if (s1 & 1) continue;
      CdmSnapshot c;
      uint32_t state = e.state;
      c.attach_id = e.attach_id;
      c.pid = e.pid;
      c.uid = e.uid;
      c.inst_id = e.inst_id;
      c.ptag = e.ptag;
      c.cookie = e.cookie;
      c.attached_unix_ns = e.attached_unix_ns;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (e.seq.load(std::memory_order_relaxed) != s1) continue;
      if (state == kEntryLive) {
        c.refreshed_ns = e.refreshed_ns.load(std::memory_order_relaxed);
        c.v = read_counters(e.v, h->cdm_count, cdm::kCount);
        s.cdms.push_back(std::move(c));
      }
      break;
    }
  }
  const auto* links = reinterpret_cast<const LinkEntry*>(m.base() + h->link_table_offset);
  for (uint32_t i = 0; i < h->link_entries; ++i) {
    const LinkEntry& e = links[i];
    if (e.seq.load(std::memory_order_acquire) & 1) continue;
    if (e.state != kEntryLive) continue;
    s.links.push_back(LinkSnapshot{e.peer_addr, read_counters(e.v, h->link_count, link::kCount)});
  }
  return s;
}

}  // namespace nicemu::tools
