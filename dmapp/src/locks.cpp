// DMAPP locks (§9): a fair ticket lock in one 64-bit symmetric word, built from the public
// AMOs and GETs — next ticket in the high half (taken by fetch-and-add of 1<<32), ticket
// being served in the low half (advanced by add of 1 at release). FIFO like Cray's queue
// lock. The low half wraps into the high one after 2^32 releases of one lock.
// Handles are slots of a fixed table (DMAPP_MAX_LOCKS held at once), so a lock released by
// address frees its handle too and nothing leaks.
#include <sched.h>

#include <mutex>

#include "context.h"

struct dmapp_lock {
  dmapp_lock_desc_t* addr;
  dmapp_seg_desc_t seg;
  dmapp_pe_t host;
  bool held;
};

namespace {

std::mutex g_locks_mu;
dmapp_lock g_locks[DMAPP_MAX_LOCKS];

void forget(dmapp_lock_desc_t* a, dmapp_pe_t host) {
  std::lock_guard<std::mutex> lk(g_locks_mu);
  for (dmapp_lock& l : g_locks)
    if (l.held && l.addr == a && l.host == host) {
      l.held = false;
      return;
    }
}

constexpr uint64_t kTicket = uint64_t(1) << 32;

uint32_t serving(uint64_t w) { return uint32_t(w); }
uint32_t ticket(uint64_t w) { return uint32_t(w >> 32); }

// A slot for (a, seg, host), taken before the lock is: a full table (the caller holds
// DMAPP_MAX_LOCKS locks already) is refused while the remote lock is still free, never
// after it is held. nullptr if every slot is in use.
dmapp_lock* reserve(dmapp_lock_desc_t* a, dmapp_seg_desc_t* seg, dmapp_pe_t host) {
  std::lock_guard<std::mutex> lk(g_locks_mu);
  for (dmapp_lock& l : g_locks)
    if (!l.held) {
      l = dmapp_lock{a, *seg, host, true};
      return &l;
    }
  return nullptr;
}

dmapp_return_t unreserve(dmapp_lock* l, dmapp_return_t rc) {
  std::lock_guard<std::mutex> lk(g_locks_mu);
  l->held = false;
  return rc;
}

}  // namespace

extern "C" {

dmapp_return_t dmapp_lock_acquire(dmapp_lock_desc_t* a, dmapp_seg_desc_t* seg, dmapp_pe_t host, uint64_t,
                                  dmapp_lock_handle_t* h) {
  if (!a || !seg || !h) return DMAPP_RC_INVALID_PARAM;
  dmapp_lock* slot = reserve(a, seg, host);
  if (!slot) return DMAPP_RC_RESOURCE_ERROR;
  alignas(8) uint64_t old = 0;
  dmapp_return_t rc = dmapp_afadd_qw(&old, a, seg, host, int64_t(kTicket));
  if (rc != DMAPP_RC_SUCCESS) return unreserve(slot, rc);
  const uint32_t mine = ticket(old);
  uint64_t w = old;
  while (serving(w) != mine) {
    sched_yield();  // the holder may need this core to finish
    // (A failed read leaves our ticket drawn: the lock is lost either way, as on hardware.)
    if ((rc = dmapp_get(&w, a, seg, host, 1, DMAPP_QW)) != DMAPP_RC_SUCCESS) return unreserve(slot, rc);
  }
  *h = slot;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_lock_try(dmapp_lock_desc_t* a, dmapp_seg_desc_t* seg, dmapp_pe_t host, uint64_t,
                              dmapp_lock_handle_t* h) {
  if (!a || !seg || !h) return DMAPP_RC_INVALID_PARAM;
  dmapp_lock* slot = reserve(a, seg, host);
  if (!slot) return DMAPP_RC_RESOURCE_ERROR;
  alignas(8) uint64_t w = 0, old = 0;
  dmapp_return_t rc = dmapp_get(&w, a, seg, host, 1, DMAPP_QW);
  if (rc != DMAPP_RC_SUCCESS) return unreserve(slot, rc);
  if (ticket(w) != serving(w)) return unreserve(slot, DMAPP_RC_NOT_DONE);  // held (the 2012 prototype's answer)
  rc = dmapp_acswap_qw(&old, a, seg, host, int64_t(w), int64_t(w + kTicket));
  if (rc != DMAPP_RC_SUCCESS) return unreserve(slot, rc);
  if (old != w) return unreserve(slot, DMAPP_RC_NOT_DONE);
  *h = slot;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_lock_release(dmapp_lock_handle_t h, uint64_t) {
  if (!h || h < g_locks || h >= g_locks + DMAPP_MAX_LOCKS || !h->held) return DMAPP_RC_INVALID_PARAM;
  dmapp_return_t rc = dmapp_aadd_qw(h->addr, &h->seg, h->host, 1);
  if (rc == DMAPP_RC_SUCCESS) h->held = false;
  return rc;
}

dmapp_return_t dmapp_lock_release_addr(dmapp_lock_desc_t* a, dmapp_pe_t host, uint64_t) {
  // No segment is passed: the lock lives in one of the symmetric segments.
  dmapp_jobinfo_t info;
  if (!a || dmapp_get_jobinfo(&info) != DMAPP_RC_SUCCESS) return DMAPP_RC_INVALID_PARAM;
  for (dmapp_seg_desc_t* s : {&info.sheap_seg, &info.data_seg}) {
    const char* base = static_cast<const char*>(s->addr);
    const char* p = reinterpret_cast<const char*>(a);
    if (p < base || p + sizeof *a > base + s->len) continue;
    dmapp_return_t rc = dmapp_aadd_qw(a, s, host, 1);
    if (rc == DMAPP_RC_SUCCESS) forget(a, host);
    return rc;
  }
  return DMAPP_RC_INVALID_PARAM;
}

}  // extern "C"
