// The FMA requester's pieces, shared by GNI_PostFma (fma_requester.cpp), the chained posts
// (ct_requester.cpp) and the CQ writes (cq_write.cpp): one transaction copied out of the
// caller's descriptor, its post-time checks, its execution on the target's behalf, and the
// completion events.
#pragma once
#include <cstdint>

#include "internal.h"

namespace nicemu::ugni {

// One FMA transaction: the fields of a gni_post_descriptor_t or of a chained element
// (gni_ct_*_post_descriptor_t), copied out of the caller's memory before they are checked.
struct FmaOp {
  int type = 0;  // GNI_POST_FMA_PUT, _PUT_W_SYNCFLAG, _FMA_GET or _AMO
  Ep* ep = nullptr;
  uint64_t local_addr = 0;
  gni_mem_handle_t local_mem_hndl{};
  uint64_t remote_addr = 0;
  gni_mem_handle_t remote_mem_hndl{};
  uint64_t length = 0;
  uint32_t amo_cmd = 0;
  uint64_t first_operand = 0;
  uint64_t second_operand = 0;
  uint64_t sync_flag_addr = 0;
  uint64_t sync_flag_value = 0;
};

// The post type / AMO opcode as the integer the caller stored: a descriptor is untrusted
// input, and a value outside the enum must be refused, not loaded as an enum.
int post_type(const gni_post_descriptor_t* d);
uint32_t amo_command(const gni_fma_cmd_type_t& cmd);

// The transaction of a plain post descriptor on `ep`.
FmaOp fma_op_of(Ep* ep, const gni_post_descriptor_t* d);

// Post-time checks of one transaction (§12.4, §13): GET length and alignment, AMO opcode
// (for the device type), operand size and alignment, sync-flag alignment. GNI_RC_SUCCESS
// or the code GNI_PostFma returns.
gni_return_t check_fma(const FmaOp& op);

// Executes the transaction on the target (resolving the EP's peer first). Returns a CQE
// status and, for a successful access, the target registration's CQ for remote events.
uint64_t execute_fma(const FmaOp& op, uint32_t* dst_cq);

// The same on a target region the caller resolved (the reorder engine executes held
// transactions on the region it captured at post time, not on the EP's current one).
uint64_t execute_fma_on(const FmaOp& op, const Region& target, uint32_t* dst_cq);

// The target's remote event of a transaction that succeeded, into `dst_cq` of its region.
void push_fma_remote_event(const FmaOp& op, uint32_t dst_cq);

// The post-time checks of a CQ write, plain or chained (cq_write.cpp): the EP and the CQ
// that takes its local event (src_cq_hndl if given, else the EP's), or the error.
gni_return_t check_cq_write(gni_ep_handle_t ep_hndl, const gni_post_descriptor_t* d, Ep*& ep, Cq*& cq);

// Executes one CQ write (cq_write.cpp) on `ep`'s peer; a CQE status.
uint64_t execute_cq_write(Ep* ep, const gni_mem_handle_t& remote_mem_hndl, uint64_t value);

// The events of a local completion into `cq` (none if `tid` < 0): LOCAL and/or GLOBAL as
// the descriptor's cq_mode asks, with the transaction's status.
void complete_fma(Cq* cq, const gni_post_descriptor_t* d, uint32_t local_event, uint64_t status, int32_t tid);
// The same, for a post whose descriptor is gone: its cq_mode kept.
void complete_fma(Cq* cq, uint16_t cq_mode, uint32_t local_event, uint64_t status, int32_t tid);

}  // namespace nicemu::ugni
