// Every fact-sheet function nicemu does not implement yet: they return
// DMAPP_RC_NOT_SUPPORTED, and docs/compatibility.md lists them as missing.
#include "dmapp.h"

extern "C" {

// AMO-struct API (§6): the dmapp_amo_t layout is unconfirmed.
dmapp_return_t dmapp_amo_put(void*, dmapp_seg_desc_t*, dmapp_pe_t, dmapp_amo_t*) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_amo_put_nb(void*, dmapp_seg_desc_t*, dmapp_pe_t, dmapp_amo_t*, dmapp_syncid_handle_t*) {
  return DMAPP_RC_NOT_SUPPORTED;
}
dmapp_return_t dmapp_amo_put_nbi(void*, dmapp_seg_desc_t*, dmapp_pe_t, dmapp_amo_t*) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_amo_get(void*, void*, dmapp_seg_desc_t*, dmapp_pe_t, dmapp_amo_t*) {
  return DMAPP_RC_NOT_SUPPORTED;
}
dmapp_return_t dmapp_amo_get_nb(void*, void*, dmapp_seg_desc_t*, dmapp_pe_t, dmapp_amo_t*, dmapp_syncid_handle_t*) {
  return DMAPP_RC_NOT_SUPPORTED;
}
dmapp_return_t dmapp_amo_get_nbi(void*, void*, dmapp_seg_desc_t*, dmapp_pe_t, dmapp_amo_t*) {
  return DMAPP_RC_NOT_SUPPORTED;
}
dmapp_return_t dmapp_amo_flush(dmapp_pe_t, uint64_t) { return DMAPP_RC_NOT_SUPPORTED; }

// Checkpoint/restart (§11).
dmapp_return_t dmapp_checkpoint(void) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_restart(uint32_t) { return DMAPP_RC_NOT_SUPPORTED; }

// Collectives (§11).
dmapp_return_t dmapp_c_pset_create(dmapp_c_pset_desc_t*, uint64_t, uint64_t, dmapp_c_pset_attrs_t*,
                                   dmapp_c_pset_handle_t*) {
  return DMAPP_RC_NOT_SUPPORTED;
}
dmapp_return_t dmapp_c_pset_export(dmapp_c_pset_handle_t) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_c_pset_destroy(dmapp_c_pset_handle_t) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_c_barrier_join(dmapp_c_pset_handle_t) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_c_greduce_start(dmapp_c_pset_handle_t, void*, void*, uint32_t, dmapp_c_type_t, dmapp_c_op_t) {
  return DMAPP_RC_NOT_SUPPORTED;
}
dmapp_return_t dmapp_c_greduce_nelems_max(dmapp_c_type_t, uint32_t*) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_c_pset_test(dmapp_c_pset_handle_t) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_c_pset_wait(dmapp_c_pset_handle_t) { return DMAPP_RC_NOT_SUPPORTED; }
dmapp_return_t dmapp_c_pset_cancel_op(dmapp_c_pset_handle_t) { return DMAPP_RC_NOT_SUPPORTED; }

}  // extern "C"
