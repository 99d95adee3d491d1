// Session management: datagrams of up to GNI_DATAGRAM_MAXSIZE bytes exchanged between two
// EPs, matched by the daemons (nicemu/daemon/remote/datagram_matcher.h). A post is a one-way
// message on the attach connection; the daemon hands finished datagrams back through the
// CDM's completion ring (nicemu/abi/dgram_ring.h), which the library drains into
// `Nic::dgram.finished` whenever it tests, waits or probes, so none of those costs a
// control round trip. Only a cancel asks the daemon (it must know whether it won the race
// against a match). Waiters block on the region's `dgram_seq` futex, which the daemon
// bumps after publishing events.
#include <time.h>

#include <algorithm>
#include <cstring>

#include "cancel_point.h"
#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace actl = nicemu::abi::ctl;

namespace {

// Datagram posts of this process not yet consumed, against the daemon's per-process limit
// (posts are one-way, so the documented ERROR_RESOURCE has to be decided here).
std::atomic<uint32_t> g_outstanding{0};

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

// Maps the completion ring on the first post (one round trip per CDM). Under dgram.mu.
bool open_ring(Nic* n) {
  DgramState& d = n->dgram;
  if (d.ring.valid()) return true;
  actl::DgramOpen req{};
  req.h.op = static_cast<uint16_t>(actl::Op::kDgramOpen);
  actl::DgramOpenReply rep{};
  if (!n->conn.call(req, rep) || rep.r.rc != GNI_RC_SUCCESS) return false;
  const uint32_t cap = rep.capacity;
  if (cap == 0 || (cap & (cap - 1)) != 0 || !n->self->in_heap(rep.ctl_offset, abi::dgram_ring_bytes(cap)))
    return false;
  d.ring.ctl = reinterpret_cast<abi::DgramRingCtl*>(n->self->base + rep.ctl_offset);
  d.ring.events = reinterpret_cast<abi::DgramEvent*>(n->self->base + rep.ctl_offset + sizeof(abi::DgramRingCtl));
  d.ring.mask = cap - 1;
  d.post_limit = rep.post_limit;
  return true;
}

// Takes every published event off the ring into `finished`. Under dgram.mu.
void drain(Nic* n) {
  DgramState& d = n->dgram;
  if (!d.ring.valid()) return;
  uint64_t taken = d.ring.drain([&](const abi::DgramEvent& e) {
    if (e.lib_seq == 0 || e.lib_seq > d.next_seq) return;  // not one of our posts
    // Pending is never published. ERROR: its peer's node was lost (docs/fabric.md, Datagrams)
    // or a fault was injected; TIMEOUT: an injected loss (docs/fault-injection.md).
    if (e.state != GNI_POST_COMPLETED && e.state != GNI_POST_TERMINATED && e.state != GNI_POST_ERROR &&
        e.state != GNI_POST_TIMEOUT)
      return;
    DgramFinished f;
    f.ep = e.ep;
    f.id = e.id;
    f.has_id = e.has_id != 0;
    f.state = e.state;
    f.peer_addr = e.peer_addr;
    f.peer_inst = e.peer_inst;
    f.len = std::min<uint16_t>(e.data_len, actl::kDgramMaxSize);
    std::memcpy(f.data, e.data, f.len);
    d.finished[e.lib_seq] = f;
  });
  if (taken && d.ring.take_stall()) {
    actl::DgramKick k{};
    k.h.op = static_cast<uint16_t>(actl::Op::kDgramKick);
    (void)n->conn.send(&k, sizeof k);
  }
}

[[gnu::noinline]] gni_return_t post(Ep* ep, void* in_data, uint16_t data_len, void* out_buf, uint16_t buf_size, bool has_id,
                  uint64_t id) {
  if (data_len > GNI_DATAGRAM_MAXSIZE || buf_size > GNI_DATAGRAM_MAXSIZE) return GNI_RC_SIZE_ERROR;
  if ((data_len && !in_data) || (buf_size && !out_buf)) return GNI_RC_INVALID_PARAM;
  Nic* n = ep->nic;
  DgramState& d = n->dgram;
  std::lock_guard<std::mutex> lk(d.mu);
  if (ep->dgram_seq != 0) return GNI_RC_ERROR_RESOURCE;  // one outstanding datagram per EP
  if (!n->self->alive()) return GNI_RC_INVALID_STATE;
  if (!open_ring(n)) return GNI_RC_ERROR_RESOURCE;
  if (d.post_limit != 0 && g_outstanding.load(std::memory_order_relaxed) >= d.post_limit)
    return GNI_RC_ERROR_RESOURCE;
  actl::DgramSubmit req{};
  req.h.op = static_cast<uint16_t>(actl::Op::kDgramSubmit);
  req.lib_seq = d.next_seq + 1;
  req.ep = ep->dgram_key;
  req.id = id;
  req.has_id = has_id;
  req.wildcard = !ep->bound;
  req.peer_addr = ep->remote_addr;
  req.peer_inst = ep->remote_id;
  req.data_len = data_len;
  req.buf_size = buf_size;
  if (data_len) std::memcpy(req.data, in_data, data_len);
  // Sent under the lock, so a cancel of this EP from another thread reaches the daemon after it.
  if (!n->conn.send(&req, sizeof req)) return GNI_RC_ERROR_RESOURCE;
  d.next_seq = req.lib_seq;
  g_outstanding.fetch_add(1, std::memory_order_relaxed);
  ep->dgram_seq = req.lib_seq;
  ep->dgram_has_id = has_id;
  ep->dgram_id = id;
  ep->dgram_out = out_buf;
  ep->dgram_buf_size = buf_size;
  return GNI_RC_SUCCESS;
}

// Whether `ep` has an outstanding datagram that (by_id, id) names. Under dgram.mu.
bool names(const Ep* ep, bool by_id, uint64_t id) {
  return ep->dgram_seq != 0 && (!by_id || (ep->dgram_has_id && ep->dgram_id == id));
}

[[gnu::noinline]] gni_return_t test(Ep* ep, bool by_id, uint64_t id, gni_post_state_t* state, uint32_t* remote_addr,
                  uint32_t* remote_id) {
  Nic* n = ep->nic;
  DgramState& d = n->dgram;
  std::lock_guard<std::mutex> lk(d.mu);
  if (!names(ep, by_id, id)) return GNI_RC_NO_MATCH;
  drain(n);
  auto it = d.finished.find(ep->dgram_seq);
  if (it == d.finished.end()) {
    if (!n->self->alive()) return GNI_RC_ERROR_RESOURCE;  // the daemon will never finish it
    *state = GNI_POST_PENDING;
    return GNI_RC_SUCCESS;
  }
  const DgramFinished& f = it->second;
  *state = static_cast<gni_post_state_t>(f.state);
  gni_return_t rc = GNI_RC_SUCCESS;
  if (f.state == GNI_POST_COMPLETED) {
    if (remote_addr) *remote_addr = f.peer_addr;
    if (remote_id) *remote_id = f.peer_inst;
    uint16_t len = std::min<uint16_t>(f.len, ep->dgram_buf_size);
    if (len) std::memcpy(ep->dgram_out, f.data, len);
    if (f.len > ep->dgram_buf_size) rc = GNI_RC_SIZE_ERROR;
  }
  d.finished.erase(it);  // consumed
  ep->dgram_seq = 0;
  g_outstanding.fetch_sub(1, std::memory_order_relaxed);
  return rc;
}

// Runs under the entry points' deferring_cancel: cancelled only between sleeps
// (cancel_point.h). Blocks until `poll` stops answering "pending"/NO_MATCH-style NOT_DONE, or timeout.
template <typename Poll>
gni_return_t wait_for(Nic* n, uint32_t timeout_ms, Poll poll) {
  const bool forever = timeout_ms == UINT32_MAX;
  const uint64_t deadline = forever ? UINT64_MAX : now_ms() + timeout_ms;
  auto* seq = const_cast<std::atomic<uint32_t>*>(&n->self->header()->dgram_seq);
  for (;;) {
    uint32_t seen = seq->load(std::memory_order_acquire);
    gni_return_t rc = poll();
    if (rc != GNI_RC_NOT_DONE) return rc;
    uint64_t t = now_ms();
    if (t >= deadline) return GNI_RC_TIMEOUT;
    if (!n->daemon_alive()) return GNI_RC_ERROR_RESOURCE;
    // Sleep in slices so a daemon killed outright is noticed.
    uint64_t slice = std::min<uint64_t>(200, forever ? 200 : deadline - t);
    abi::futex_wait(seq, seen, static_cast<int64_t>(slice) * 1000000);
    cancellation_point();
  }
}

[[gnu::noinline]] gni_return_t wait(Ep* ep, bool by_id, uint64_t id, uint32_t timeout, gni_post_state_t* state, uint32_t* remote_addr,
                  uint32_t* remote_id) {
  if (timeout == 0) return GNI_RC_INVALID_PARAM;
  gni_return_t last = GNI_RC_SUCCESS;
  gni_return_t rc = wait_for(ep->nic, timeout, [&] {
    last = test(ep, by_id, id, state, remote_addr, remote_id);
    if (last == GNI_RC_SUCCESS && *state == GNI_POST_PENDING) return GNI_RC_NOT_DONE;
    return last;
  });
  return rc;
}

[[gnu::noinline]] gni_return_t probe(Nic* n, bool by_id, uint64_t* id, uint32_t* remote_addr, uint32_t* remote_id) {
  DgramState& d = n->dgram;
  std::lock_guard<std::mutex> lk(d.mu);
  drain(n);
  for (auto& [seq, f] : d.finished) {
    if (by_id && !f.has_id) continue;
    if (id) *id = f.id;
    if (remote_addr) *remote_addr = f.peer_addr;
    if (remote_id) *remote_id = f.peer_inst;
    return GNI_RC_SUCCESS;
  }
  if (!n->self->alive()) return GNI_RC_ERROR_RESOURCE;
  return GNI_RC_NO_MATCH;
}

[[gnu::noinline]] gni_return_t probe_wait(Nic* n, uint32_t timeout, uint64_t* id) {
  return wait_for(n, timeout, [&] {
    gni_return_t rc = probe(n, true, id, nullptr, nullptr);
    return rc == GNI_RC_NO_MATCH ? GNI_RC_NOT_DONE : rc;
  });
}

// Whether the EP's post was matched (COMPLETED) and not yet consumed by a Test or Wait.
// Such a post still belongs to the EP: cancelling it succeeds and leaves it completed, so
// the next Test/Wait reports COMPLETED and consumes it. The device behaves so: Lustre's
// gnilnd cancels posts it has not reaped yet and requires SUCCESS even if a match is
// pending, and UCX's udt takes NO_MATCH to mean "already consumed by the other thread" (it
// then destroys the EP, whose finished post a probe would report forever). Under dgram.mu.
bool matched_unconsumed(const Ep* ep) {
  Nic* n = ep->nic;
  if (ep->dgram_seq == 0) return false;
  drain(n);  // the daemon published the match before it answered the cancel
  auto it = n->dgram.finished.find(ep->dgram_seq);
  return it != n->dgram.finished.end() && it->second.state == GNI_POST_COMPLETED;
}

[[gnu::noinline]] gni_return_t cancel(Ep* ep, bool by_id, uint64_t id) {
  Nic* n = ep->nic;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lk(n->dgram.mu);
    if (!names(ep, by_id, id)) return GNI_RC_NO_MATCH;
    seq = ep->dgram_seq;
  }
  // Only the daemon knows whether the post is still pending. If it was matched meanwhile,
  // its event is on the ring and the cancel succeeds without changing it (matched_unconsumed);
  // a post already terminated (cancelled, refused) gives NO_MATCH. The round trip is made
  // without dgram.mu: the device's cancel does not hold up other threads' tests and probes,
  // and the gni provider's datagram thread, blocked in a test behind it while its NIC lock is
  // held, is cancelled asynchronously at teardown (it then dies holding that lock).
  actl::DgramCancel req{};
  req.h.op = static_cast<uint16_t>(actl::Op::kDgramCancel);
  req.ep = ep->dgram_key;
  req.id = id;
  req.by_id = by_id;
  req.lib_seq = seq;
  actl::Reply rep{};
  if (!n->conn.call(req, rep)) return GNI_RC_ERROR_RESOURCE;
  const auto rc = static_cast<gni_return_t>(rep.rc);
  std::lock_guard<std::mutex> lk(n->dgram.mu);
  if (ep->dgram_seq != seq) return GNI_RC_NO_MATCH;  // another thread consumed it meanwhile
  if (rc == GNI_RC_NO_MATCH && matched_unconsumed(ep)) return GNI_RC_SUCCESS;
  return rc;
}

}  // namespace

namespace nicemu::ugni {
void cancel_datagram_of(Ep* ep) {
  (void)cancel(ep, false, 0);
  std::lock_guard<std::mutex> lk(ep->nic->dgram.mu);
  // A post that had completed is dropped with its EP: nobody can consume it any more, and
  // a probe would otherwise report its id (naming an EP that is gone) forever. A post the
  // cancel terminated stays visible to probes, which is how UCX wakes its probe thread.
  if (matched_unconsumed(ep)) ep->nic->dgram.finished.erase(ep->dgram_seq);
  if (ep->dgram_seq != 0) {  // the EP goes away: its post no longer counts
    ep->dgram_seq = 0;
    g_outstanding.fetch_sub(1, std::memory_order_relaxed);
  }
}
}  // namespace nicemu::ugni

extern "C" {

gni_return_t GNI_EpPostData(gni_ep_handle_t ep_hndl, void* in_data, uint16_t data_len, void* out_buf,
                            uint16_t buf_size) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return post(ep, in_data, data_len, out_buf, buf_size, false, 0); });
}

gni_return_t GNI_EpPostDataWId(gni_ep_handle_t ep_hndl, void* in_data, uint16_t data_len, void* out_buf,
                               uint16_t buf_size, uint64_t datagram_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return post(ep, in_data, data_len, out_buf, buf_size, true, datagram_id); });
}

gni_return_t GNI_EpPostDataTest(gni_ep_handle_t ep_hndl, gni_post_state_t* post_state, uint32_t* remote_addr,
                                uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return test(ep, false, 0, post_state, remote_addr, remote_id); });
}

gni_return_t GNI_EpPostDataTestById(gni_ep_handle_t ep_hndl, uint64_t datagram_id, gni_post_state_t* post_state,
                                    uint32_t* remote_addr, uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return test(ep, true, datagram_id, post_state, remote_addr, remote_id); });
}

gni_return_t GNI_EpPostDataWait(gni_ep_handle_t ep_hndl, uint32_t timeout, gni_post_state_t* post_state,
                                uint32_t* remote_addr, uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return wait(ep, false, 0, timeout, post_state, remote_addr, remote_id); });
}

gni_return_t GNI_EpPostDataWaitById(gni_ep_handle_t ep_hndl, uint64_t datagram_id, uint32_t timeout,
                                    gni_post_state_t* post_state, uint32_t* remote_addr, uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return wait(ep, true, datagram_id, timeout, post_state, remote_addr, remote_id); });
}

gni_return_t GNI_PostDataProbe(gni_nic_handle_t nic_hndl, uint32_t* remote_addr, uint32_t* remote_id) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !remote_addr || !remote_id) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return probe(n, false, nullptr, remote_addr, remote_id); });
}

gni_return_t GNI_PostDataProbeById(gni_nic_handle_t nic_hndl, uint64_t* datagram_id) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !datagram_id) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return probe(n, true, datagram_id, nullptr, nullptr); });
}

gni_return_t GNI_PostdataProbeWaitById(gni_nic_handle_t nic_hndl, uint32_t timeout, uint64_t* datagram_id) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !datagram_id) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return probe_wait(n, timeout, datagram_id); });
}

gni_return_t GNI_EpPostDataCancel(gni_ep_handle_t ep_hndl) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return cancel(ep, false, 0); });
}

gni_return_t GNI_EpPostDataCancelById(gni_ep_handle_t ep_hndl, uint64_t datagram_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return deferring_cancel([&] { return cancel(ep, true, datagram_id); });
}

}  // extern "C"
