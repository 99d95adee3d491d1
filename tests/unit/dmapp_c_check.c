/* Compile-only check: dmapp.h is valid C11 and its values are the fact sheet's. */
#include <dmapp.h>

#include <stddef.h>

_Static_assert(DMAPP_RC_NOT_USED == 11 && DMAPP_RC_NO_SPACE == 6 && DMAPP_RC_NOT_SUPPORTED == 8, "dmapp_return_t");
_Static_assert(DMAPP_DQW == 0 && DMAPP_QW == 1 && DMAPP_DW == 2 && DMAPP_BYTE == 3, "dmapp_type_t");
_Static_assert(DMAPP_ROUTING_ADAPTIVE == 2 && DMAPP_PI_ORDERING_RELAXED == 2, "ordering enums");
_Static_assert(DMAPP_C_INT64_UINT64 == 112 && DMAPP_C_MAXLOC == 212, "collective enums");
_Static_assert(DMAPP_OFFLOAD_THRESHOLD == 4096 && DMAPP_MAX_OUTSTANDING_NB == 2048 &&
                   DMAPP_DEF_OUTSTANDING_NB == 512 && DMAPP_MIN_OUTSTANDING_NB == 5,
               "constants");
_Static_assert(offsetof(dmapp_seg_desc_t, memhndl) == 16 && offsetof(dmapp_seg_desc_t, flags) == 32,
               "dmapp_seg_desc_t field order");
_Static_assert(offsetof(dmapp_jobinfo_t, data_seg) == 16, "dmapp_jobinfo_t field order");
_Static_assert(offsetof(dmapp_rma_attrs_t, max_concurrency) == 10, "dmapp_rma_attrs_t field order");
_Static_assert(offsetof(dmapp_rma_attrs_ext_t, PI_ordering) == 11, "dmapp_rma_attrs_ext_t field order");
_Static_assert(sizeof(dmapp_lock_desc_t) == 8, "a lock is one 64-bit word");

int dmapp_c_check(void);

int dmapp_c_check(void)
{
    dmapp_syncid_handle_t id = NULL;
    dmapp_return_t (*put)(void *, dmapp_seg_desc_t *, dmapp_pe_t, void *, uint64_t, dmapp_type_t) = dmapp_put;
    return id == NULL && put != NULL;
}
