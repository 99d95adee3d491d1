/* Compile-only check: gni_pub.h is valid C11 and its macros expand in C code. */
#include <gni_pub.h>

#include <stddef.h>

_Static_assert(sizeof(gni_post_descriptor_t) == 184, "gni_post_descriptor_t is 184 bytes");
_Static_assert(offsetof(gni_post_descriptor_t, ce_red_id) == 176, "ce_red_id offset");
_Static_assert(sizeof(gni_smsg_attr_t) == 56, "gni_smsg_attr_t is 56 bytes");
_Static_assert(sizeof(gni_mem_handle_t) == 16, "gni_mem_handle_t is 16 bytes");
_Static_assert(GNI_VERSION == 0x00610104, "GNI_VERSION");
_Static_assert(GNI_NUM_STATS == 21, "Aries statistics configuration");

int gni_pub_c_check(gni_cq_entry_t entry);

int gni_pub_c_check(gni_cq_entry_t entry)
{
    gni_post_descriptor_t pd = {0};
    gni_cq_mode_t mode = GNI_CQ_BLOCKING;
    uint32_t cookie = GNI_JOB_CREATE_COOKIE(0xFA7B, 0);
    uint64_t (*get_data)(gni_cq_entry_t) = GNI_CQ_GET_DATA;

    pd.type = GNI_POST_AMO;
    pd.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    pd.dlvr_mode = GNI_DLVMODE_IN_ORDER;
    pd.amo_cmd = GNI_FMA_ATOMIC2_FIADD_S;
    pd.local_mem_hndl.qword1 = 0;

    GNI_CQ_SET_INST_ID(entry, 5);
    GNI_CQ_CLR_STATUS(entry);
    if (!GNI_CQ_STATUS_OK(entry) || GNI_CQ_OVERRUN(entry))
        return -1;
    if (GNI_CQ_GET_TYPE(entry) == GNI_CQ_EVENT_TYPE_SMSG)
        return (int)GNI_CQ_GET_MSG_ID(entry);
    return (int)(get_data(entry) & 0xFF) + (int)GNI_CQ_IS_BLOCKING(mode) + (int)(cookie >> 16) +
           (gni_err_str[GNI_RC_SUCCESS] != NULL) + (int)GNI_MEM_IS_EXTERNAL(GNI_MEM_READ_ONLY) +
           (int)pd.type;
}
