// GNI_PostCqWrite (fact sheet §12.4, §11.4): one CQ entry carrying the low 48 bits of the
// descriptor's cqwrite_value, delivered into the target CQ that a registration names (the
// dst CQ given to GNI_MemRegister). Like an FMA PUT it is executed by the initiator on the
// target's behalf: the handle is checked against the target's registration table, and a
// handle that does not name a live registration with a CQ is an error completion at the
// initiator, never an entry in anybody's CQ. Open MPI wakes its own progress thread this
// way (a CQ write to itself), GASNet and Charm++ send small control words with it.
#include "fma_requester.h"
#include "nicemu/abi/remote_ops.h"

namespace nicemu::ugni {

namespace cqe = nicemu::abi::cqe;

// Executes the write on the target: resolve, validate, push. Returns a CQE status.
uint64_t execute_cq_write(Ep* ep, const gni_mem_handle_t& remote_mem_hndl, uint64_t value) {
  Nic* n = ep->nic;
  if (n->nic_down.load(std::memory_order_relaxed)) return cqe::kErrNicDown;
  uint64_t st = cqe::kOk;
  if (!target_of(ep, remote_mem_hndl, st)) return st;
  const Region& target = *ep->peer;
  uint32_t dst_cq = abi::kNoCq;
  st = abi::region_cq_write_target(target.base, remote_mem_hndl.qword1, remote_mem_hndl.qword2, dst_cq);
  if (st == cqe::kOk) {
    // A full target CQ loses the entry and flags its overrun, as the hardware does; the
    // initiator is not told (the target learns it from GNI_CQ_OVERRUN).
    push_remote_event(target, dst_cq, cqe::make_cqwrite(value));
  }
  // A target that died meanwhile: a failure (or a write into a reclaimed CQ) is its death.
  if (!target.alive()) st = cqe::kErrPeerGone;
  return st;
}

gni_return_t check_cq_write(gni_ep_handle_t ep_hndl, const gni_post_descriptor_t* d, Ep*& ep, Cq*& cq) {
  ep = posting_ep(ep_hndl, d);
  if (!ep) return GNI_RC_INVALID_PARAM;
  if (post_type(d) != GNI_POST_CQWRITE) return GNI_RC_INVALID_PARAM;
  // Open MPI names the CQ for the local event in the descriptor (src_cq_hndl, as for RDMA
  // posts); NULL means the EP's CQ.
  if (!post_cq(ep, d, cq)) return GNI_RC_INVALID_PARAM;
  return check_events(ep, cq, d);
}

}  // namespace nicemu::ugni

using namespace nicemu;
using namespace nicemu::ugni;

extern "C" {

gni_return_t GNI_PostCqWrite(gni_ep_handle_t ep_hndl, gni_post_descriptor_t* d) {
  Ep* ep;
  Cq* cq;
  if (gni_return_t rc = check_cq_write(ep_hndl, d, ep, cq); rc != GNI_RC_SUCCESS) return rc;
  int32_t tid;
  if (!start_post(ep->nic, d, tid)) return GNI_RC_ERROR_RESOURCE;
  // A CQ write is an FMA transaction on the hardware.
  stat_add(ep->nic, GNI_STAT_FMA_LAUNCH_COUNT);
  count(ep->nic->counters, ctr::cdm::cq_write_posts);
  if (posts_through_daemon(ep)) [[unlikely]]
    return post_remote(ep, cq, d, abi::remote::kCqWrite, abi::remote::kFma, tid);
  const uint64_t st = execute_cq_write(ep, d->remote_mem_hndl, d->cqwrite_value);
  // Local events as for FMA posts: the tid finds the descriptor in GNI_GetCompleted.
  complete_fma(cq, d, ep->local_event, st, tid);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
