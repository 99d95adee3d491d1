// Process-wide context: which daemon this process belongs to, region mappings, and the
// primitives the requester uses on peers' memory.
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "internal.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/region_map.h"
#include "nicemu/common/params.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::ugni {

using namespace nicemu::abi;

std::shared_ptr<Region> Region::map(int (&fds)[3], uint64_t size, uint64_t ro_size) {
  char* b = nullptr;
  if (ro_size == kRoSize && fds[0] >= 0 && fds[1] >= 0 && ro_sealed(fds[0]) && fd_write_sealed(fds[1]))
    b = map_region(fds[0], fds[1], fds[2], size);
  for (int& fd : fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  if (!b) return nullptr;
  auto r = std::make_shared<Region>();
  r->base = b;
  r->size = size;
  const RegionHeader* h = r->header();
  if (h->magic != kRegionMagic || h->abi_version != kAbiVersion || h->region_size != size) return nullptr;
  r->pid = static_cast<pid_t>(h->owner_pid);
  r->attach_id = h->attach_id;
  r->nic_addr = h->nic_addr;
  r->inst_id = h->inst_id;
  return r;
}

Region::~Region() {
  if (base) munmap(base, size);
}

bool Region::read_reg(uint32_t slot, RegEntry& out) const { return region_read_reg(base, slot, out); }

CqRingView Region::cq_view(uint32_t slot) const { return region_cq_view(base, size, slot); }

namespace {
// First entry of a colon-separated list in the environment. Read once: clients strtok
// these variables in place (see the PMI fact sheet).
long first_env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end;
  unsigned long x = std::strtoul(v, &end, 10);
  return end == v ? -1 : static_cast<long>(x);
}
}  // namespace

std::string daemon_socket() {
  static const std::string path = [] {
    if (const char* s = std::getenv(params::param("client_socket").env.data()); s && *s) return std::string(s);
    std::string rundir = nicemu::ctl::default_rundir();
    long node = first_env_number(params::param("client_node").env.data());
    if (node < 0) node = first_env_number("PMI_GNI_LOC_ADDR");
    if (node >= 0) return nicemu::ctl::socket_path(rundir, static_cast<uint32_t>(node));
    auto nodes = nicemu::ctl::list_nodes(rundir);
    return nodes.empty() ? std::string() : nicemu::ctl::socket_path(rundir, nodes.front());
  }();
  return path;
}

bool daemon_hello(abi::ctl::HelloReply& out) {
  static std::mutex mu;
  static bool have = false;
  static abi::ctl::HelloReply cached{};
  std::lock_guard<std::mutex> lk(mu);
  if (!have) {
    nicemu::ctl::Connection c;
    std::string path = daemon_socket();
    if (path.empty() || !c.connect(path)) return false;
    abi::ctl::Hello req{};
    req.h.op = static_cast<uint16_t>(abi::ctl::Op::kHello);
    abi::ctl::HelloReply rep{};
    if (!c.call(req, rep) || rep.r.rc != GNI_RC_SUCCESS) return false;
    cached = rep;
    have = true;
  }
  out = cached;
  return true;
}

uint32_t spin_ns() {
  static const uint32_t ns = static_cast<uint32_t>(params::env_uint(params::param("spin_us")) * 1000);
  return ns;
}

namespace {
pid_t g_pid = getpid();
void refresh_pid() { g_pid = getpid(); }
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, refresh_pid);
// A copy refused although the peer's first check allowed it (Nic::note_reach): its owner or
// this process changed credentials, or a seccomp filter came later. Said once, on stderr
// (the library has no log of its own); the post completes with MEM_ACCESS.
void refused() {
  std::fprintf(stderr,
               "libugni(nicemu): a cross-memory copy to a peer was refused although the peer was reachable when "
               "first mapped (changed credentials, a seccomp filter installed since): the post completes with "
               "a MEM_ACCESS error (docs/decisions.md)\n");
}
[[maybe_unused]] const bool g_refused_hook = (xmem::on_refused(refused), true);
}  // namespace

pid_t self_pid() { return g_pid; }

uint64_t xmem_write(pid_t pid, uint64_t remote, const void* local, uint64_t len) {
  if (len == 0) return cqe::kOk;
  if (pid == g_pid) {
    std::memmove(reinterpret_cast<void*>(remote), local, len);
    return cqe::kOk;
  }
  return xmem::copy(true, pid, remote, const_cast<void*>(local), len, cqe::kErrPeerGone);
}

uint64_t xmem_read(pid_t pid, uint64_t remote, void* local, uint64_t len) {
  if (len == 0) return cqe::kOk;
  if (pid == g_pid) {
    std::memmove(local, reinterpret_cast<const void*>(remote), len);
    return cqe::kOk;
  }
  return xmem::copy(false, pid, remote, local, len, cqe::kErrPeerGone);
}

uint64_t validate_access(const Region& r, const gni_mem_handle_t& h, uint64_t addr, uint64_t len, bool write,
                         uint32_t* dst_cq) {
  return region_check_access(r.base, h.qword1, h.qword2, addr, len, write, dst_cq);
}

uint64_t translate_access(const Region& r, const gni_mem_handle_t& h, uint64_t addr, uint64_t len, bool write,
                          uint32_t* dst_cq, Extents& out) {
  return region_translate(r.base, h.qword1, h.qword2, addr, len, write, dst_cq, out);
}

uint64_t xmem_write_pieces(pid_t pid, const Extents& remote, const void* local) {
  const char* p = static_cast<const char*>(local);
  for (size_t i = 0; i < remote.size(); ++i) {
    if (uint64_t st = xmem_write(pid, remote[i].va, p, remote[i].len)) return st;
    p += remote[i].len;
  }
  return cqe::kOk;
}

uint64_t xmem_read_pieces(pid_t pid, const Extents& remote, void* local) {
  char* p = static_cast<char*>(local);
  for (size_t i = 0; i < remote.size(); ++i) {
    if (uint64_t st = xmem_read(pid, remote[i].va, p, remote[i].len)) return st;
    p += remote[i].len;
  }
  return cqe::kOk;
}

// Walks both lists together: each step copies the overlap of the current pieces.
uint64_t xmem_read_scatter(pid_t pid, const Extents& remote, const Extents& local) {
  if (local.size() == 1) return xmem_read_pieces(pid, remote, reinterpret_cast<void*>(local[0].va));
  size_t ri = 0, li = 0;
  uint64_t roff = 0, loff = 0;
  while (ri < remote.size() && li < local.size()) {
    uint64_t n = std::min(remote[ri].len - roff, local[li].len - loff);
    if (uint64_t st = xmem_read(pid, remote[ri].va + roff, reinterpret_cast<void*>(local[li].va + loff), n)) return st;
    roff += n;
    loff += n;
    if (roff == remote[ri].len) ++ri, roff = 0;
    if (loff == local[li].len) ++li, loff = 0;
  }
  return cqe::kOk;
}

uint64_t xmem_write_gather(pid_t pid, const Extents& remote, const Extents& local) {
  if (local.size() == 1) return xmem_write_pieces(pid, remote, reinterpret_cast<const void*>(local[0].va));
  size_t ri = 0, li = 0;
  uint64_t roff = 0, loff = 0;
  while (ri < remote.size() && li < local.size()) {
    uint64_t n = std::min(remote[ri].len - roff, local[li].len - loff);
    if (uint64_t st = xmem_write(pid, remote[ri].va + roff, reinterpret_cast<const void*>(local[li].va + loff), n))
      return st;
    roff += n;
    loff += n;
    if (roff == remote[ri].len) ++ri, roff = 0;
    if (loff == local[li].len) ++li, loff = 0;
  }
  return cqe::kOk;
}

void scatter_local(const Extents& local, const void* src) {
  const char* p = static_cast<const char*>(src);
  for (size_t i = 0; i < local.size(); ++i) {
    std::memcpy(reinterpret_cast<void*>(local[i].va), p, local[i].len);
    p += local[i].len;
  }
}

}  // namespace nicemu::ugni
