// The fault injector and the reorder engine on libugni's same-host paths (docs/ordering.md,
// docs/fault-injection.md). Hot paths call fault_path() — one predictable branch when
// injection is off and nothing is held — and hand the transaction to the slow paths below.
#pragma once
#include <cstdint>
#include <string>

#include "internal.h"

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

// GNI_PostRdma under injection: true if the post was failed (its error events are pushed);
// false if it goes to the BTE engine as usual.
bool fault_fail_rdma(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, int32_t tid);

// Transactions held for `ep` / `n` are dropped (GNI_EpDestroy, GNI_CdmDestroy).
void fault_forget_ep(Ep* ep);
void fault_forget_nic(Nic* n);

// The fault page of the daemon listening on `socket` (fault_off_page() if it has none).
const abi::fault::Page* fault_map_page(const std::string& socket);

}  // namespace nicemu::ugni
