// The completer: the request pool, posting to FMA or BTE, draining the CQ, retiring requests
// into their groups (syncids, the implicit group, blocking calls), reposting after
// recoverable errors, and the BTE put-with-flag continuation.
#include <cstdio>
#include <cstring>

#include "context.h"

namespace nicemu::dmapp {

namespace {
constexpr uint8_t kMaxRetries = 8;  // reposts of one request after recoverable (transient) errors
constexpr int kWaitMs = 1;          // CQ wait slice: progress callbacks run between slices
}  // namespace

Request* Context::alloc_request(bool may_block) {
  if (free_requests_.empty()) progress(false);
  while (free_requests_.empty()) {
    // Only requests orphaned by a CQ overrun are out: their events may be the lost ones,
    // so waiting for them could last for ever.
    if (!may_block || in_flight_ == orphans_.pending) return nullptr;
    progress(true);
  }
  Request* r = &requests_[free_requests_.back()];
  free_requests_.pop_back();
  void* bounce = r->bounce;
  const uint32_t index = r->index;
  *r = Request{};
  r->bounce = bounce;
  r->index = index;
  return r;
}

void Context::free_request(Request* r) {
  if (r->temp_registered) GNI_MemDeregister(nic, &r->temp_mh);
  r->temp_registered = false;
  free_requests_.push_back(r->index);
}

dmapp_syncid* Context::alloc_syncid() {
  if (free_syncids_.empty()) return nullptr;
  dmapp_syncid* s = &syncids_[free_syncids_.back()];
  free_syncids_.pop_back();
  *s = dmapp_syncid{};
  s->in_use = true;
  return s;
}

bool Context::release_syncid(dmapp_syncid* s) {
  if (syncids_.empty() || s < &syncids_.front() || s > &syncids_.back() || !s->in_use) return false;
  s->in_use = false;
  free_syncids_.push_back(uint32_t(s - &syncids_.front()));
  return true;
}

dmapp_return_t Context::post(Request* r) {
  r->desc.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  for (;;) {
    gni_return_t g = r->rdma ? GNI_PostRdma(peers[size_t(r->pe)].ep, &r->desc)
                             : GNI_PostFma(peers[size_t(r->pe)].ep, &r->desc);
    if (g == GNI_RC_SUCCESS) {
      ++r->group->pending;
      r->in_flight = true;
      ++in_flight_;
      return DMAPP_RC_SUCCESS;
    }
    // A full BTE submission ring: retire what completed and try again.
    if (g == GNI_RC_ERROR_RESOURCE && r->rdma) {
      progress(true);
      continue;
    }
    free_request(r);
    return from_gni(g);
  }
}

void Context::complete(Request* r, bool ok, gni_cq_entry_t ev) {
  if (!r->in_flight) return;  // not ours to take (an event for a request never posted)
  r->in_flight = false;
  --in_flight_;
  if (r->group == &orphans_) {
    // Its caller was already told: no repost, no flag, no copy-out.
    --orphans_.pending;
    free_request(r);
    return;
  }
  if (!ok) {
    uint32_t recoverable = 0;
    // An AMO is never reposted: a failed one may have taken effect before its response was
    // lost (gni_pub.h, GNI_CqErrorRecoverable; docs/fault-injection.md), and a second
    // ADD/FADD/XOR/CSWAP would apply twice or fetch the first one's result. PUTs and GETs
    // are idempotent and are.
    if (GNI_CqErrorRecoverable(ev, &recoverable) == GNI_RC_SUCCESS && recoverable && r->retries < kMaxRetries &&
        r->desc.type != GNI_POST_AMO) {
      ++r->retries;
      --r->group->pending;  // post() counts it again
      if (post(r) == DMAPP_RC_SUCCESS) return;
      r->group->error = DMAPP_RC_TRANSACTION_ERROR;
      return;  // post() freed it
    }
  }
  dmapp_syncid* g = r->group;
  // The copy-out happens before the group's count drops, so a sync call never reports a GET
  // complete while its bytes are still in the bounce slot.
  if (ok && r->copy_to) std::memcpy(r->copy_to, static_cast<char*>(r->bounce) + r->copy_off, r->copy_len);
  if (ok && r->flag_pending) {
    // The data is at the target: now the flag (an 8-byte FMA PUT), in the same group.
    r->flag_pending = false;
    if (r->temp_registered) GNI_MemDeregister(nic, &r->temp_mh);
    r->temp_registered = false;
    std::memcpy(r->bounce, &r->flag_value, sizeof r->flag_value);
    gni_post_descriptor_t d{};
    d.type = GNI_POST_FMA_PUT;
    d.dlvr_mode = put_dlvr_mode();
    d.local_addr = reinterpret_cast<uint64_t>(r->bounce);
    d.remote_addr = r->flag_addr;
    d.remote_mem_hndl = r->flag_mh;
    d.length = sizeof(uint64_t);
    r->desc = d;
    r->rdma = false;
    r->copy_to = nullptr;
    --g->pending;
    if (post(r) != DMAPP_RC_SUCCESS) g->error = DMAPP_RC_TRANSACTION_ERROR;
    return;
  }
  if (!ok && g->error == DMAPP_RC_SUCCESS) g->error = DMAPP_RC_TRANSACTION_ERROR;
  --g->pending;
  free_request(r);
}

void Context::progress(bool block) {
  bool first = true;
  for (;;) {
    gni_cq_entry_t ev = 0;
    gni_return_t rc = (block && first) ? GNI_CqWaitEvent(cq, kWaitMs, &ev) : GNI_CqGetEvent(cq, &ev);
    first = false;
    if (rc == GNI_RC_NOT_DONE || rc == GNI_RC_TIMEOUT) break;
    if (rc == GNI_RC_ERROR_RESOURCE) {
      cq_overrun();
      continue;  // the entries that did go in follow
    }
    if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) break;
    gni_post_descriptor_t* d = nullptr;
    gni_return_t rc2 = GNI_GetCompleted(cq, ev, &d);
    // An error naming no descriptor is libugni's NIC-down entry, which it repeats once the
    // failed posts are out: draining further would spin for ever (finding F3).
    if (!d && rc == GNI_RC_TRANSACTION_ERROR) break;
    if (!d) continue;
    complete(reinterpret_cast<Request*>(d), rc == GNI_RC_SUCCESS && rc2 == GNI_RC_SUCCESS, ev);
  }
  if (block) {
    queue_poll(*this);
    for (auto& [cb, data] : progress_cbs) cb(data);
  }
}

// The CQ lost entries (GNI_CQ_OVERRUN). It cannot with the CQ sized in init() (one event
// per request, at most max_outstanding_nb requests, no remote events), but if it does,
// which requests lost theirs is unknown: every request in flight fails its group with
// DMAPP_RC_TRANSACTION_ERROR now, so that no wait hangs on a lost event and the error
// reaches the caller, and stays out of the pool until its event comes, so that a late
// event never completes a reused request.
void Context::cq_overrun() {
  uint32_t failed = 0;
  for (Request& r : requests_) {
    if (!r.in_flight || r.group == &orphans_) continue;
    dmapp_syncid* g = r.group;
    if (g->error == DMAPP_RC_SUCCESS) g->error = DMAPP_RC_TRANSACTION_ERROR;
    --g->pending;
    r.group = &orphans_;
    ++orphans_.pending;
    ++failed;
  }
  std::fprintf(stderr, "dmapp: PE %d: completion queue overrun: %u requests in flight failed\n", pe, failed);
}

dmapp_return_t Context::wait_group(dmapp_syncid* g) {
  progress(false);
  while (g->pending) progress(true);
  dmapp_return_t rc = g->error;
  g->error = DMAPP_RC_SUCCESS;
  return rc;
}

}  // namespace nicemu::dmapp
