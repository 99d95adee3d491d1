// The scalar atomics (§6): each is one GNI FMA AMO (GNI_POST_AMO) with the gen-1 64-bit
// opcode; fetched values land in the request's registered bounce slot and are copied to the
// caller's (possibly unregistered) result word at completion.
#include "call.h"

namespace nicemu::dmapp {

dmapp_return_t amo_impl(Mode m, dmapp_syncid_handle_t* sid, gni_fma_cmd_type_t cmd, bool fetching, void* result,
                        void* remote, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t a, int64_t b) {
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  if (fetching && !result) return call.finish(DMAPP_RC_INVALID_PARAM);
  // §3: 8-byte aligned targets and results.
  if ((reinterpret_cast<uint64_t>(remote) | reinterpret_cast<uint64_t>(result)) & 7)
    return call.finish(DMAPP_RC_ALIGNMENT_ERROR);
  Remote r;
  if ((rc = call.ctx().resolve(remote, sizeof(uint64_t), seg, pe, r)) != DMAPP_RC_SUCCESS) return call.finish(rc);
  Context& c = call.ctx();
  Request* q = c.alloc_request(call.may_block());
  if (!q) return call.finish(DMAPP_RC_NO_SPACE);
  q->group = call.group();
  q->pe = pe;
  q->desc.type = GNI_POST_AMO;
  q->desc.dlvr_mode = c.put_dlvr_mode();  // AMOs follow the PUT routing attribute
  q->desc.amo_cmd = cmd;
  q->desc.first_operand = uint64_t(a);
  q->desc.second_operand = uint64_t(b);
  q->desc.length = sizeof(uint64_t);
  q->desc.remote_addr = r.addr;
  q->desc.remote_mem_hndl = r.mh;
  q->desc.local_addr = reinterpret_cast<uint64_t>(q->bounce);
  q->desc.local_mem_hndl = c.bounce_mh();
  if (fetching) {
    q->copy_to = result;
    q->copy_len = sizeof(uint64_t);
  }
  return call.finish(c.post(q));
}

}  // namespace nicemu::dmapp

using namespace nicemu::dmapp;

#define NONFETCH(name, cmd)                                                                                   \
  dmapp_return_t name(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t op) {                           \
    return amo_impl(Mode::kBlocking, nullptr, cmd, false, nullptr, t, seg, pe, op, 0);                       \
  }                                                                                                           \
  dmapp_return_t name##_nb(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t op,                        \
                           dmapp_syncid_handle_t* id) {                                                       \
    return amo_impl(Mode::kNb, id, cmd, false, nullptr, t, seg, pe, op, 0);                                  \
  }                                                                                                           \
  dmapp_return_t name##_nbi(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t op) {                     \
    return amo_impl(Mode::kNbi, nullptr, cmd, false, nullptr, t, seg, pe, op, 0);                            \
  }

#define FETCH(name, cmd)                                                                                      \
  dmapp_return_t name(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t op) {                  \
    return amo_impl(Mode::kBlocking, nullptr, cmd, true, t, s, seg, pe, op, 0);                              \
  }                                                                                                           \
  dmapp_return_t name##_nb(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t op,               \
                           dmapp_syncid_handle_t* id) {                                                       \
    return amo_impl(Mode::kNb, id, cmd, true, t, s, seg, pe, op, 0);                                         \
  }                                                                                                           \
  dmapp_return_t name##_nbi(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t op) {            \
    return amo_impl(Mode::kNbi, nullptr, cmd, true, t, s, seg, pe, op, 0);                                   \
  }

#define FETCH2(name, cmd)                                                                                     \
  dmapp_return_t name(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t a, int64_t b) {        \
    return amo_impl(Mode::kBlocking, nullptr, cmd, true, t, s, seg, pe, a, b);                               \
  }                                                                                                           \
  dmapp_return_t name##_nb(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t a, int64_t b,     \
                           dmapp_syncid_handle_t* id) {                                                       \
    return amo_impl(Mode::kNb, id, cmd, true, t, s, seg, pe, a, b);                                          \
  }                                                                                                           \
  dmapp_return_t name##_nbi(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, int64_t a, int64_t b) {  \
    return amo_impl(Mode::kNbi, nullptr, cmd, true, t, s, seg, pe, a, b);                                    \
  }

extern "C" {
NONFETCH(dmapp_aadd_qw, GNI_FMA_ATOMIC_ADD)
NONFETCH(dmapp_aand_qw, GNI_FMA_ATOMIC_AND)
NONFETCH(dmapp_aor_qw, GNI_FMA_ATOMIC_OR)
NONFETCH(dmapp_axor_qw, GNI_FMA_ATOMIC_XOR)
FETCH(dmapp_afadd_qw, GNI_FMA_ATOMIC_FADD)
FETCH(dmapp_afand_qw, GNI_FMA_ATOMIC_FAND)
FETCH(dmapp_afor_qw, GNI_FMA_ATOMIC_FOR)
FETCH(dmapp_afxor_qw, GNI_FMA_ATOMIC_FXOR)
// remote = (remote & andMask) ^ xorMask (GNI's AX: first operand AND, second XOR).
FETCH2(dmapp_afax_qw, GNI_FMA_ATOMIC_FAX)
// if remote == comperand: remote = swaperand (GNI's CSWAP: first operand compare).
FETCH2(dmapp_acswap_qw, GNI_FMA_ATOMIC_CSWAP)
}
