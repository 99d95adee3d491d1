// dmapp_init / dmapp_finalize: PMI bootstrap, the CDM and its CQ, one endpoint per PE, the
// symmetric segments registered once and their handles exchanged over PMI.
#include "context.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "data_segment.h"
#include "pmi.h"

namespace nicemu::dmapp {

namespace {

Context* g_context = nullptr;

// Our CDM's inst_id: rank in a range of its own, so that an MPI library of the same
// process, which typically uses its rank, can attach in the same domain without a clash.
constexpr uint32_t kInstBase = 0x40000000u;

// First field of a colon-separated variable (several devices: PMI_GNI_* lists).
bool env_u32(const char* name, uint32_t& v) {
  const char* s = std::getenv(name);
  if (!s || !*s) return false;
  char* end = nullptr;
  unsigned long x = std::strtoul(s, &end, 0);
  if (end == s) return false;
  v = static_cast<uint32_t>(x);
  return true;
}

uint32_t pi_flags(uint8_t pi) {
  switch (pi) {
    case DMAPP_PI_ORDERING_STRICT: return GNI_MEM_STRICT_PI_ORDERING;
    case DMAPP_PI_ORDERING_RELAXED: return GNI_MEM_RELAXED_PI_ORDERING;
    default: return 0;
  }
}

struct PeInfo {
  int32_t pe;
  uint32_t nic_addr;
  uint64_t data_base;
  gni_mem_handle_t data_mh;
  gni_mem_handle_t heap_mh;
};

}  // namespace

Context* context() { return g_context; }
void set_context(Context* c) { g_context = c; }

dmapp_return_t from_gni(gni_return_t rc) {
  switch (rc) {
    case GNI_RC_SUCCESS: return DMAPP_RC_SUCCESS;
    case GNI_RC_NOT_DONE: return DMAPP_RC_NOT_DONE;
    case GNI_RC_INVALID_PARAM: return DMAPP_RC_INVALID_PARAM;
    case GNI_RC_ALIGNMENT_ERROR: return DMAPP_RC_ALIGNMENT_ERROR;
    case GNI_RC_PERMISSION_ERROR: return DMAPP_RC_PERMISSION_ERROR;
    case GNI_RC_TRANSACTION_ERROR: return DMAPP_RC_TRANSACTION_ERROR;
    case GNI_RC_ILLEGAL_OP: return DMAPP_RC_NOT_SUPPORTED;
    default: return DMAPP_RC_RESOURCE_ERROR;
  }
}

dmapp_return_t Context::init(const dmapp_rma_attrs_ext_t& req, dmapp_rma_attrs_ext_t* actual) {
  if (req.max_outstanding_nb < DMAPP_MIN_OUTSTANDING_NB || req.max_outstanding_nb > DMAPP_MAX_OUTSTANDING_NB ||
      req.put_relaxed_ordering > DMAPP_ROUTING_ADAPTIVE || req.get_relaxed_ordering > DMAPP_ROUTING_ADAPTIVE ||
      req.max_concurrency < 1 || req.PI_ordering > DMAPP_PI_ORDERING_RELAXED ||
      req.queue_nelems > DMAPP_QUEUE_MAX_NELEMS)
    return DMAPP_RC_INVALID_PARAM;
  attrs = req;
  if (!attrs.queue_depth) attrs.queue_depth = DMAPP_QUEUE_DEFAULT_DEPTH;
  if (!attrs.queue_nelems) attrs.queue_nelems = DMAPP_QUEUE_DEFAULT_NELEMS;

  // One reference of our own (PMI_Init is reference counted): an MPI library or the
  // application may hold others, and dmapp_finalize gives ours back.
  int spawned = 0;
  if (PMI_Init(&spawned) != PMI_SUCCESS) {
    std::fprintf(stderr, "dmapp_init: PMI_Init failed (start the job with nicemu-run or an MPI launcher)\n");
    return DMAPP_RC_RESOURCE_ERROR;
  }
  pmi_initialized_by_us_ = true;
  if (PMI_Get_rank(&pe) != PMI_SUCCESS || PMI_Get_size(&npes) != PMI_SUCCESS || npes <= 0)
    return DMAPP_RC_RESOURCE_ERROR;

  uint32_t ptag = 0, cookie = 0, dev = 0;
  if (!env_u32("PMI_GNI_PTAG", ptag) || !env_u32("PMI_GNI_COOKIE", cookie)) {
    std::fprintf(stderr, "dmapp_init: PMI_GNI_PTAG/PMI_GNI_COOKIE are not set (no job credential)\n");
    return DMAPP_RC_RESOURCE_ERROR;
  }
  env_u32("PMI_GNI_DEV_ID", dev);

  gni_return_t g = GNI_CdmCreate(kInstBase + uint32_t(pe), uint8_t(ptag), cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm);
  uint32_t my_addr = 0;
  if (g == GNI_RC_SUCCESS) g = GNI_CdmAttach(cdm, dev, &my_addr, &nic);
  // Room for every request's completion and then some: an overrun would lose completions.
  if (g == GNI_RC_SUCCESS) g = GNI_CqCreate(nic, 2 * attrs.max_outstanding_nb + 64, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &cq);
  if (g != GNI_RC_SUCCESS) {
    std::fprintf(stderr, "dmapp_init: PE %d: GNI setup failed: %s\n", pe, gni_err_str[g]);
    return DMAPP_RC_RESOURCE_ERROR;
  }
  // Gemini refuses GETs into a local address that is not 4-byte aligned; such GETs then go
  // through the bounce slots (transfers.cpp).
  gni_nic_device_t device = GNI_DEVICE_ARIES;
  if (GNI_GetDeviceType(&device) == GNI_RC_SUCCESS && device == GNI_DEVICE_GEMINI) get_local_align_mask = 3;
  const uint32_t flags = GNI_MEM_READWRITE | pi_flags(attrs.PI_ordering);

  if (!find_data_segment(data.base, data.len)) {
    std::fprintf(stderr, "dmapp_init: the executable has no writable segment\n");
    return DMAPP_RC_RESOURCE_ERROR;
  }
  if (GNI_MemRegister(nic, data.base, data.len, nullptr, flags, uint32_t(-1), &data.mh) != GNI_RC_SUCCESS) {
    std::fprintf(stderr, "dmapp_init: registering the data segment failed\n");
    return DMAPP_RC_RESOURCE_ERROR;
  }
  data_registered_ = true;

  heap.len = symmetric_heap_size_from_env();
  if (!heap.len) {
    std::fprintf(stderr, "dmapp_init: XT_SYMMETRIC_HEAP_SIZE is malformed (a size with optional K/M/G)\n");
    return DMAPP_RC_INVALID_PARAM;
  }
  void* hb = map_symmetric_range(heap.len);
  if (!hb) return DMAPP_RC_RESOURCE_ERROR;
  heap.base = reinterpret_cast<uint64_t>(hb);
  if (GNI_MemRegister(nic, heap.base, heap.len, nullptr, flags, uint32_t(-1), &heap.mh) != GNI_RC_SUCCESS) {
    std::fprintf(stderr, "dmapp_init: registering the symmetric heap failed\n");
    return DMAPP_RC_RESOURCE_ERROR;
  }
  heap_registered_ = true;
  heap_alloc.reset(heap.base, heap.len);
  // The queue ring is the heap's first block: the same address on every PE. A heap too
  // small for it leaves queues unavailable (dmapp_queue_attach: RESOURCE_ERROR).
  queue_base = heap_alloc.allocate(queue_region_bytes(attrs));
  if (queue_base) std::memset(reinterpret_cast<void*>(queue_base), 0, queue_region_bytes(attrs));

  // Requests, their bounce slots (registered once) and syncids.
  const uint32_t n = attrs.max_outstanding_nb;
  bounce_arena_ = mmap(nullptr, size_t(n) * kBounceBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (bounce_arena_ == MAP_FAILED) {
    bounce_arena_ = nullptr;
    return DMAPP_RC_RESOURCE_ERROR;
  }
  if (GNI_MemRegister(nic, reinterpret_cast<uint64_t>(bounce_arena_), uint64_t(n) * kBounceBytes, nullptr,
                      GNI_MEM_READWRITE, uint32_t(-1), &bounce_mh_) != GNI_RC_SUCCESS)
    return DMAPP_RC_RESOURCE_ERROR;
  requests_.resize(n);
  syncids_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    requests_[i].index = i;
    requests_[i].bounce = static_cast<char*>(bounce_arena_) + size_t(i) * kBounceBytes;
    free_requests_.push_back(n - 1 - i);
    free_syncids_.push_back(n - 1 - i);
  }

  // Exchange NIC addresses and segment handles; PMI_Allgather's order is a permutation, so
  // each entry carries its PE.
  PeInfo me{pe, my_addr, data.base, data.mh, heap.mh};
  std::vector<PeInfo> all(static_cast<size_t>(npes));
  if (PMI_Allgather(&me, all.data(), sizeof me) != PMI_SUCCESS) return DMAPP_RC_RESOURCE_ERROR;
  peers.assign(size_t(npes), Peer{});
  for (const PeInfo& p : all) {
    if (p.pe < 0 || p.pe >= npes) return DMAPP_RC_RESOURCE_ERROR;
    Peer& q = peers[size_t(p.pe)];
    q.nic_addr = p.nic_addr;
    q.data_base = p.data_base;
    q.data_mh = p.data_mh;
    q.heap_mh = p.heap_mh;
  }
  for (int i = 0; i < npes; ++i) {
    Peer& q = peers[size_t(i)];
    if (GNI_EpCreate(nic, cq, &q.ep) != GNI_RC_SUCCESS ||
        GNI_EpBind(q.ep, q.nic_addr, kInstBase + uint32_t(i)) != GNI_RC_SUCCESS) {
      std::fprintf(stderr, "dmapp_init: PE %d: endpoint to PE %d failed\n", pe, i);
      return DMAPP_RC_RESOURCE_ERROR;
    }
  }
  if (actual) *actual = attrs;
  // Nobody accesses a PE before it has registered everything.
  if (PMI_Barrier() != PMI_SUCCESS) return DMAPP_RC_RESOURCE_ERROR;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t release_all(Context& c) {
  queue_forget();
  for (Peer& q : c.peers)
    if (q.ep) {
      GNI_EpUnbind(q.ep);
      GNI_EpDestroy(q.ep);
      q.ep = nullptr;
    }
  for (Segment& s : c.dynamic) GNI_MemDeregister(c.nic, &s.mh);
  c.dynamic.clear();
  if (c.bounce_arena_) {
    if (c.nic) GNI_MemDeregister(c.nic, &c.bounce_mh_);
    munmap(c.bounce_arena_, c.requests_.size() * kBounceBytes);
    c.bounce_arena_ = nullptr;
  }
  if (c.heap_registered_) GNI_MemDeregister(c.nic, &c.heap.mh);
  if (c.heap.base) unmap_symmetric_range(reinterpret_cast<void*>(c.heap.base), c.heap.len);
  c.heap = {};
  if (c.data_registered_) GNI_MemDeregister(c.nic, &c.data.mh);
  if (c.cq) GNI_CqDestroy(c.cq);
  c.cq = nullptr;
  if (c.cdm) GNI_CdmDestroy(c.cdm);
  c.cdm = nullptr;
  c.nic = nullptr;
  if (c.pmi_initialized_by_us_) PMI_Finalize();
  c.pmi_initialized_by_us_ = false;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t Context::finalize() {
  dmapp_return_t rc = wait_group(&implicit);
  // Every PE's accesses are done before anyone's memory goes away.
  PMI_Barrier();
  release_all(*this);
  return rc;
}

void Context::fill_seg(dmapp_seg_desc_t& d, const Segment& s, uint16_t kind) const {
  std::memset(&d, 0, sizeof d);
  d.addr = reinterpret_cast<void*>(s.base);
  d.len = s.len;
  d.memhndl = s.mh;
  d.flags = kind;
}

dmapp_return_t Context::resolve(const void* addr, uint64_t bytes, const dmapp_seg_desc_t* seg, dmapp_pe_t target,
                                Remote& out) const {
  if (!seg || target < 0 || target >= npes) return DMAPP_RC_INVALID_PARAM;
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  const uint64_t base = reinterpret_cast<uint64_t>(seg->addr);
  // Out of the segment as described: refused here, before anything moves.
  if (a < base || bytes > seg->len || a - base > seg->len - bytes) return DMAPP_RC_INVALID_PARAM;
  const Peer& p = peers[size_t(target)];
  switch (seg->flags) {
    case kSegHeap:
      if (base != heap.base) return DMAPP_RC_INVALID_PARAM;
      out.addr = a;
      out.mh = p.heap_mh;
      return DMAPP_RC_SUCCESS;
    case kSegData:
      if (base != data.base) return DMAPP_RC_INVALID_PARAM;
      out.addr = a - data.base + p.data_base;
      out.mh = p.data_mh;
      return DMAPP_RC_SUCCESS;
    case kSegDynamic:
      // The target PE's own descriptor (exchanged by the application); its handle is
      // checked at the target like any remote access.
      out.addr = a;
      out.mh = seg->memhndl;
      return DMAPP_RC_SUCCESS;
    default:
      return DMAPP_RC_INVALID_PARAM;
  }
}

bool Context::local_handle(const void* addr, uint64_t bytes, gni_mem_handle_t& mh) const {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  auto inside = [&](const Segment& s) { return a >= s.base && bytes <= s.len && a - s.base <= s.len - bytes; };
  if (heap.len && inside(heap)) {
    mh = heap.mh;
    return true;
  }
  if (data.len && inside(data)) {
    mh = data.mh;
    return true;
  }
  for (const Segment& s : dynamic)
    if (inside(s)) {
      mh = s.mh;
      return true;
    }
  return false;
}

uint16_t Context::put_dlvr_mode() const {
  switch (attrs.put_relaxed_ordering) {
    case DMAPP_ROUTING_IN_ORDER: return GNI_DLVMODE_IN_ORDER;
    case DMAPP_ROUTING_DETERMINISTIC: return GNI_DLVMODE_NO_ADAPT;
    default: return GNI_DLVMODE_PERFORMANCE;
  }
}

uint16_t Context::get_dlvr_mode() const {
  switch (attrs.get_relaxed_ordering) {
    case DMAPP_ROUTING_IN_ORDER: return GNI_DLVMODE_IN_ORDER;
    case DMAPP_ROUTING_DETERMINISTIC: return GNI_DLVMODE_NO_ADAPT;
    default: return GNI_DLVMODE_PERFORMANCE;
  }
}

}  // namespace nicemu::dmapp
