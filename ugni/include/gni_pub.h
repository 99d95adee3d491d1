/*
 * gni_pub.h — public interface of the uGNI (Generic Network Interface) user library,
 * as provided by nicemu's libugni.
 *
 * Names, values, signatures and struct layouts follow the project's uGNI fact sheet
 * (shared/spec/ugni-api.md, section numbers cited as §N). This header describes the
 * GNI_MINOR_REV 0x61 interface configured for Aries (statistics 0..20); the two
 * 0x5c-only checkpoint functions are declared as well so older sources still build.
 */
#ifndef _GNI_PUB_H_
#define _GNI_PUB_H_

#include <stdint.h>

/* Parameter direction markers (§1). Other Cray headers define some of these too. */
#ifndef IN
#define IN
#endif
#ifndef OUT
#define OUT
#endif
#ifndef INOUT
#define INOUT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * §1 Versions
 * ------------------------------------------------------------------------------------- */
#define GNI_MAJOR_REV 0x00
#define GNI_MINOR_REV 0x61
#define GNI_CODE_REV  0x0104

#define GNI_GET_MAJOR(value) (((value) >> 24) & 0xFF)
#define GNI_GET_MINOR(value) (((value) >> 16) & 0xFF)
#define GNI_GET_REV(value)   ((value) & 0xFFFF)

#define GNI_VERSION ((GNI_MAJOR_REV << 24) | (GNI_MINOR_REV << 16) | GNI_CODE_REV)
#define GNI_VERSION_CHECK(maj, min, code) (((maj) << 24) | ((min) << 16) | (code))

#define GNI_VERSION_FMA_SHARING            0x5b0000
#define GNI_VERSION_FMA_CHAIN_TRANSACTIONS 0x5d0000
#define GNI_VERSION_CDM_HOLD_RELEASE       0x600000
#define GNI_VERSION_CE_FPADD_RELEASE       0x610000

/* ---------------------------------------------------------------------------------------
 * §2 Handles and fundamental types
 * ------------------------------------------------------------------------------------- */
typedef struct gni_cdm *gni_cdm_handle_t;
typedef struct gni_nic *gni_nic_handle_t;
typedef struct gni_ep *gni_ep_handle_t;
typedef struct gni_cq *gni_cq_handle_t;
typedef struct gni_err *gni_err_handle_t;
typedef struct gni_msgq *gni_msgq_handle_t;
typedef struct gni_ce *gni_ce_handle_t;
typedef struct gni_comp_chan *gni_comp_chan_handle_t;
typedef struct gni_dqueue *gni_dqueue_handle_t;

/* Passed by value in descriptors and attrs; clients read, compare and send the words. */
typedef struct gni_mem_handle {
    uint64_t qword1;
    uint64_t qword2;
} gni_mem_handle_t;

typedef uint64_t gni_cq_entry_t;
typedef uint32_t gni_cq_mode_t;
typedef uint8_t gni_error_mask_t;

/* ---------------------------------------------------------------------------------------
 * §3 Return codes
 * ------------------------------------------------------------------------------------- */
typedef enum gni_return {
    GNI_RC_SUCCESS = 0,
    GNI_RC_NOT_DONE = 1,
    GNI_RC_INVALID_PARAM = 2,
    GNI_RC_ERROR_RESOURCE = 3,
    GNI_RC_TIMEOUT = 4,
    GNI_RC_PERMISSION_ERROR = 5,
    GNI_RC_DESCRIPTOR_ERROR = 6,
    GNI_RC_ALIGNMENT_ERROR = 7,
    GNI_RC_INVALID_STATE = 8,
    GNI_RC_NO_MATCH = 9,
    GNI_RC_SIZE_ERROR = 10,
    GNI_RC_TRANSACTION_ERROR = 11,
    GNI_RC_ILLEGAL_OP = 12,
    GNI_RC_ERROR_NOMEM = 13
} gni_return_t;

/* Indexed by gni_return_t; each entry is the enumerator's name. */
extern const char *gni_err_str[];

/* ---------------------------------------------------------------------------------------
 * §4 Protection tags, keys and cookies
 * ------------------------------------------------------------------------------------- */
enum {
    GNI_PTAG_LND = 1,
    GNI_PTAG_OFED = 2,
    GNI_PTAG_USER_START = 3,
    GNI_PTAG_LND_KNC = 128,
    GNI_PTAG_USER_END = 253,
    GNI_PTAG_HSNBOOT = 254,
    GNI_PTAG_MAX = 254,
    GNI_PTAG_LB = 255
};
#define GNI_FIND_ALLOC_PTAG GNI_PTAG_LB

enum {
    GNI_PKEY_INVALID = 0,
    GNI_PKEY_LND = 1,
    GNI_PKEY_OFED = 2,
    GNI_PKEY_USER_START = 128,
    GNI_PKEY_USER_END = 65407,
    GNI_PKEY_HSNBOOT = 65408,
    GNI_PKEY_MAX = 65534,
    GNI_PKEY_LB = 65535
};

#define GNI_COOKIE_PKEY_MASK      0xFFFF
#define GNI_COOKIE_PKEY_SHIFT     16
#define GNI_COOKIE_CBPS_MDD_MASK  0x7
#define GNI_COOKIE_CBPS_MDD_SHIFT 3
#define GNI_JOB_CREATE_COOKIE(pkey, cbps_mdd)                            \
    (((uint32_t)(pkey) << GNI_COOKIE_PKEY_SHIFT) |                       \
     (((cbps_mdd) & GNI_COOKIE_CBPS_MDD_MASK) << GNI_COOKIE_CBPS_MDD_SHIFT))

/* ---------------------------------------------------------------------------------------
 * §5.1 CDM modes
 * ------------------------------------------------------------------------------------- */
#define GNI_CDM_MODE_FORK_NOCOPY              0x00000001
#define GNI_CDM_MODE_FORK_FULLCOPY            0x00000002
#define GNI_CDM_MODE_FORK_PARTCOPY            0x00000004
#define GNI_CDM_MODE_ERR_NO_KILL              0x00000008
#define GNI_CDM_MODE_ERR_ALL_KILL             0x00000010
#define GNI_CDM_MODE_FAST_DATAGRAM_POLL       0x00000020
#define GNI_CDM_MODE_BTE_SINGLE_CHANNEL       0x00000040
#define GNI_CDM_MODE_USE_PCI_IOMMU            0x00000080
#define GNI_CDM_MODE_MDD_DEDICATED            0x00000100
#define GNI_CDM_MODE_MDD_SHARED               0x00000200
#define GNI_CDM_MODE_DUAL_EVENTS              0x00001000
#define GNI_CDM_MODE_DLA_ENABLE_FORWARDING    0x00004000
#define GNI_CDM_MODE_DLA_DISABLE_FORWARDING   0x00008000
#define GNI_CDM_MODE_FMA_DEDICATED            0x00010000
#define GNI_CDM_MODE_FMA_SHARED               0x00020000
#define GNI_CDM_MODE_CACHED_AMO_ENABLED       0x00040000
#define GNI_CDM_MODE_CQ_NIC_LOCAL_PLACEMENT   0x00080000
#define GNI_CDM_MODE_FLBTE_DISABLE            0x00100000
#define GNI_CDM_MODE_FMA_SMALL_WINDOW         0x00200000
#define GNI_CDM_MODE_MASK                     0x0FFFFFFF
#define GNI_CDM_MODE_PRIV_RESERVED_1          0x10000000
#define GNI_CDM_MODE_PRIV_RESERVED_2          0x20000000
#define GNI_CDM_MODE_PRIV_RESERVED_3          0x40000000
#define GNI_CDM_MODE_PRIV_RESERVED_4          0x80000000
#define GNI_CDM_MODE_PRIV_MASK                0xF0000000

/* ---------------------------------------------------------------------------------------
 * §6.1 Devices, resources, versions, statistics
 * ------------------------------------------------------------------------------------- */
typedef enum gni_nic_device {
    GNI_DEVICE_GEMINI = 0,
    GNI_DEVICE_ARIES = 1,
    GNI_DEVICE_PISCES = 2,
    GNI_DEVICE_LAST = 3
} gni_nic_device_t;

typedef enum gni_dev_res {
    GNI_DEV_RES_FIRST = 0,
    GNI_DEV_RES_MDD = 1,
    GNI_DEV_RES_MRT = 2,
    GNI_DEV_RES_CQ = 3,
    GNI_DEV_RES_FMA = 4,
    GNI_DEV_RES_CE = 5,
    GNI_DEV_RES_DLA = 6,
    GNI_DEV_RES_TCR = 7,
    GNI_DEV_RES_DVA = 8,
    GNI_DEV_RES_VMDH = 9,
    GNI_DEV_RES_LAST = 10
} gni_dev_res_t;

typedef struct gni_dev_res_desc {
    uint64_t available;
    uint64_t reserved;
    uint64_t held;
    uint64_t total;
} gni_dev_res_desc_t;

typedef enum gni_job_res {
    GNI_JOB_RES_FIRST = 0,
    GNI_JOB_RES_MDD = 1,
    GNI_JOB_RES_MRT = 2,
    GNI_JOB_RES_IOMMU = 3,
    GNI_JOB_RES_GART = 4,
    GNI_JOB_RES_CQ = 5,
    GNI_JOB_RES_FMA = 6,
    GNI_JOB_RES_RDMA = 7,
    GNI_JOB_RES_CE = 8,
    GNI_JOB_RES_DLA = 9,
    GNI_JOB_RES_SFMA = 10,
    GNI_JOB_RES_DIRECT = 11,
    GNI_JOB_RES_PCI_IOMMU = 12,
    GNI_JOB_RES_NONVMDH = 13,
    GNI_JOB_RES_LAST = 14
} gni_job_res_t;
/* Older (0x5c) headers misspelled it; keep such sources building (§19.6). */
#define GNI_JOB_RES_RMDA GNI_JOB_RES_RDMA

typedef struct gni_job_res_desc {
    uint64_t used;
    uint64_t limit;
} gni_job_res_desc_t;

#define MAX_BUILD_STRING_LENGTH 80

typedef struct gni_version_info {
    uint32_t ugni_version;
    uint32_t ugni_svn_revision;
    char ugni_build_string[MAX_BUILD_STRING_LENGTH];
    uint32_t kgni_version;
    uint32_t kgni_svn_revision;
    char kgni_build_string[MAX_BUILD_STRING_LENGTH];
} gni_version_info_t;

#define GNI_MAX_CAPABILITY_WORDS 6

typedef struct gni_revision_info {
    uint64_t revision_instance;
    int nid;
    uint32_t user_major_revision;
    uint32_t user_minor_revision;
    uint32_t user_code_revision;
    uint32_t driver_major_revision;
    uint32_t driver_minor_revision;
    uint32_t driver_code_revision;
    uint32_t maximum_defined_capabilities;
    uint64_t capabilities[GNI_MAX_CAPABILITY_WORDS];
    uint64_t requirement[GNI_MAX_CAPABILITY_WORDS];
} gni_revision_info_t;

/* The Aries configuration of the 0x61 header: the DLA/FLBTE block is present. */
typedef enum gni_statistic {
    GNI_STAT_SMSG_BUFF_CREDITS_STALL = 0,
    GNI_STAT_SMSG_DLA_STALL = 1,
    GNI_STAT_SMSG_MBOX_CREDITS_STALL = 2,
    GNI_STAT_SMSG_REQ_STALL = 3,
    GNI_STAT_SMSG_RETRANS_COUNT = 4,
    GNI_STAT_SMSG_RETRANS_DLA_COUNT = 5,
    GNI_STAT_SMSG_RETRANS_STALL = 6,
    GNI_STAT_DLA_ALLOC_STATUS_STALL = 7,
    GNI_STAT_DLA_ALLOC_STATUS_TIMEOUT = 8,
    GNI_STAT_DLA_BLOCK_ORPHANED = 9,
    GNI_STAT_DLA_BLOCK_RETRANS_COUNT = 10,
    GNI_STAT_DLA_FREE_BLOCKS_STALL = 11,
    GNI_STAT_DLA_FREE_FMAD_BLOCKS_STALL = 12,
    GNI_STAT_DLA_HIGH_RETRANS_COUNT = 13,
    GNI_STAT_DLA_OVERFLOW_RESEND = 14,
    GNI_STAT_DLA_RETRANS_COUNT = 15,
    GNI_STAT_DLA_TOTAL_RETRANS_COUNT = 16,
    GNI_STAT_FLBTE_TXD_CORRUPT = 17,
    GNI_STAT_FLBTE_TXD_NONE = 18,
    GNI_STAT_FMA_LAUNCH_COUNT = 19,
    GNI_STAT_MR_MULTI_PAGESIZE = 20,
    GNI_NUM_STATS = 21
} gni_statistic_t;

/* GNI_NUM_STATS names, without the GNI_STAT_ prefix. */
extern const char *gni_statistic_str[];

/* ---------------------------------------------------------------------------------------
 * §7.1 Privileged job configuration, NTT, ORB and bandwidth injection
 * ------------------------------------------------------------------------------------- */
typedef struct gni_ntt_entry {
    uint32_t blck_addr;
    uint32_t rplc_addr;
    uint8_t rplc_size;
} gni_ntt_entry_t;

typedef struct gni_ntt_descriptor {
    uint32_t group_size;
    uint8_t granularity;
    union {
        uint32_t *table;
        gni_ntt_entry_t *table_v2;
    } u;
    uint8_t flags;
} gni_ntt_descriptor_t;

typedef struct gni_job_limits {
    int32_t mdd_limit;
    union {
        int32_t mrt_limit;    /* Gemini */
        struct {              /* Aries */
            uint8_t ce_limit;
            uint8_t iommu_limit;
            uint8_t res_byte2;
            uint8_t res_byte3;
        } m;
    } a;
    union {
        int32_t gart_limit;   /* Gemini */
        int32_t dla_limit;    /* Aries */
    } b;
    int32_t fma_limit;
    int32_t bte_limit;
    int32_t cq_limit;
    int32_t ntt_ctrl;
    int32_t ntt_base;
    int32_t ntt_size;
} gni_job_limits_t;

#define GNI_JOB_INVALID_LIMIT    (-1)
#define GNI_JOB_CTRL_NTT_CLEANUP 0x01
#define GNI_JOB_CTRL_CE0_MASK    (1 << 0)
#define GNI_JOB_CTRL_CE1_MASK    (1 << 1)
#define GNI_JOB_CTRL_CE2_MASK    (1 << 2)
#define GNI_JOB_CTRL_CE3_MASK    (1 << 3)
#define GNI_JOB_CTRL_ALL_CE_MASK                                         \
    (GNI_JOB_CTRL_CE0_MASK | GNI_JOB_CTRL_CE1_MASK | GNI_JOB_CTRL_CE2_MASK | \
     GNI_JOB_CTRL_CE3_MASK)

typedef enum gni_dev_orb_mmr {
    GNI_DEV_ORB_MMR_FIRST = 0,
    GNI_DEV_ORB_MMR_MAX_PID_CNT = 1,
    GNI_DEV_ORB_MMR_LAST = 2
} gni_dev_orb_mmr_t;

/* Pass as the new value to GNI_SetDeviceOrbMMR to read without changing. */
#define GET_DEV_ORB_MMR_VALUE 0xffffffffffffffffULL

typedef struct gni_bi_desc {
    uint16_t current_bw;
    uint16_t current_aot_bw;
    uint16_t current_norbs;
    uint16_t flags;
    uint16_t sys_def_bw;
    uint16_t sys_def_aot_bw;
    uint16_t cle_seqnum;
    uint16_t hss_seqnum;
} gni_bi_desc_t;

#define GNI_BI_FLAG_APPLY_NOW                0x1
#define GNI_BI_FLAG_APPLY_AFTER_THROTTLE     0x2
#define GNI_BI_FLAG_USE_DEFAULT_SETTINGS     0x4
#define GNI_BI_FLAG_VALUE_IS_NUM_ORB_ENTRIES 0x8
#define GNI_BI_INJECT_BW_MIN     0
#define GNI_BI_INJECT_BW_MAX     100
#define GNI_BI_INJECT_BW_ORB_MIN 0
#define GNI_BI_INJECT_BW_ORB_MAX 992

/* ---------------------------------------------------------------------------------------
 * §9 Datagrams
 * ------------------------------------------------------------------------------------- */
#define GNI_DATAGRAM_MAXSIZE 128

typedef enum gni_post_state {
    GNI_POST_PENDING = 0,
    GNI_POST_COMPLETED = 1,
    GNI_POST_ERROR = 2,
    GNI_POST_TIMEOUT = 3,
    GNI_POST_TERMINATED = 4,
    GNI_POST_REMOTE_DATA = 5
} gni_post_state_t;

/* ---------------------------------------------------------------------------------------
 * §10 Memory registration
 * ------------------------------------------------------------------------------------- */
#define GNI_MEM_READWRITE            0x00000000
#define GNI_MEM_READ_ONLY            0x00000001
#define GNI_MEM_USE_VMDH             0x00000002
#define GNI_MEM_USE_GART             0x00000004
#define GNI_MEM_PHYS_CONT            0x00000008
#define GNI_MEM_PHYS_SEGMENTS        0x00000010
#define GNI_MEM_STRICT_PI_ORDERING   0x00000020
#define GNI_MEM_PI_FLUSH             0x00000040
#define GNI_MEM_MDD_CLONE            0x00000080
#define GNI_MEM_RELAXED_PI_ORDERING  0x00000100
#define GNI_MEM_RESERVE_REGION       0x00000200
#define GNI_MEM_UPDATE_REGION        0x00000400
#define GNI_MEM_MDD_SHARED           0x00000800
#define GNI_MEM_MDD_DEDICATED        0x00001000
#define GNI_MEM_PRIV_RESERVED_1      0x00100000
#define GNI_MEM_PRIV_RESERVED_2      0x00200000
#define GNI_MEM_PRIV_RESERVED_3      0x00400000
#define GNI_MEM_PRIV_RESERVED_4      0x00800000
#define GNI_MEM_PRIV_MASK            0x00F00000
#define GNI_MEM_CUDA                 0x01000000
#define GNI_EXMEM_FLAGS(flags)       ((flags) >> 24)
#define GNI_MEM_IS_EXTERNAL(flags)   GNI_EXMEM_FLAGS(flags)

typedef struct gni_mem_segment {
    uint64_t address;
    uint64_t length;
} gni_mem_segment_t;

typedef enum gni_mem_handle_attr {
    GNI_MEMHNDL_ATTR_READONLY = 1,
    GNI_MEMHNDL_ATTR_VMDH = 2,
    GNI_MEMHNDL_ATTR_MRT = 3,
    GNI_MEMHNDL_ATTR_GART = 4,
    GNI_MEMHNDL_ATTR_IOMMU = 5,
    GNI_MEMHNDL_ATTR_PCI_IOMMU = 6,
    GNI_MEMHNDL_ATTR_CLONE = 7
} gni_mem_handle_attr_t;

/* ---------------------------------------------------------------------------------------
 * §11 Completion queues
 * ------------------------------------------------------------------------------------- */
#define GNI_CQ_NOBLOCK          0x00000000
#define GNI_CQ_BLOCKING         0x00000001
#define GNI_CQ_EMULATED         0x00000002
#define GNI_CQ_EMULATED_INVALID 0x00000003
#define GNI_CQ_PHYS_PAGES       0x00000004
#define GNI_CQ_UNMANAGED        0x00000008
#define GNI_CQ_NOAUTOFILL       0x00000010

#define GNI_CQ_IS_NON_BLOCKING(mode)  (((mode) & GNI_CQ_BLOCKING) == GNI_CQ_NOBLOCK)
#define GNI_CQ_IS_BLOCKING(mode)      (((mode) & GNI_CQ_BLOCKING) == GNI_CQ_BLOCKING)
#define GNI_CQ_IS_EMULATED(mode)      (((mode) & GNI_CQ_EMULATED) == GNI_CQ_EMULATED)
#define GNI_CQ_IS_NOT_EMULATED(mode)  (((mode) & GNI_CQ_EMULATED) == 0)
#define GNI_CQ_IS_INVALID_EMULATED(mode) \
    (((mode) & GNI_CQ_EMULATED_INVALID) == GNI_CQ_EMULATED_INVALID)
#define GNI_CQ_USE_PHYS_PAGES(mode)   (((mode) & GNI_CQ_PHYS_PAGES) == GNI_CQ_PHYS_PAGES)

#define GNI_CQ_EVENT_TYPE_POST  0x0ULL
#define GNI_CQ_EVENT_TYPE_SMSG  0x1ULL
#define GNI_CQ_EVENT_TYPE_DMAPP 0x2ULL
#define GNI_CQ_EVENT_TYPE_MSGQ  0x3ULL

/*
 * Entry accessors are exported library functions (§11.3); the upper-case names alias
 * them. GET macros are bare function names; SET/CLR macros take an lvalue entry.
 */
#define GNI_CQ_GET_DATA               gni_cq_get_data
#define GNI_CQ_GET_SOURCE             gni_cq_get_source
#define GNI_CQ_GET_STATUS             gni_cq_get_status
#define GNI_CQ_GET_INFO               gni_cq_get_info
#define GNI_CQ_OVERRUN                gni_cq_overrun
#define GNI_CQ_REM_OVERRUN            gni_cq_rem_overrun
#define GNI_CQ_GET_INST_ID            gni_cq_get_inst_id
#define GNI_CQ_GET_REM_INST_ID        gni_cq_get_rem_inst_id
#define GNI_CQ_GET_TID                gni_cq_get_tid
#define GNI_CQ_GET_MSG_ID             gni_cq_get_msg_id
#define GNI_CQ_GET_TYPE               gni_cq_get_type
#define GNI_CQ_GET_BLOCK_ID           gni_cq_get_block_id
#define GNI_CQ_GET_UNSUCCESSFUL_CNT   gni_cq_get_unsuccessful_cnt
#define GNI_CQ_GET_MARKER_ID          gni_cq_get_marker_id
#define GNI_CQ_GET_FAILED_ENQUEUE_CNT gni_cq_get_failed_enqueue_cnt
#define GNI_CQ_GET_CE_ID              gni_cq_get_ce_id
#define GNI_CQ_GET_REDUCTN_ID         gni_cq_get_reductn_id
#define GNI_CQ_GET_TRANS_TYPE         gni_cq_get_trans_type
#define GNI_CQ_SET_INST_ID(entry, val)     gni_cq_set_inst_id(&(entry), (val))
#define GNI_CQ_SET_REM_INST_ID(entry, val) gni_cq_set_rem_inst_id(&(entry), (val))
#define GNI_CQ_SET_TID(entry, val)         gni_cq_set_tid(&(entry), (val))
#define GNI_CQ_SET_MSG_ID(entry, val)      gni_cq_set_msg_id(&(entry), (val))
#define GNI_CQ_SET_TYPE(entry, val)        gni_cq_set_type(&(entry), (val))
#define GNI_CQ_CLR_STATUS(entry)           gni_cq_clr_status(&(entry))
#define GNI_CQ_STATUS_OK(entry)            (gni_cq_get_status(entry) == 0)
#define GNI_CQ_STATUS_DLA_OVERFLOW(entry)  (gni_cq_status_dla_overflow(entry))
#define GNI_CQ_BTE_ENQ_STATUS(entry)       gni_cq_bte_enq_status(entry)

/* ---------------------------------------------------------------------------------------
 * §12 Post descriptors
 * ------------------------------------------------------------------------------------- */
typedef enum gni_post_type {
    GNI_POST_RDMA_PUT = 1,
    GNI_POST_RDMA_GET = 2,
    GNI_POST_FMA_PUT = 3,
    GNI_POST_FMA_PUT_W_SYNCFLAG = 4,
    GNI_POST_FMA_GET = 5,
    GNI_POST_AMO = 6,
    GNI_POST_CQWRITE = 7,
    GNI_POST_CE = 8,
    GNI_POST_FMA_GET_W_FLAG = 9,
    GNI_POST_AMO_W_FLAG = 10
} gni_post_type_t;

/* Bytes of flag in a flagged response (GNI_POST_FMA_GET_W_FLAG, GNI_POST_AMO_W_FLAG). */
#define GNI_FMA_FLAGGED_RESPONSE_SIZE 4

#define GNI_CQMODE_SILENT       0x0000
#define GNI_CQMODE_LOCAL_EVENT  0x0001
#define GNI_CQMODE_GLOBAL_EVENT 0x0002
#define GNI_CQMODE_REMOTE_EVENT 0x0004
#define GNI_CQMODE_DUAL_EVENTS  0x0003

#define GNI_DLVMODE_PERFORMANCE  0x0000
#define GNI_DLVMODE_NO_ADAPT     0x0001
#define GNI_DLVMODE_NO_HASH      0x0002
#define GNI_DLVMODE_NO_RADAPT    0x0004
#define GNI_DLVMODE_IN_ORDER     (GNI_DLVMODE_NO_ADAPT | GNI_DLVMODE_NO_HASH)
#define GNI_DLVMODE_MNON_HASH    GNI_DLVMODE_IN_ORDER
#define GNI_DLVMODE_NMIN_HASH    0x0008
#define GNI_DLVMODE_MIN_HASH     0x0010
#define GNI_DLVMODE_ADAPTIVE0    GNI_DLVMODE_PERFORMANCE
#define GNI_DLVMODE_ADAPTIVE1    0x0020
#define GNI_DLVMODE_ADAPTIVE2    0x0040
#define GNI_DLVMODE_ADAPTIVE3    0x0080
#define GNI_DLVMODE_ORDERED_TAIL 0x0100

#define GNI_RDMAMODE_PHYS_ADDR 0x0001
#define GNI_RDMAMODE_FENCE     0x0002
#define GNI_RDMAMODE_GETWC_DIS 0x0004

/* §13 AMO commands. */
typedef enum gni_fma_cmd_type {
    /* gen-1, fetching */
    GNI_FMA_ATOMIC_FADD = 0x008,
    GNI_FMA_ATOMIC_FADD_C = 0x018,
    GNI_FMA_ATOMIC_FAND = 0x009,
    GNI_FMA_ATOMIC_FAND_C = 0x019,
    GNI_FMA_ATOMIC_FOR = 0x00A,
    GNI_FMA_ATOMIC_FOR_C = 0x01A,
    GNI_FMA_ATOMIC_FXOR = 0x00B,
    GNI_FMA_ATOMIC_FXOR_C = 0x01B,
    GNI_FMA_ATOMIC_FAX = 0x00C,
    GNI_FMA_ATOMIC_FAX_C = 0x01C,
    GNI_FMA_ATOMIC_CSWAP = 0x00D,
    GNI_FMA_ATOMIC_CSWAP_C = 0x01D,
    /* gen-1, non-fetching */
    GNI_FMA_ATOMIC_ADD = 0x108,
    GNI_FMA_ATOMIC_ADD_C = 0x118,
    GNI_FMA_ATOMIC_AND = 0x109,
    GNI_FMA_ATOMIC_AND_C = 0x119,
    GNI_FMA_ATOMIC_OR = 0x10A,
    GNI_FMA_ATOMIC_OR_C = 0x11A,
    GNI_FMA_ATOMIC_XOR = 0x10B,
    GNI_FMA_ATOMIC_XOR_C = 0x11B,
    GNI_FMA_ATOMIC_AX = 0x10C,
    GNI_FMA_ATOMIC_AX_C = 0x11C,
    /* gen-2, fetching */
    GNI_FMA_ATOMIC2_FAND = 0x041,
    GNI_FMA_ATOMIC2_FAND_S = 0x240,
    GNI_FMA_ATOMIC2_FAND_SC = 0x260,
    GNI_FMA_ATOMIC2_FAND_C = 0x061,
    GNI_FMA_ATOMIC2_FOR = 0x043,
    GNI_FMA_ATOMIC2_FOR_S = 0x242,
    GNI_FMA_ATOMIC2_FOR_SC = 0x262,
    GNI_FMA_ATOMIC2_FOR_C = 0x063,
    GNI_FMA_ATOMIC2_FXOR = 0x045,
    GNI_FMA_ATOMIC2_FXOR_S = 0x244,
    GNI_FMA_ATOMIC2_FXOR_SC = 0x264,
    GNI_FMA_ATOMIC2_FXOR_C = 0x065,
    GNI_FMA_ATOMIC2_FSWAP = 0x047,
    GNI_FMA_ATOMIC2_FSWAP_S = 0x246,
    GNI_FMA_ATOMIC2_FSWAP_SC = 0x266,
    GNI_FMA_ATOMIC2_FSWAP_C = 0x067,
    GNI_FMA_ATOMIC2_FAX = 0x049,
    GNI_FMA_ATOMIC2_FAX_S = 0x248,
    GNI_FMA_ATOMIC2_FAX_SC = 0x268,
    GNI_FMA_ATOMIC2_FAX_C = 0x069,
    GNI_FMA_ATOMIC2_FCSWAP = 0x04B,
    GNI_FMA_ATOMIC2_FCSWAP_S = 0x24A,
    GNI_FMA_ATOMIC2_FCSWAP_SC = 0x26A,
    GNI_FMA_ATOMIC2_FCSWAP_C = 0x06B,
    GNI_FMA_ATOMIC2_FIMIN = 0x051,
    GNI_FMA_ATOMIC2_FIMIN_S = 0x250,
    GNI_FMA_ATOMIC2_FIMIN_SC = 0x270,
    GNI_FMA_ATOMIC2_FIMIN_C = 0x071,
    GNI_FMA_ATOMIC2_FIMAX = 0x053,
    GNI_FMA_ATOMIC2_FIMAX_S = 0x252,
    GNI_FMA_ATOMIC2_FIMAX_SC = 0x272,
    GNI_FMA_ATOMIC2_FIMAX_C = 0x073,
    GNI_FMA_ATOMIC2_FIADD = 0x055,
    GNI_FMA_ATOMIC2_FIADD_S = 0x254,
    GNI_FMA_ATOMIC2_FIADD_SC = 0x274,
    GNI_FMA_ATOMIC2_FIADD_C = 0x075,
    GNI_FMA_ATOMIC2_FFPMIN = 0x059,
    GNI_FMA_ATOMIC2_FFPMIN_S = 0x258,
    GNI_FMA_ATOMIC2_FFPMIN_SC = 0x278,
    GNI_FMA_ATOMIC2_FFPMIN_C = 0x079,
    GNI_FMA_ATOMIC2_FFPMAX = 0x05B,
    GNI_FMA_ATOMIC2_FFPMAX_S = 0x25A,
    GNI_FMA_ATOMIC2_FFPMAX_SC = 0x27A,
    GNI_FMA_ATOMIC2_FFPMAX_C = 0x07B,
    GNI_FMA_ATOMIC2_FFPADD = 0x05D,
    GNI_FMA_ATOMIC2_FFPADD_S = 0x25C,
    GNI_FMA_ATOMIC2_FFPADD_SC = 0x27C,
    GNI_FMA_ATOMIC2_FFPADD_C = 0x07D,
    /* gen-2, non-fetching */
    GNI_FMA_ATOMIC2_AND = 0x141,
    GNI_FMA_ATOMIC2_AND_S = 0x340,
    GNI_FMA_ATOMIC2_AND_SC = 0x360,
    GNI_FMA_ATOMIC2_AND_C = 0x161,
    GNI_FMA_ATOMIC2_OR = 0x143,
    GNI_FMA_ATOMIC2_OR_S = 0x342,
    GNI_FMA_ATOMIC2_OR_SC = 0x362,
    GNI_FMA_ATOMIC2_OR_C = 0x163,
    GNI_FMA_ATOMIC2_XOR = 0x145,
    GNI_FMA_ATOMIC2_XOR_S = 0x344,
    GNI_FMA_ATOMIC2_XOR_SC = 0x364,
    GNI_FMA_ATOMIC2_XOR_C = 0x165,
    GNI_FMA_ATOMIC2_SWAP = 0x147,
    GNI_FMA_ATOMIC2_SWAP_S = 0x346,
    GNI_FMA_ATOMIC2_SWAP_SC = 0x366,
    GNI_FMA_ATOMIC2_SWAP_C = 0x167,
    GNI_FMA_ATOMIC2_AX = 0x149,
    GNI_FMA_ATOMIC2_AX_S = 0x348,
    GNI_FMA_ATOMIC2_AX_SC = 0x368,
    GNI_FMA_ATOMIC2_AX_C = 0x169,
    GNI_FMA_ATOMIC2_CSWAP = 0x14B,
    GNI_FMA_ATOMIC2_CSWAP_S = 0x34A,
    GNI_FMA_ATOMIC2_CSWAP_SC = 0x36A,
    GNI_FMA_ATOMIC2_CSWAP_C = 0x16B,
    GNI_FMA_ATOMIC2_IMIN = 0x151,
    GNI_FMA_ATOMIC2_IMIN_S = 0x350,
    GNI_FMA_ATOMIC2_IMIN_SC = 0x370,
    GNI_FMA_ATOMIC2_IMIN_C = 0x171,
    GNI_FMA_ATOMIC2_IMAX = 0x153,
    GNI_FMA_ATOMIC2_IMAX_S = 0x352,
    GNI_FMA_ATOMIC2_IMAX_SC = 0x372,
    GNI_FMA_ATOMIC2_IMAX_C = 0x173,
    GNI_FMA_ATOMIC2_IADD = 0x155,
    GNI_FMA_ATOMIC2_IADD_S = 0x354,
    GNI_FMA_ATOMIC2_IADD_SC = 0x374,
    GNI_FMA_ATOMIC2_IADD_C = 0x175,
    GNI_FMA_ATOMIC2_FPMIN = 0x159,
    GNI_FMA_ATOMIC2_FPMIN_S = 0x358,
    GNI_FMA_ATOMIC2_FPMIN_SC = 0x378,
    GNI_FMA_ATOMIC2_FPMIN_C = 0x179,
    GNI_FMA_ATOMIC2_FPMAX = 0x15B,
    GNI_FMA_ATOMIC2_FPMAX_S = 0x35A,
    GNI_FMA_ATOMIC2_FPMAX_SC = 0x37A,
    GNI_FMA_ATOMIC2_FPMAX_C = 0x17B,
    GNI_FMA_ATOMIC2_FPADD = 0x15D,
    GNI_FMA_ATOMIC2_FPADD_S = 0x35C,
    GNI_FMA_ATOMIC2_FPADD_SC = 0x37C,
    GNI_FMA_ATOMIC2_FPADD_C = 0x17D
} gni_fma_cmd_type_t;

/* §16 Collective-engine commands (used in gni_post_descriptor_t.ce_cmd). */
typedef enum gni_ce_cmd_type {
    GNI_FMA_CE_AND_S = 0x0,
    GNI_FMA_CE_AND = 0x1,
    GNI_FMA_CE_OR_S = 0x2,
    GNI_FMA_CE_OR = 0x3,
    GNI_FMA_CE_XOR_S = 0x4,
    GNI_FMA_CE_XOR = 0x5,
    GNI_FMA_CE_IMIN_LIDX_S = 0x10,
    GNI_FMA_CE_IMIN_LIDX = 0x11,
    GNI_FMA_CE_IMAX_LIDX_S = 0x12,
    GNI_FMA_CE_IMAX_LIDX = 0x13,
    GNI_FMA_CE_IADD_S = 0x14,
    GNI_FMA_CE_IADD = 0x15,
    GNI_FMA_CE_FPMIN_LIDX_S = 0x18,
    GNI_FMA_CE_FPMIN_LIDX = 0x19,
    GNI_FMA_CE_FPMAX_LIDX_S = 0x1a,
    GNI_FMA_CE_FPMAX_LIDX = 0x1b,
    GNI_FMA_CE_FPADD_S = 0x1c,
    GNI_FMA_CE_FPADD = 0x1d,
    GNI_FMA_CE_IMIN_GIDX_S = 0x30,
    GNI_FMA_CE_IMIN_GIDX = 0x31,
    GNI_FMA_CE_IMAX_GIDX_S = 0x32,
    GNI_FMA_CE_IMAX_GIDX = 0x33,
    GNI_FMA_CE_FPMIN_GIDX_S = 0x38,
    GNI_FMA_CE_FPMIN_GIDX = 0x39,
    GNI_FMA_CE_FPMAX_GIDX_S = 0x3a,
    GNI_FMA_CE_FPMAX_GIDX = 0x3b
} gni_ce_cmd_type_t;

/*
 * The library keeps the caller's pointer until GNI_GetCompleted returns it and writes
 * only status, cq_mode_complete and the link fields (§12.2). 184 bytes on LP64.
 */
typedef struct gni_post_descriptor {
    void *next_descr;
    void *prev_descr;
    uint64_t post_id;
    uint64_t status;
    uint16_t cq_mode_complete;
    gni_post_type_t type;
    uint16_t cq_mode;
    uint16_t dlvr_mode;
    uint64_t local_addr;
    gni_mem_handle_t local_mem_hndl;
    uint64_t remote_addr;
    gni_mem_handle_t remote_mem_hndl;
    uint64_t length;
    uint16_t rdma_mode;
    gni_cq_handle_t src_cq_hndl;
    uint64_t sync_flag_value;
    uint64_t sync_flag_addr;
    gni_fma_cmd_type_t amo_cmd;
    uint64_t first_operand;
    uint64_t second_operand;
    uint64_t cqwrite_value;
    gni_ce_cmd_type_t ce_cmd;
    uint32_t ce_mode;
    uint64_t ce_red_id;
} gni_post_descriptor_t;

/* §12.5 Chained-transaction elements, linked through next_descr. */
typedef struct gni_ct_put_post_descriptor {
    void *next_descr;
    gni_ep_handle_t ep_hndl;
    uint64_t length;
    uint64_t remote_addr;
    gni_mem_handle_t remote_mem_hndl;
    uint64_t local_addr;
} gni_ct_put_post_descriptor_t;

typedef struct gni_ct_get_post_descriptor {
    void *next_descr;
    gni_ep_handle_t ep_hndl;
    uint64_t length;
    uint64_t remote_addr;
    gni_mem_handle_t remote_mem_hndl;
    uint64_t local_addr;
    gni_mem_handle_t local_mem_hndl;
} gni_ct_get_post_descriptor_t;

typedef struct gni_ct_amo_post_descriptor {
    void *next_descr;
    gni_ep_handle_t ep_hndl;
    uint64_t length;
    uint64_t remote_addr;
    gni_mem_handle_t remote_mem_hndl;
    uint64_t local_addr;
    gni_mem_handle_t local_mem_hndl;
    gni_fma_cmd_type_t amo_cmd;
    uint64_t first_operand;
    uint64_t second_operand;
} gni_ct_amo_post_descriptor_t;

typedef struct gni_ct_cqw_post_descriptor {
    void *next_descr;
    gni_ep_handle_t ep_hndl;
    gni_mem_handle_t remote_mem_hndl;
    uint64_t cqwrite_value;
} gni_ct_cqw_post_descriptor_t;

typedef struct gni_ct_uni_post_descriptor {
    union {
        gni_ct_put_post_descriptor_t put;
        gni_ct_get_post_descriptor_t get;
        gni_ct_amo_post_descriptor_t amo;
        gni_ct_cqw_post_descriptor_t cqw;
    } u;
} gni_ct_uni_post_descriptor_t;

/* ---------------------------------------------------------------------------------------
 * §14 Short messaging (SMSG)
 * ------------------------------------------------------------------------------------- */
typedef enum gni_smsg_type {
    GNI_SMSG_TYPE_INVALID = 0,
    GNI_SMSG_TYPE_MBOX = 1,
    GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT = 2
} gni_smsg_type_t;

/* 56 bytes on LP64. */
typedef struct gni_smsg_attr {
    gni_smsg_type_t msg_type;
    void *msg_buffer;
    uint32_t buff_size;
    gni_mem_handle_t mem_hndl;
    uint32_t mbox_offset;
    uint16_t mbox_maxcredit;
    uint32_t msg_maxsize;
} gni_smsg_attr_t;

#define GNI_SMSG_ANY_TAG             0xFF
#define FMA_SMSG_MAX_RETRANS_DEFAULT 10
#define GNI_SMSG_MAX_SIZE            65535

/* ---------------------------------------------------------------------------------------
 * §15 Message queue (MSGQ)
 * ------------------------------------------------------------------------------------- */
#define GNI_MSGQ_MSG_SZ_MAX     128
#define GNI_MSGQ_NODE_INSTS_MAX 128
#define GNI_MSGQ_MODE_BLOCKING  0x01

/* A function type; used as gni_msgq_rcv_cb_func *. */
typedef int gni_msgq_rcv_cb_func(uint32_t snd_id, uint32_t snd_pe, void *msg,
                                 uint8_t msg_tag, void *cb_data);

typedef struct gni_msgq_attr {
    uint32_t max_msg_sz;
    uint32_t smsg_q_sz;
    uint32_t rcv_pool_sz;
    uint32_t num_msgq_eps;
    uint32_t nloc_insts;
    uint8_t modes;
    uint32_t rcv_cq_sz;
} gni_msgq_attr_t;

typedef struct gni_msgq_rem_inst {
    uint32_t id;
    gni_mem_handle_t mdh;
    uint64_t mdh_off;
} gni_msgq_rem_inst_t;

typedef struct gni_msgq_ep_attr {
    uint32_t pe_addr;
    uint32_t max_msg_sz;
    uint32_t smsg_q_sz;
    uint32_t num_insts;
    gni_msgq_rem_inst_t insts[GNI_MSGQ_NODE_INSTS_MAX];
} gni_msgq_ep_attr_t;

/* ---------------------------------------------------------------------------------------
 * §16 Collective engine (CE)
 * ------------------------------------------------------------------------------------- */
typedef struct gni_ce_result {
    uint64_t control;
    uint64_t result1;
    uint64_t result2;
} gni_ce_result_t;

#define GNI_CE_RES_GET_STATUS gni_ce_res_get_status
#define GNI_CE_RES_STATUS_OK  gni_ce_res_status_ok
#define GNI_CE_RES_GET_FPE    gni_ce_res_get_fpe
#define GNI_CE_RES_GET_RED_ID gni_ce_res_get_red_id

#define GNI_CE_FPE_OP_INVAL   0x1
#define GNI_CE_FPE_OFLOW      0x2
#define GNI_CE_FPE_UFLOW      0x4
#define GNI_CE_FPE_PRECISION  0x8

typedef enum gni_ce_child {
    GNI_CE_CHILD_UNUSED = 0,
    GNI_CE_CHILD_VCE = 1,
    GNI_CE_CHILD_PE = 2
} gni_ce_child_t;

#define GNI_CE_MODE_ROUND_UP     0x00000001
#define GNI_CE_MODE_ROUND_DOWN   0x00000002
#define GNI_CE_MODE_ROUND_NEAR   0x00000004
#define GNI_CE_MODE_ROUND_ZERO   0x00000008
#define GNI_CE_MODE_CQE_ONCOMP   0x00000010
#define GNI_CE_MODE_CQE_ONERR    0x00000040
#define GNI_CE_MODE_RC_NMIN_HASH 0x00000080
#define GNI_CE_MODE_RC_MIN_HASH  0x00000100
#define GNI_CE_MODE_RC_MNON_HASH 0x00000200
#define GNI_CE_MODE_RC_ADAPT     0x00000400

#define GNI_CE_MAX_CHILDREN 32

#define GNI_CEMODE_TWO_OP        (1 << 0)
#define GNI_CEMODE_FPE_OP_INVAL  (1 << 1)
#define GNI_CEMODE_FPE_OFLOW     (1 << 2)
#define GNI_CEMODE_FPE_UFLOW     (1 << 3)
#define GNI_CEMODE_FPE_PRECISION (1 << 4)

/* ---------------------------------------------------------------------------------------
 * §17 Dqueue
 * ------------------------------------------------------------------------------------- */
#define GNI_DQUEUE_DEFAULT_ENTRIES  1024
#define GNI_DQUEUE_DEFAULT_MSG_SIZE 192

typedef int (*gni_dqueue_cb_t)(void *context, void *data, uint32_t length, uint32_t pe,
                               uint32_t inst_id);

typedef struct gni_dqueue_in_attr {
    uint32_t entries;
    uint32_t msg_size;
    uint64_t flags;
    uint32_t npeers;
    gni_dqueue_cb_t cb;
    void *context;
} gni_dqueue_in_attr_t;

typedef struct gni_dqueue_out_attr {
    uint32_t pe;
    uint32_t id;
    gni_mem_handle_t mdh;
    uint32_t entries;
    uint32_t msg_size;
} gni_dqueue_out_attr_t;

/* ---------------------------------------------------------------------------------------
 * §18.2 Error events
 * ------------------------------------------------------------------------------------- */
typedef struct gni_error_event {
    uint16_t error_code;
    uint8_t error_category;
    uint8_t ptag;
    uint32_t serial_number;
    uint64_t timestamp;
    uint64_t info_mmrs[4];
} gni_error_event_t;

#define GNI_ERRMASK_CORRECTABLE_MEMORY   (1 << 0)
#define GNI_ERRMASK_CRITICAL             (1 << 1)
#define GNI_ERRMASK_TRANSACTION          (1 << 2)
#define GNI_ERRMASK_ADDRESS_TRANSLATION  (1 << 3)
#define GNI_ERRMASK_TRANSIENT            (1 << 4)
#define GNI_ERRMASK_INFORMATIONAL        (1 << 5)
#define GNI_ERRMASK_DIAG_ONLY            (1 << 6)
#define GNI_ERRMASK_UNKNOWN_TRANSACTION  (1 << 7)

/* =======================================================================================
 * Functions
 * ===================================================================================== */

/* §5.2 Communication domain */
gni_return_t GNI_CdmCreate(IN uint32_t inst_id, IN uint8_t ptag, IN uint32_t cookie,
                           IN uint32_t modes, OUT gni_cdm_handle_t *cdm_hndl);
gni_return_t GNI_CdmDestroy(IN gni_cdm_handle_t cdm_hndl);
gni_return_t GNI_CdmAttach(IN gni_cdm_handle_t cdm_hndl, IN uint32_t device_id,
                           OUT uint32_t *local_addr, OUT gni_nic_handle_t *nic_hndl);
gni_return_t GNI_CdmGetNicAddress(IN uint32_t device_id, OUT uint32_t *address,
                                  OUT uint32_t *cpu_id);
gni_return_t GNI_CdmHold(IN uint8_t ptag, IN uint32_t cookie, OUT int *nic_fd_ret);
gni_return_t GNI_CdmRelease(IN int nic_fd);
/* 0x5c only. */
gni_return_t GNI_CdmCheckpoint(IN gni_cdm_handle_t cdm_handle);
gni_return_t GNI_CdmResume(IN gni_cdm_handle_t cdm_handle);

/* §6.2 Device, job and version queries */
gni_return_t GNI_GetNumLocalDevices(OUT int *num_devices);
gni_return_t GNI_GetLocalDeviceIds(IN int len, OUT int *device_ids);
gni_return_t GNI_GetDeviceType(OUT gni_nic_device_t *dev_type);
gni_return_t GNI_GetVersion(OUT uint32_t *version);
gni_return_t GNI_GetVersionInformation(OUT gni_version_info_t *version_info);
gni_return_t GNI_GetDevResInfo(IN uint32_t device_id, IN gni_dev_res_t res_type,
                               OUT gni_dev_res_desc_t *res_desc);
gni_return_t GNI_GetJobResInfo(IN uint32_t device_id, IN uint8_t ptag,
                               IN gni_job_res_t res_type, OUT gni_job_res_desc_t *res_desc);
gni_return_t GNI_SetJobResInfo(IN uint32_t device_id, IN uint8_t ptag,
                               IN gni_job_res_t res_type, IN uint64_t res_value);
gni_return_t GNI_GetNttGran(IN uint32_t device_id, OUT uint32_t *ntt_gran);
gni_return_t GNI_GetPtag(IN uint32_t device_id, IN uint32_t cookie, OUT uint8_t *ptag);
gni_return_t GNI_GetNicStat(IN gni_nic_handle_t nic_hndl, IN gni_statistic_t stat,
                            OUT uint32_t *value);
gni_return_t GNI_ResetNicStat(IN gni_nic_handle_t nic_hndl, IN gni_statistic_t stat);
gni_return_t GNI_GetCapabilities(OUT gni_revision_info_t *revision_info);
gni_return_t GNI_ValidateCapabilities(IN gni_revision_info_t first_revision_info,
                                      IN gni_revision_info_t second_revision_info);

/* §7.2 Privileged job configuration, NTT, bandwidth and ORB control */
gni_return_t GNI_SuspendJob(IN uint32_t device_id, IN uint64_t job_id, IN uint8_t ptag,
                            IN uint32_t cookie, IN uint32_t timeout);
gni_return_t GNI_ResumeJob(IN uint32_t device_id, IN uint64_t job_id, IN uint8_t ptag,
                           IN uint32_t cookie);
gni_return_t GNI_ConfigureNTT(IN int device_id, IN gni_ntt_descriptor_t *ntt_desc,
                              OUT uint32_t *ntt_base);
gni_return_t GNI_ConfigureJob(IN uint32_t device_id, IN uint64_t job_id, IN uint8_t ptag,
                              IN uint32_t cookie, IN gni_job_limits_t *limits);
gni_return_t GNI_ConfigureNTTandJob(IN int device_id, IN uint64_t job_id, IN uint8_t ptag,
                                    IN uint32_t cookie, IN gni_job_limits_t *limits,
                                    IN gni_ntt_descriptor_t *ntt_desc,
                                    OUT uint32_t *ntt_base);
gni_return_t GNI_ConfigureJobFd(IN uint32_t device_id, IN uint64_t job_id, IN uint8_t ptag,
                                IN uint32_t cookie, IN gni_job_limits_t *limits,
                                OUT int *nic_fd);
gni_return_t GNI_SetDeviceOrbMMR(IN gni_nic_handle_t nic_hndl,
                                 IN gni_dev_orb_mmr_t orb_mmr_type,
                                 IN uint64_t new_orb_mmr_value,
                                 OUT uint64_t *old_orb_mmr_value);
gni_return_t GNI_SetBIConfig(IN uint32_t device_id, IN uint16_t bw, IN uint16_t aot_bw,
                             IN uint16_t modes);
gni_return_t GNI_GetBIConfig(IN uint32_t device_id, OUT gni_bi_desc_t *desc);
/* The timeout is passed by value although Cray's header marks it OUT (§19.7). */
gni_return_t GNI_BISyncWait(IN uint32_t device_id, OUT uint32_t timeout);
gni_return_t GNI_SetMddResources(IN gni_nic_handle_t nic_hndl, IN uint32_t num_entries);

/* §8 Endpoints */
gni_return_t GNI_EpCreate(IN gni_nic_handle_t nic_hndl, IN gni_cq_handle_t src_cq_hndl,
                          OUT gni_ep_handle_t *ep_hndl);
gni_return_t GNI_EpSetEventData(IN gni_ep_handle_t ep_hndl, IN uint32_t local_event,
                                IN uint32_t remote_event);
gni_return_t GNI_EpBind(IN gni_ep_handle_t ep_hndl, IN uint32_t remote_addr,
                        IN uint32_t remote_id);
gni_return_t GNI_EpUnbind(IN gni_ep_handle_t ep_hndl);
gni_return_t GNI_EpIdle(IN gni_ep_handle_t ep_hndl);
gni_return_t GNI_EpDestroy(IN gni_ep_handle_t ep_hndl);

/* §9 Datagrams */
gni_return_t GNI_EpPostData(IN gni_ep_handle_t ep_hndl, IN void *in_data,
                            IN uint16_t data_len, IN void *out_buf, IN uint16_t buf_size);
gni_return_t GNI_EpPostDataWId(IN gni_ep_handle_t ep_hndl, IN void *in_data,
                               IN uint16_t data_len, IN void *out_buf, IN uint16_t buf_size,
                               IN uint64_t datagram_id);
gni_return_t GNI_EpPostDataTest(IN gni_ep_handle_t ep_hndl, OUT gni_post_state_t *post_state,
                                OUT uint32_t *remote_addr, OUT uint32_t *remote_id);
gni_return_t GNI_EpPostDataTestById(IN gni_ep_handle_t ep_hndl, IN uint64_t datagram_id,
                                    OUT gni_post_state_t *post_state,
                                    OUT uint32_t *remote_addr, OUT uint32_t *remote_id);
gni_return_t GNI_EpPostDataWait(IN gni_ep_handle_t ep_hndl, IN uint32_t timeout,
                                OUT gni_post_state_t *post_state, OUT uint32_t *remote_addr,
                                OUT uint32_t *remote_id);
gni_return_t GNI_EpPostDataWaitById(IN gni_ep_handle_t ep_hndl, IN uint64_t datagram_id,
                                    IN uint32_t timeout, OUT gni_post_state_t *post_state,
                                    OUT uint32_t *remote_addr, OUT uint32_t *remote_id);
gni_return_t GNI_PostDataProbe(IN gni_nic_handle_t nic_hndl, OUT uint32_t *remote_addr,
                               OUT uint32_t *remote_id);
gni_return_t GNI_PostDataProbeById(IN gni_nic_handle_t nic_hndl, OUT uint64_t *datagram_id);
/* Lower-case "d" in "Postdata" is the real name (§19.6). */
gni_return_t GNI_PostdataProbeWaitById(IN gni_nic_handle_t nic_hndl, IN uint32_t timeout,
                                       OUT uint64_t *datagram_id);
gni_return_t GNI_EpPostDataCancel(IN gni_ep_handle_t ep_hndl);
gni_return_t GNI_EpPostDataCancelById(IN gni_ep_handle_t ep_hndl, IN uint64_t datagram_id);

/* §10.2 Memory registration */
gni_return_t GNI_MemRegister(IN gni_nic_handle_t nic_hndl, IN uint64_t address,
                             IN uint64_t length, IN gni_cq_handle_t dst_cq_hndl,
                             IN uint32_t flags, IN uint32_t vmdh_index,
                             INOUT gni_mem_handle_t *mem_hndl);
gni_return_t GNI_MemRegisterSegments(IN gni_nic_handle_t nic_hndl,
                                     IN gni_mem_segment_t *mem_segments,
                                     IN uint32_t segments_cnt, IN gni_cq_handle_t dst_cq_hndl,
                                     IN uint32_t flags, IN uint32_t vmdh_index,
                                     INOUT gni_mem_handle_t *mem_hndl);
gni_return_t GNI_MemDeregister(IN gni_nic_handle_t nic_hndl, IN gni_mem_handle_t *mem_hndl);
gni_return_t GNI_MemHndlQueryAttr(IN gni_mem_handle_t *mem_hndl,
                                  IN gni_mem_handle_attr_t attr, OUT int *yesno);
gni_return_t GNI_RebuildMemHndl(IN gni_mem_handle_t *src_mem_hndl, IN uint32_t vmdh_index,
                                OUT gni_mem_handle_t *dst_mem_hndl);
gni_return_t GNI_MemQueryHndls(IN gni_nic_handle_t nic_hndl, IN int fd,
                               INOUT gni_mem_handle_t *mem_hndl, OUT uint64_t *address,
                               OUT uint64_t *length);

/* §11.2 Completion queues */
gni_return_t GNI_CqCreate(IN gni_nic_handle_t nic_hndl, IN uint32_t entry_count,
                          IN uint32_t delay_count, IN gni_cq_mode_t mode,
                          IN void (*handler)(gni_cq_entry_t *, void *), IN void *context,
                          OUT gni_cq_handle_t *cq_hndl);
gni_return_t GNI_CqDestroy(IN gni_cq_handle_t cq_hndl);
gni_return_t GNI_CqGetEvent(IN gni_cq_handle_t cq_hndl, OUT gni_cq_entry_t *event_data);
gni_return_t GNI_CqWaitEvent(IN gni_cq_handle_t cq_hndl, IN uint64_t timeout,
                             OUT gni_cq_entry_t *event_data);
gni_return_t GNI_CqVectorWaitEvent(IN gni_cq_handle_t *cq_hndls, IN uint32_t num_cqs,
                                   IN uint64_t timeout, OUT gni_cq_entry_t *event_data,
                                   OUT uint32_t *which);
gni_return_t GNI_CqVectorMonitor(IN gni_cq_handle_t *cq_hndls, IN uint32_t num_cqs,
                                 IN uint64_t timeout, OUT uint32_t *which);
gni_return_t GNI_CqInterruptMask(IN gni_cq_handle_t cq_hndl);
gni_return_t GNI_CqInterruptUnmask(IN gni_cq_handle_t cq_hndl);
gni_return_t GNI_CqTestEvent(IN gni_cq_handle_t cq_hndl);
gni_return_t GNI_CqErrorStr(IN gni_cq_entry_t entry, OUT void *buffer, IN uint32_t len);
gni_return_t GNI_CqErrorRecoverable(IN gni_cq_entry_t entry, OUT uint32_t *recoverable);
gni_return_t GNI_GetCompleted(IN gni_cq_handle_t cq_hndl, IN gni_cq_entry_t event_data,
                              OUT gni_post_descriptor_t **post_descr);

/* §11.2 Completion channels */
gni_return_t GNI_CompChanCreate(IN gni_nic_handle_t nic_hndl,
                                OUT gni_comp_chan_handle_t *chan_hndl);
gni_return_t GNI_CompChanDestroy(IN gni_comp_chan_handle_t chan_hndl);
gni_return_t GNI_CompChanFd(IN gni_comp_chan_handle_t chan_hndl, OUT int *comp_chan_fd);
gni_return_t GNI_CompChanGetEvent(IN gni_comp_chan_handle_t chan_hndl,
                                  OUT gni_cq_handle_t *cq_hndl);
gni_return_t GNI_CqAttachCompChan(IN gni_cq_handle_t cq_hndl,
                                  IN gni_comp_chan_handle_t chan_hndl);
gni_return_t GNI_CqArmCompChan(IN gni_cq_handle_t *cq_hndls, IN uint32_t num_cqs);

/* §11.3 CQ entry accessors */
uint64_t gni_cq_get_data(gni_cq_entry_t entry);
uint64_t gni_cq_get_source(gni_cq_entry_t entry);
uint64_t gni_cq_get_status(gni_cq_entry_t entry);
uint64_t gni_cq_get_info(gni_cq_entry_t entry);
uint64_t gni_cq_overrun(gni_cq_entry_t entry);
uint64_t gni_cq_rem_overrun(gni_cq_entry_t entry);
uint64_t gni_cq_get_inst_id(gni_cq_entry_t entry);
uint64_t gni_cq_get_rem_inst_id(gni_cq_entry_t entry);
uint64_t gni_cq_get_tid(gni_cq_entry_t entry);
uint64_t gni_cq_get_msg_id(gni_cq_entry_t entry);
uint64_t gni_cq_get_type(gni_cq_entry_t entry);
uint64_t gni_cq_get_block_id(gni_cq_entry_t entry);
uint64_t gni_cq_get_unsuccessful_cnt(gni_cq_entry_t entry);
uint64_t gni_cq_get_marker_id(gni_cq_entry_t entry);
uint64_t gni_cq_get_failed_enqueue_cnt(gni_cq_entry_t entry);
uint64_t gni_cq_get_ce_id(gni_cq_entry_t entry);
uint64_t gni_cq_get_reductn_id(gni_cq_entry_t entry);
uint64_t gni_cq_get_trans_type(gni_cq_entry_t entry);
void gni_cq_set_inst_id(gni_cq_entry_t *entry, uint64_t value);
void gni_cq_set_rem_inst_id(gni_cq_entry_t *entry, uint64_t value);
void gni_cq_set_tid(gni_cq_entry_t *entry, uint64_t value);
void gni_cq_set_msg_id(gni_cq_entry_t *entry, uint64_t value);
void gni_cq_set_type(gni_cq_entry_t *entry, uint64_t value);
void gni_cq_clr_status(gni_cq_entry_t *entry);
unsigned gni_cq_status_dla_overflow(gni_cq_entry_t entry);
unsigned gni_cq_bte_enq_status(gni_cq_entry_t entry);

/* §12.4 Posts */
gni_return_t GNI_PostRdma(IN gni_ep_handle_t ep_hndl, IN gni_post_descriptor_t *post_descr);
gni_return_t GNI_PostFma(IN gni_ep_handle_t ep_hndl, IN gni_post_descriptor_t *post_descr);
gni_return_t GNI_PostCqWrite(IN gni_ep_handle_t ep_hndl,
                             IN gni_post_descriptor_t *post_descr);
gni_return_t GNI_CtPostFma(IN gni_ep_handle_t ep_hndl, IN gni_post_descriptor_t *post_descr);
gni_return_t GNI_CtPostCqWrite(IN gni_ep_handle_t ep_hndl,
                               IN gni_post_descriptor_t *post_descr);

/* §14.2 Short messaging */
gni_return_t GNI_SmsgBufferSizeNeeded(IN gni_smsg_attr_t *smsg_attr, OUT unsigned int *size);
gni_return_t GNI_SmsgInit(IN gni_ep_handle_t ep_hndl, IN gni_smsg_attr_t *local_smsg_attr,
                          IN gni_smsg_attr_t *remote_smsg_attr);
gni_return_t GNI_SmsgSetDeliveryMode(IN gni_nic_handle_t nic_handle, IN uint16_t dlvr_mode);
gni_return_t GNI_SmsgSetMaxRetrans(IN gni_nic_handle_t nic_handle, IN uint16_t max_retrans);
gni_return_t GNI_SmsgSend(IN gni_ep_handle_t ep_hndl, IN void *header,
                          IN uint32_t header_length, IN void *data, IN uint32_t data_length,
                          IN uint32_t msg_id);
gni_return_t GNI_SmsgSendWTag(IN gni_ep_handle_t ep_hndl, IN void *header,
                              IN uint32_t header_length, IN void *data,
                              IN uint32_t data_length, IN uint32_t msg_id, IN uint8_t tag);
gni_return_t GNI_SmsgGetNext(IN gni_ep_handle_t ep_hndl, OUT void **header);
gni_return_t GNI_SmsgGetNextWTag(IN gni_ep_handle_t ep_hndl, OUT void **header,
                                 INOUT uint8_t *tag);
gni_return_t GNI_SmsgRelease(IN gni_ep_handle_t ep_hndl);

/* §15 Message queue */
gni_return_t GNI_MsgqInit(IN gni_nic_handle_t nic_hndl, IN gni_msgq_rcv_cb_func *rcv_cb,
                          IN void *cb_data, IN gni_cq_handle_t snd_cq,
                          IN gni_msgq_attr_t *attrs, OUT gni_msgq_handle_t *msgq_hndl);
gni_return_t GNI_MsgqRelease(IN gni_msgq_handle_t msgq_hndl);
gni_return_t GNI_MsgqIdle(IN gni_msgq_handle_t msgq_hndl);
gni_return_t GNI_MsgqGetConnAttrs(IN gni_msgq_handle_t msgq_hndl, IN uint32_t pe_addr,
                                  OUT gni_msgq_ep_attr_t *attrs, OUT uint32_t *attrs_size);
gni_return_t GNI_MsgqConnect(IN gni_msgq_handle_t msgq_hndl, IN uint32_t pe_addr,
                             IN gni_msgq_ep_attr_t *attrs);
gni_return_t GNI_MsgqConnRelease(IN gni_msgq_handle_t msgq_hndl, IN uint32_t pe_addr);
gni_return_t GNI_MsgqSend(IN gni_msgq_handle_t msgq_hndl, IN gni_ep_handle_t ep_hndl,
                          IN void *hdr, IN uint32_t hdr_len, IN void *msg,
                          IN uint32_t msg_len, IN uint32_t msg_id, IN uint8_t msg_tag);
gni_return_t GNI_MsgqProgress(IN gni_msgq_handle_t msgq_hndl, IN uint32_t timeout);
gni_return_t GNI_MsgqSize(IN gni_msgq_attr_t *attrs, OUT uint32_t *size);

/* §16 Collective engine */
gni_return_t GNI_CeCreate(IN gni_nic_handle_t nic_hndl, OUT gni_ce_handle_t *ce_hndl);
gni_return_t GNI_CeGetId(IN gni_ce_handle_t ce_hndl, OUT uint32_t *ce_id);
gni_return_t GNI_EpSetCeAttr(IN gni_ep_handle_t ep_hndl, IN uint32_t ce_id,
                             IN uint32_t child_id, IN gni_ce_child_t child_type);
gni_return_t GNI_CeConfigure(IN gni_ce_handle_t ce_hndl, IN gni_ep_handle_t *child_eps,
                             IN uint32_t num_child_eps, IN gni_ep_handle_t parent_ep,
                             IN gni_cq_handle_t cq_hndl, IN uint32_t modes);
gni_return_t GNI_CeCheckResult(IN gni_ce_result_t *result, IN uint32_t length);
gni_return_t GNI_CeDestroy(IN gni_ce_handle_t ce_hndl);

uint64_t gni_ce_res_get_status(gni_ce_result_t *result);
uint64_t gni_ce_res_status_ok(gni_ce_result_t *result);
uint64_t gni_ce_res_get_fpe(gni_ce_result_t *result);
uint64_t gni_ce_res_get_red_id(gni_ce_result_t *result);

/* §17 Dqueue */
gni_return_t GNI_DqueueInit(IN gni_nic_handle_t nic_hndl, IN gni_dqueue_in_attr_t *in_attrs,
                            OUT gni_dqueue_out_attr_t *out_attrs,
                            OUT gni_dqueue_handle_t *dqueue);
gni_return_t GNI_DqueueFini(IN gni_dqueue_handle_t dqueue);
gni_return_t GNI_DqueueConnect(IN gni_dqueue_handle_t dqueue,
                               IN gni_dqueue_out_attr_t *attrs, IN uint32_t nattrs);
gni_return_t GNI_DqueuePut(IN gni_dqueue_handle_t dqueue, IN void *data, IN uint32_t length,
                           IN uint32_t pe_addr, IN uint32_t inst_id);
gni_return_t GNI_DqueueProgress(IN gni_dqueue_handle_t dqueue);

/* §18.2 Error events. mask_out and event are written although marked IN (§19.7). */
gni_return_t GNI_SubscribeErrors(IN gni_nic_handle_t nic_handle, IN uint32_t device_id,
                                 IN gni_error_mask_t mask, IN uint32_t EEQ_size,
                                 OUT gni_err_handle_t *err_handle);
gni_return_t GNI_ReleaseErrors(IN gni_err_handle_t err_handle);
gni_return_t GNI_GetErrorMask(IN gni_err_handle_t err_handle, OUT gni_error_mask_t *mask);
gni_return_t GNI_SetErrorMask(IN gni_err_handle_t err_handle, IN gni_error_mask_t mask_in,
                              IN gni_error_mask_t *mask_out);
gni_return_t GNI_GetErrorEvent(IN gni_err_handle_t err_handle, IN gni_error_event_t *event);
gni_return_t GNI_WaitErrorEvents(IN gni_err_handle_t err_handle,
                                 IN gni_error_event_t *events, IN uint32_t events_size,
                                 IN uint32_t timeout, OUT uint32_t *num_events);
gni_return_t GNI_SetErrorPtag(IN gni_err_handle_t err_handle, IN uint8_t ptag);

/* §6.1, §7.1 Resource enum helpers */
uint32_t gni_dev_res_valid(gni_dev_res_t res);
const char *gni_dev_res_to_str(gni_dev_res_t res);
uint32_t gni_job_res_valid(gni_job_res_t res);
const char *gni_job_res_to_str(gni_job_res_t res);
uint32_t gni_dev_orb_mmr_valid(gni_dev_orb_mmr_t mmr);
const char *gni_dev_orb_mmr_to_str(gni_dev_orb_mmr_t mmr);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* _GNI_PUB_H_ */
