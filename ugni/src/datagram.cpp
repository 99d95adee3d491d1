// Session management: datagrams of up to GNI_DATAGRAM_MAXSIZE bytes exchanged between two
// EPs, matched by the daemons (nicemu/daemon/datagram_matcher.h). The library posts, tests
// and cancels through its attach connection, and blocks on the region's `dgram_seq` futex,
// which the daemon bumps whenever one of this CDM's datagrams changes state.
#include <time.h>

#include <algorithm>
#include <cstring>

#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace actl = nicemu::abi::ctl;

namespace {

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

gni_return_t post(Ep* ep, void* in_data, uint16_t data_len, void* out_buf, uint16_t buf_size, bool has_id,
                  uint64_t id) {
  if (data_len > GNI_DATAGRAM_MAXSIZE || buf_size > GNI_DATAGRAM_MAXSIZE) return GNI_RC_SIZE_ERROR;
  if ((data_len && !in_data) || (buf_size && !out_buf)) return GNI_RC_INVALID_PARAM;
  actl::DgramPost req{};
  req.h.op = static_cast<uint16_t>(actl::Op::kDgramPost);
  req.ep = ep->dgram_key;
  req.id = id;
  req.has_id = has_id;
  req.wildcard = !ep->bound;
  req.peer_addr = ep->remote_addr;
  req.peer_inst = ep->remote_id;
  req.data_len = data_len;
  req.buf_size = buf_size;
  if (data_len) std::memcpy(req.data, in_data, data_len);
  actl::Reply rep{};
  if (!ep->nic->conn.call(req, rep)) return GNI_RC_ERROR_RESOURCE;
  if (rep.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.rc);
  ep->dgram_out = out_buf;
  ep->dgram_buf_size = buf_size;
  return GNI_RC_SUCCESS;
}

gni_return_t test(Ep* ep, bool by_id, uint64_t id, gni_post_state_t* state, uint32_t* remote_addr,
                  uint32_t* remote_id) {
  actl::DgramTest req{};
  req.h.op = static_cast<uint16_t>(actl::Op::kDgramTest);
  req.ep = ep->dgram_key;
  req.id = id;
  req.by_id = by_id;
  actl::DgramTestReply rep{};
  if (!ep->nic->conn.call(req, rep)) return GNI_RC_ERROR_RESOURCE;
  if (rep.r.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.r.rc);
  *state = static_cast<gni_post_state_t>(rep.state);
  if (rep.state != GNI_POST_COMPLETED) return GNI_RC_SUCCESS;
  if (remote_addr) *remote_addr = rep.peer_addr;
  if (remote_id) *remote_id = rep.peer_inst;
  uint16_t n = std::min<uint16_t>(rep.data_len, ep->dgram_buf_size);
  if (n) std::memcpy(ep->dgram_out, rep.data, n);
  return rep.data_len > ep->dgram_buf_size ? GNI_RC_SIZE_ERROR : GNI_RC_SUCCESS;
}

// Blocks until `poll` stops answering "pending"/NO_MATCH-style NOT_DONE, or timeout.
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
  }
}

gni_return_t wait(Ep* ep, bool by_id, uint64_t id, uint32_t timeout, gni_post_state_t* state, uint32_t* remote_addr,
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

gni_return_t probe(Nic* n, bool by_id, uint64_t* id, uint32_t* remote_addr, uint32_t* remote_id) {
  actl::DgramProbe req{};
  req.h.op = static_cast<uint16_t>(actl::Op::kDgramProbe);
  req.by_id = by_id;
  actl::DgramProbeReply rep{};
  if (!n->conn.call(req, rep)) return GNI_RC_ERROR_RESOURCE;
  if (rep.r.rc != GNI_RC_SUCCESS) return static_cast<gni_return_t>(rep.r.rc);
  if (id) *id = rep.id;
  if (remote_addr) *remote_addr = rep.peer_addr;
  if (remote_id) *remote_id = rep.peer_inst;
  return GNI_RC_SUCCESS;
}

gni_return_t cancel(Ep* ep, bool by_id, uint64_t id) {
  actl::DgramCancel req{};
  req.h.op = static_cast<uint16_t>(actl::Op::kDgramCancel);
  req.ep = ep->dgram_key;
  req.id = id;
  req.by_id = by_id;
  actl::Reply rep{};
  if (!ep->nic->conn.call(req, rep)) return GNI_RC_ERROR_RESOURCE;
  return static_cast<gni_return_t>(rep.rc);
}

}  // namespace

namespace nicemu::ugni {
void cancel_datagram_of(Ep* ep) { (void)cancel(ep, false, 0); }
}  // namespace nicemu::ugni

extern "C" {

gni_return_t GNI_EpPostData(gni_ep_handle_t ep_hndl, void* in_data, uint16_t data_len, void* out_buf,
                            uint16_t buf_size) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  return post(ep, in_data, data_len, out_buf, buf_size, false, 0);
}

gni_return_t GNI_EpPostDataWId(gni_ep_handle_t ep_hndl, void* in_data, uint16_t data_len, void* out_buf,
                               uint16_t buf_size, uint64_t datagram_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return post(ep, in_data, data_len, out_buf, buf_size, true, datagram_id);
}

gni_return_t GNI_EpPostDataTest(gni_ep_handle_t ep_hndl, gni_post_state_t* post_state, uint32_t* remote_addr,
                                uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state) return GNI_RC_INVALID_PARAM;
  return test(ep, false, 0, post_state, remote_addr, remote_id);
}

gni_return_t GNI_EpPostDataTestById(gni_ep_handle_t ep_hndl, uint64_t datagram_id, gni_post_state_t* post_state,
                                    uint32_t* remote_addr, uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return test(ep, true, datagram_id, post_state, remote_addr, remote_id);
}

gni_return_t GNI_EpPostDataWait(gni_ep_handle_t ep_hndl, uint32_t timeout, gni_post_state_t* post_state,
                                uint32_t* remote_addr, uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state) return GNI_RC_INVALID_PARAM;
  return wait(ep, false, 0, timeout, post_state, remote_addr, remote_id);
}

gni_return_t GNI_EpPostDataWaitById(gni_ep_handle_t ep_hndl, uint64_t datagram_id, uint32_t timeout,
                                    gni_post_state_t* post_state, uint32_t* remote_addr, uint32_t* remote_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || !post_state || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return wait(ep, true, datagram_id, timeout, post_state, remote_addr, remote_id);
}

gni_return_t GNI_PostDataProbe(gni_nic_handle_t nic_hndl, uint32_t* remote_addr, uint32_t* remote_id) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !remote_addr || !remote_id) return GNI_RC_INVALID_PARAM;
  return probe(n, false, nullptr, remote_addr, remote_id);
}

gni_return_t GNI_PostDataProbeById(gni_nic_handle_t nic_hndl, uint64_t* datagram_id) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !datagram_id) return GNI_RC_INVALID_PARAM;
  return probe(n, true, datagram_id, nullptr, nullptr);
}

gni_return_t GNI_PostdataProbeWaitById(gni_nic_handle_t nic_hndl, uint32_t timeout, uint64_t* datagram_id) {
  Nic* n = as_nic(nic_hndl);
  if (!n || !datagram_id) return GNI_RC_INVALID_PARAM;
  return wait_for(n, timeout, [&] {
    gni_return_t rc = probe(n, true, datagram_id, nullptr, nullptr);
    return rc == GNI_RC_NO_MATCH ? GNI_RC_NOT_DONE : rc;
  });
}

gni_return_t GNI_EpPostDataCancel(gni_ep_handle_t ep_hndl) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep) return GNI_RC_INVALID_PARAM;
  return cancel(ep, false, 0);
}

gni_return_t GNI_EpPostDataCancelById(gni_ep_handle_t ep_hndl, uint64_t datagram_id) {
  Ep* ep = as_ep(ep_hndl);
  if (!ep || datagram_id == UINT64_MAX) return GNI_RC_INVALID_PARAM;
  return cancel(ep, true, datagram_id);
}

}  // extern "C"
