// The fault injector and the reorder engine on libugni's same-host paths (docs/ordering.md,
// docs/fault-injection.md). Hot paths call fault_path() — one predictable branch when
// injection is off and nothing is held — and hand the transaction to the slow paths below.
#pragma once
#include <cstdint>
#include <string>

#include "internal.h"
#include "nicemu/abi/fault_layout.h"

namespace nicemu::ugni {

struct FmaOp;  // fma_requester.h

inline bool fault_path(const Nic* n) {
  return (n->fault_page->active.load(std::memory_order_relaxed) | n->fault_held.load(std::memory_order_relaxed)) != 0;
}

// GNI_PostFma under injection: decided (error, delay, duplicate), ordered by the ordering
// model and executed now or later by the engine's thread. Always GNI_RC_SUCCESS: outcomes
// are completion events, as on hardware.
gni_return_t fault_post_fma(const FmaOp& op, gni_post_descriptor_t* d, int32_t tid);

// GNI_SmsgSend under injection: drops and corruptions are retransmitted after a delay,
// duplicates suppressed by sequence number, delays and reordering held; the application
// still receives every message once, in order. Retransmit exhaustion is an error event.
gni_return_t fault_smsg_send(Ep* ep, const void* header, uint32_t header_length, const void* data,
                             uint32_t data_length, uint32_t msg_id, uint8_t tag);

// One GNI_PostRdma as the one-copy path runs it (bte_requester.cpp), captured so the
// reorder engine can run it later.
struct RdmaOp {
  bool get = false;
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
  gni_mem_handle_t local_mem_hndl{};
  gni_mem_handle_t remote_mem_hndl{};
  uint16_t cq_mode = 0;
  uint32_t local_event = 0;
  uint32_t remote_event = 0;
};

// `d` posted on `ep` as an RdmaOp (a GET when `get`).
RdmaOp rdma_op(const Ep* ep, const gni_post_descriptor_t* d, bool get);

// The one-copy transfer of `op` into / out of `target` (a process of this host): validates
// both sides, moves the data, returns the completion status; `dst_cq` gets the target's
// CQ for the remote event. No events.
uint64_t rdma_execute_on(Nic* n, const RdmaOp& op, const Region& target, uint32_t* dst_cq);

// Posts the events of an RDMA transfer that finished with status `st`: the remote event
// (remote DMA source) if asked and it succeeded, and the local/global ones with the BTE
// source if the post has a transaction id.
void rdma_post_events(const RdmaOp& op, const Region& target, Cq* cq, int32_t tid, uint64_t st, uint32_t dst_cq);
// The local/global events (BTE source) that `cq_mode` asks for, with `st`; none without a tid.
void rdma_local_events(Cq* cq, uint16_t cq_mode, uint32_t local_event, int32_t tid, uint64_t st);

// GNI_PostRdma under injection or reordering: true if the post was taken here — failed
// (error events pushed; the data may have been moved, error_done), or run now or held by
// the reorder engine, which runs it later, with the one-copy transfer; false if it goes to
// the daemon's BTE engine as usual. A post is run or held here only if its target resolves
// to a process of this host and `ring_idle` (no post of the CDM queued for the daemon is in
// flight, so it never overtakes one of those).
bool fault_post_rdma(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, int32_t tid, bool ring_idle);

// A post for another host's node (remote_post.cpp) while the node's configuration is on,
// on either fabric: true if a transaction rule failed it here (its error events pushed,
// nothing sent: a request lost on its way, never executed; silent posts are not failed);
// false: it goes on. `to_daemons` is set when the configuration has packet rules or link
// windows that may touch traffic to its peer, which act only on the daemons' path: the post
// must not take the ofi fabric. Link windows and delays do not fail or hold it here.
bool fault_post_remote(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine, int32_t tid,
                       bool& to_daemons);
// The same test for other traffic a rank could send over the ofi fabric itself (messages):
// true while the node's configuration (checked only when its page is active) has packet
// rules or link windows that may touch traffic to `peer`.
bool fault_link_rules(Nic* n, uint32_t peer);
// The configuration's `ordering=` (abi::fault::kOrderAuto when off): the ofi fabric's order
// (ofi_order.h). forced_ordering: one relaxed load while no configuration is on.
uint32_t fault_ordering(Nic* n);
inline uint32_t forced_ordering(Nic* n) {
  return n->fault_page->active.load(std::memory_order_relaxed) ? fault_ordering(n) : abi::fault::kOrderAuto;
}

// GNI_MemRegister(Segments) under injection: GNI_RC_ERROR_RESOURCE or GNI_RC_ERROR_NOMEM when
// a rule of kind `reg` says so (error, exhaust), else GNI_RC_SUCCESS. An `update`
// (GNI_MEM_UPDATE_REGION) fails only with GNI_RC_ERROR_NOMEM (fault_engine.cpp says why).
gni_return_t fault_register(Nic* n, bool update = false);

// Transactions held for `ep` / `n` are dropped (GNI_EpDestroy, GNI_CdmDestroy).
void fault_forget_ep(Ep* ep);
void fault_forget_nic(Nic* n);

// The fault page of the daemon listening on `socket` (fault_off_page() if it has none).
const abi::fault::Page* fault_map_page(const std::string& socket);

}  // namespace nicemu::ugni
