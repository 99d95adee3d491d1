// The symmetric heap calls and dynamic memory registration (§8).
#include <cstring>
#include <mutex>

#include "context.h"

using namespace nicemu::dmapp;

namespace {

uint32_t reg_flags(uint8_t pi) {
  switch (pi) {
    case DMAPP_PI_ORDERING_STRICT: return GNI_MEM_READWRITE | GNI_MEM_STRICT_PI_ORDERING;
    case DMAPP_PI_ORDERING_RELAXED: return GNI_MEM_READWRITE | GNI_MEM_RELAXED_PI_ORDERING;
    default: return GNI_MEM_READWRITE;
  }
}

}  // namespace

extern "C" {

// Not collective, as on a Cray: symmetric as long as every PE makes the same calls.
void* dmapp_sheap_malloc(size_t size) {
  Context* c = context();
  if (!c) return nullptr;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  return reinterpret_cast<void*>(c->heap_alloc.allocate(size));
}

void* dmapp_sheap_realloc(void* ptr, size_t size) {
  if (!ptr) return dmapp_sheap_malloc(size);
  Context* c = context();
  if (!c) return nullptr;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  const uint64_t a = reinterpret_cast<uint64_t>(ptr);
  const uint64_t old = c->heap_alloc.block_size(a);
  if (!old) return nullptr;  // not a block of the symmetric heap
  if (c->heap_alloc.resize_in_place(a, size)) return ptr;
  const uint64_t n = c->heap_alloc.allocate(size);
  if (!n) return nullptr;  // the old block stays valid, as with realloc
  std::memcpy(reinterpret_cast<void*>(n), ptr, old < size ? old : size);
  c->heap_alloc.release(a);
  return reinterpret_cast<void*>(n);
}

void dmapp_sheap_free(void* ptr) {
  Context* c = context();
  if (!c || !ptr) return;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  c->heap_alloc.release(reinterpret_cast<uint64_t>(ptr));
}

dmapp_return_t dmapp_sheap_stats(dmapp_sheap_stats_t* st) {
  Context* c = context();
  if (!c || !st) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  st->total_bytes = c->heap_alloc.size();
  st->used_bytes = c->heap_alloc.used();
  st->free_bytes = c->heap_alloc.size() - c->heap_alloc.used();
  st->largest_free_bytes = c->heap_alloc.largest_free();
  st->allocations = c->heap_alloc.allocations();
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_mem_register(void* addr, uint64_t length, dmapp_seg_desc_t* seg) {
  Context* c = context();
  if (!c || !addr || !length || !seg) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  // Whole pages, as the hardware translates them; the descriptor says what was registered.
  constexpr uint64_t kPage = 4096;
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (a + length < a) return DMAPP_RC_INVALID_PARAM;
  Segment s;
  s.base = a & ~(kPage - 1);
  s.len = ((a + length + kPage - 1) & ~(kPage - 1)) - s.base;
  gni_return_t g = GNI_MemRegister(c->nic, s.base, s.len, nullptr, reg_flags(c->attrs.PI_ordering), uint32_t(-1), &s.mh);
  if (g == GNI_RC_INVALID_PARAM) return DMAPP_RC_INVALID_PARAM;
  if (g != GNI_RC_SUCCESS) return DMAPP_RC_RESOURCE_ERROR;
  c->dynamic.push_back(s);
  c->fill_seg(*seg, s, kSegDynamic);
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_mem_unregister(dmapp_seg_desc_t* seg) {
  Context* c = context();
  if (!c || !seg || seg->flags != kSegDynamic) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  // Accesses of this PE into it must be over before it goes.
  c->wait_group(&c->implicit);
  for (auto it = c->dynamic.begin(); it != c->dynamic.end(); ++it) {
    if (it->base != reinterpret_cast<uint64_t>(seg->addr) || it->len != seg->len ||
        std::memcmp(&it->mh, &seg->memhndl, sizeof it->mh) != 0)
      continue;
    GNI_MemDeregister(c->nic, &it->mh);
    c->dynamic.erase(it);
    std::memset(seg, 0, sizeof *seg);
    return DMAPP_RC_SUCCESS;
  }
  return DMAPP_RC_INVALID_PARAM;
}

dmapp_return_t dmapp_segdesc_compare(dmapp_seg_desc_t* a, dmapp_seg_desc_t* b, int* flag) {
  if (!a || !b || !flag) return DMAPP_RC_INVALID_PARAM;
  *flag = a->addr == b->addr && a->len == b->len && a->flags == b->flags &&
          std::memcmp(&a->memhndl, &b->memhndl, sizeof a->memhndl) == 0;
  return DMAPP_RC_SUCCESS;
}

// Reserved translation ranges (GNI_MEM_RESERVE_REGION) have no emulation in libugni.
dmapp_return_t dmapp_mem_reserve(void*, uint64_t, uint64_t, dmapp_seg_desc_t*) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_mem_update(void*, uint64_t, uint64_t, dmapp_seg_desc_t*) { return DMAPP_RC_NOT_SUPPORTED; }

}  // extern "C"
