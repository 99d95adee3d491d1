/* dmapp.h: the DMAPP one-sided API (shared/spec/dmapp-api.md), implemented by nicemu's
 * libdmapp on top of libugni. Names, types and values follow the fact sheet; where it marks
 * a layout or value unconfirmed, the choice made here is noted next to it. */
#ifndef _DMAPP_H
#define _DMAPP_H

#include <stddef.h>
#include <stdint.h>

#include "gni_pub.h"
#include "dmapp_rev.h"

#ifndef INOUT
#define INOUT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* §1 constants */
#define DMAPP_OFFLOAD_THRESHOLD 4096
#define DMAPP_MAX_OUTSTANDING_NB 2048
#define DMAPP_DEF_OUTSTANDING_NB 512
#define DMAPP_MIN_OUTSTANDING_NB 5

#define DMAPP_C_PSET_MODE_CONCAT 0x00000001
#define DMAPP_C_PSET_MODE_FAULT_TOLERANT 0x00000002
#define DMAPP_C_PSET_MODE_HW_OFFLOAD 0x00000004

/* Values unconfirmed (§14): nicemu's choices. */
#define DMAPP_QUEUE_DEFAULT_DEPTH 1024
#define DMAPP_QUEUE_DEFAULT_NELEMS 32
#define DMAPP_QUEUE_MAX_NELEMS 1024
#define DMAPP_QUEUE_ASYNC_PROGRESS 0x1
#define DMAPP_MAX_LOCKS 1023

/* §2.1 enums */
typedef enum dmapp_return {
  DMAPP_RC_SUCCESS = 0,
  DMAPP_RC_INVALID_PARAM = 1,
  DMAPP_RC_ALIGNMENT_ERROR = 2,
  DMAPP_RC_TRANSACTION_ERROR = 3,
  DMAPP_RC_RESOURCE_ERROR = 4,
  DMAPP_RC_PERMISSION_ERROR = 5,
  DMAPP_RC_NO_SPACE = 6,
  DMAPP_RC_NOT_DONE = 7,
  DMAPP_RC_NOT_SUPPORTED = 8,
  DMAPP_RC_NOT_FOUND = 9,
  DMAPP_RC_BUSY = 10,
  DMAPP_RC_NOT_USED = 11
} dmapp_return_t;

typedef enum dmapp_type {
  DMAPP_DQW = 0,
  DMAPP_QW = 1,
  DMAPP_DW = 2,
  DMAPP_BYTE = 3
} dmapp_type_t;

typedef enum dmapp_routing_type {
  DMAPP_ROUTING_IN_ORDER = 0,
  DMAPP_ROUTING_DETERMINISTIC = 1,
  DMAPP_ROUTING_ADAPTIVE = 2
} dmapp_routing_type_t;

typedef enum dmapp_pi_reg_type {
  DMAPP_PI_ORDERING_STRICT = 0,
  DMAPP_PI_ORDERING_DEFAULT = 1,
  DMAPP_PI_ORDERING_RELAXED = 2
} dmapp_pi_reg_type_t;

typedef enum dmapp_c_pset_delimiter_type {
  DMAPP_C_PSET_DELIMITER_VEC = 1,
  DMAPP_C_PSET_DELIMITER_STRIDED = 2,
  DMAPP_C_PSET_DELIMITER_LAST = 3
} dmapp_c_pset_delimiter_type_t;

typedef enum dmapp_c_pset_attrs_type {
  DMAPP_C_PSET_ATTRS_VER1 = 1,
  DMAPP_C_PSET_ATTRS_LAST = 2
} dmapp_c_pset_attrs_type_t;

typedef enum dmapp_c_type {
  DMAPP_C_INT32 = 101,
  DMAPP_C_UINT32 = 102,
  DMAPP_C_INT64 = 103,
  DMAPP_C_UINT64 = 104,
  DMAPP_C_FLOAT = 105,
  DMAPP_C_DOUBLE = 106,
  DMAPP_C_COMPLEX8 = 107,
  DMAPP_C_COMPLEX16 = 108,
  DMAPP_C_FLOAT_UINT64 = 109,
  DMAPP_C_DOUBLE_UINT64 = 110,
  DMAPP_C_INT32_UINT64 = 111,
  DMAPP_C_INT64_UINT64 = 112,
  DMAPP_C_TYPE_LAST = 113
} dmapp_c_type_t;

typedef enum dmapp_c_op {
  DMAPP_C_SUM = 201,
  DMAPP_C_MAX = 202,
  DMAPP_C_MIN = 203,
  DMAPP_C_PROD = 204,
  DMAPP_C_LAND = 205,
  DMAPP_C_BAND = 206,
  DMAPP_C_LOR = 207,
  DMAPP_C_BOR = 208,
  DMAPP_C_LXOR = 209,
  DMAPP_C_BXOR = 210,
  DMAPP_C_MINLOC = 211,
  DMAPP_C_MAXLOC = 212,
  DMAPP_C_OP_LAST = 213
} dmapp_c_op_t;

/* §2.2 scalar and handle types */
typedef int dmapp_pe_t;
typedef struct dmapp_syncid *dmapp_syncid_handle_t;
typedef struct dmapp_c_pset *dmapp_c_pset_handle_t;
typedef struct dmapp_lock *dmapp_lock_handle_t;
typedef struct dmapp_queue *dmapp_queue_handle_t;

/* Layout unconfirmed (§2.2): one 64-bit word in symmetric memory, zeroed before first use
 * (a ticket lock: next ticket in the high half, ticket served in the low half). */
typedef struct dmapp_lock_desc {
  uint64_t opaque;
} dmapp_lock_desc_t;

/* Layout unconfirmed (§6): the AMO-struct calls return DMAPP_RC_NOT_SUPPORTED. */
typedef struct dmapp_amo {
  uint64_t opaque[4];
} dmapp_amo_t;

/* Layout unconfirmed (§8): nicemu's fields, in bytes and counts. */
typedef struct dmapp_sheap_stats {
  uint64_t total_bytes;
  uint64_t used_bytes;
  uint64_t free_bytes;
  uint64_t largest_free_bytes;
  uint64_t allocations;
} dmapp_sheap_stats_t;

/* §2.3 structs */
typedef struct dmapp_seg_desc {
  void *addr;
  size_t len;
  gni_mem_handle_t memhndl;
  uint16_t flags;
  void *reserved;
} dmapp_seg_desc_t;

typedef struct dmapp_jobinfo {
  int version;
  int hw_version;
  int npes;
  dmapp_pe_t pe;
  dmapp_seg_desc_t data_seg;
  dmapp_seg_desc_t sheap_seg;
} dmapp_jobinfo_t;

typedef struct dmapp_rma_attrs {
  uint32_t max_outstanding_nb;
  uint32_t offload_threshold;
  uint8_t put_relaxed_ordering;
  uint8_t get_relaxed_ordering;
  uint8_t max_concurrency;
} dmapp_rma_attrs_t;

/* RB-3.1 layout plus the later queue fields placed after PI_ordering (§2.3). */
typedef struct dmapp_rma_attrs_ext {
  uint32_t max_outstanding_nb;
  uint32_t offload_threshold;
  uint8_t put_relaxed_ordering;
  uint8_t get_relaxed_ordering;
  uint8_t max_concurrency;
  uint8_t PI_ordering;
  uint32_t queue_depth;
  uint32_t queue_nelems;
  uint8_t unused[24];
} dmapp_rma_attrs_ext_t;

typedef struct {
  uint32_t n_pes;
  uint32_t *vec_pes;
} dmapp_c_pset_delimiter_vec_t;

typedef struct {
  uint32_t n_pes;
  uint32_t base_pe;
  uint32_t stride_pe;
} dmapp_c_pset_delimiter_strided_t;

typedef struct {
  void *concat_buf;
  uint64_t concat_buf_size;
  dmapp_c_pset_delimiter_type_t type;
  union {
    dmapp_c_pset_delimiter_vec_t vec_type;
    dmapp_c_pset_delimiter_strided_t stride_type;
  } u;
} dmapp_c_pset_desc_t;

typedef struct {
  uint32_t radix;
} dmapp_c_pset_attrs_ver1_t;

typedef struct {
  dmapp_c_pset_attrs_type_t type;
  union {
    dmapp_c_pset_attrs_ver1_t type1;
  } u;
} dmapp_c_pset_attrs_t;

typedef struct dmapp_c_float_uint64 {
  float value;
  uint64_t loc;
} dmapp_c_float_uint64_t;

typedef struct dmapp_c_double_uint64 {
  double value;
  uint64_t loc;
} dmapp_c_double_uint64_t;

typedef struct dmapp_c_int_uint64 {
  int value;
  uint64_t loc;
} dmapp_c_int_uint64_t;

typedef struct dmapp_c_int64_uint64 {
  int64_t value;
  uint64_t loc;
} dmapp_c_int64_uint64_t;

typedef struct dmapp_c_complex8 {
  float re;
  float im;
} dmapp_c_complex8_t;

typedef struct dmapp_c_complex16 {
  double re;
  double im;
} dmapp_c_complex16_t;

/* Error strings indexed by dmapp_return_t (existence in Cray's library unconfirmed). */
extern const char *dmapp_err_str[];

/* §4 initialisation and query */
dmapp_return_t dmapp_init(IN dmapp_rma_attrs_t *requested_attrs, OUT dmapp_rma_attrs_t *actual_attrs);
dmapp_return_t dmapp_init_ext(IN dmapp_rma_attrs_ext_t *requested_attrs, OUT dmapp_rma_attrs_ext_t *actual_attrs);
dmapp_return_t dmapp_finalize(void);
dmapp_return_t dmapp_initialized(OUT int *flag);
dmapp_return_t dmapp_get_jobinfo(OUT dmapp_jobinfo_t *info);
dmapp_return_t dmapp_get_rma_attrs(OUT dmapp_rma_attrs_t *attrs);
dmapp_return_t dmapp_get_rma_attrs_ext(OUT dmapp_rma_attrs_ext_t *attrs);
dmapp_return_t dmapp_set_rma_attrs(IN dmapp_rma_attrs_t *requested_attrs, OUT dmapp_rma_attrs_t *actual_attrs);
dmapp_return_t dmapp_set_rma_attrs_ext(IN dmapp_rma_attrs_ext_t *requested_attrs,
                                       OUT dmapp_rma_attrs_ext_t *actual_attrs);
dmapp_return_t dmapp_explain_error(IN dmapp_return_t rc, OUT const char **msg);

/* §5 contiguous transfers */
dmapp_return_t dmapp_put(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                         IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_put_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                            IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type,
                            OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_put_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                             IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_get(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                         IN dmapp_pe_t source_pe, IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_get_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                            IN dmapp_pe_t source_pe, IN uint64_t nelems, IN dmapp_type_t type,
                            OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_get_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                             IN dmapp_pe_t source_pe, IN uint64_t nelems, IN dmapp_type_t type);

/* §5 strided transfers (strides in elements) */
dmapp_return_t dmapp_iput(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                          IN void *source_addr, IN ptrdiff_t tst, IN ptrdiff_t sst, IN uint64_t nelems,
                          IN dmapp_type_t type);
dmapp_return_t dmapp_iput_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                             IN void *source_addr, IN ptrdiff_t tst, IN ptrdiff_t sst, IN uint64_t nelems,
                             IN dmapp_type_t type, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_iput_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                              IN void *source_addr, IN ptrdiff_t tst, IN ptrdiff_t sst, IN uint64_t nelems,
                              IN dmapp_type_t type);
dmapp_return_t dmapp_iget(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                          IN dmapp_pe_t source_pe, IN ptrdiff_t tst, IN ptrdiff_t sst, IN uint64_t nelems,
                          IN dmapp_type_t type);
dmapp_return_t dmapp_iget_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                             IN dmapp_pe_t source_pe, IN ptrdiff_t tst, IN ptrdiff_t sst, IN uint64_t nelems,
                             IN dmapp_type_t type, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_iget_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                              IN dmapp_pe_t source_pe, IN ptrdiff_t tst, IN ptrdiff_t sst, IN uint64_t nelems,
                              IN dmapp_type_t type);

/* §5 indexed transfers (offsets in elements) */
dmapp_return_t dmapp_ixput(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                           IN void *source_addr, IN ptrdiff_t *tidx, IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_ixput_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                              IN void *source_addr, IN ptrdiff_t *tidx, IN uint64_t nelems, IN dmapp_type_t type,
                              OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_ixput_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                               IN void *source_addr, IN ptrdiff_t *tidx, IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_ixget(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                           IN dmapp_pe_t source_pe, IN ptrdiff_t *sidx, IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_ixget_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                              IN dmapp_pe_t source_pe, IN ptrdiff_t *sidx, IN uint64_t nelems, IN dmapp_type_t type,
                              OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_ixget_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                               IN dmapp_pe_t source_pe, IN ptrdiff_t *sidx, IN uint64_t nelems, IN dmapp_type_t type);

/* §5 multi-PE transfers */
dmapp_return_t dmapp_put_ixpe(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t *target_pe_list,
                              IN uint32_t num_target_pes, IN void *source_addr, IN uint64_t nelems,
                              IN dmapp_type_t type);
dmapp_return_t dmapp_put_ixpe_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg,
                                 IN dmapp_pe_t *target_pe_list, IN uint32_t num_target_pes, IN void *source_addr,
                                 IN uint64_t nelems, IN dmapp_type_t type, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_put_ixpe_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg,
                                  IN dmapp_pe_t *target_pe_list, IN uint32_t num_target_pes, IN void *source_addr,
                                  IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_scatter_ixpe(IN void *target_addr, IN dmapp_seg_desc_t *target_seg,
                                  IN dmapp_pe_t *target_pe_list, IN uint32_t num_target_pes, IN void *source_addr,
                                  IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_scatter_ixpe_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg,
                                     IN dmapp_pe_t *target_pe_list, IN uint32_t num_target_pes,
                                     IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type,
                                     OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_scatter_ixpe_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg,
                                      IN dmapp_pe_t *target_pe_list, IN uint32_t num_target_pes,
                                      IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type);
dmapp_return_t dmapp_gather_ixpe(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                 IN dmapp_pe_t *source_pe_list, IN uint32_t num_source_pes, IN uint64_t nelems,
                                 IN dmapp_type_t type);
dmapp_return_t dmapp_gather_ixpe_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                    IN dmapp_pe_t *source_pe_list, IN uint32_t num_source_pes, IN uint64_t nelems,
                                    IN dmapp_type_t type, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_gather_ixpe_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                     IN dmapp_pe_t *source_pe_list, IN uint32_t num_source_pes, IN uint64_t nelems,
                                     IN dmapp_type_t type);

/* §5 put with flag, get with flag */
dmapp_return_t dmapp_put_flag(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                              IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type, IN void *target_flag,
                              IN uint64_t flag_value);
dmapp_return_t dmapp_put_flag_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                 IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type,
                                 IN void *target_flag, IN uint64_t flag_value, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_put_flag_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                  IN void *source_addr, IN uint64_t nelems, IN dmapp_type_t type,
                                  IN void *target_flag, IN uint64_t flag_value);
dmapp_return_t dmapp_get_flag_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                  IN dmapp_pe_t source_pe, IN uint64_t nelems, IN dmapp_type_t type);

/* §6 scalar atomics (64-bit) */
dmapp_return_t dmapp_aadd_qw(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                             IN int64_t operand);
dmapp_return_t dmapp_aadd_qw_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_aadd_qw_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                 IN int64_t operand);
dmapp_return_t dmapp_aand_qw(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                             IN int64_t operand);
dmapp_return_t dmapp_aand_qw_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_aand_qw_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                 IN int64_t operand);
dmapp_return_t dmapp_aor_qw(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                             IN int64_t operand);
dmapp_return_t dmapp_aor_qw_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_aor_qw_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                 IN int64_t operand);
dmapp_return_t dmapp_axor_qw(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                             IN int64_t operand);
dmapp_return_t dmapp_axor_qw_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_axor_qw_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                 IN int64_t operand);
dmapp_return_t dmapp_afadd_qw(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                              IN dmapp_pe_t source_pe, IN int64_t operand);
dmapp_return_t dmapp_afadd_qw_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                 IN dmapp_pe_t source_pe, IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_afadd_qw_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                  IN dmapp_pe_t source_pe, IN int64_t operand);
dmapp_return_t dmapp_afand_qw(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                              IN dmapp_pe_t source_pe, IN int64_t operand);
dmapp_return_t dmapp_afand_qw_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                 IN dmapp_pe_t source_pe, IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_afand_qw_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                  IN dmapp_pe_t source_pe, IN int64_t operand);
dmapp_return_t dmapp_afor_qw(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                              IN dmapp_pe_t source_pe, IN int64_t operand);
dmapp_return_t dmapp_afor_qw_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                 IN dmapp_pe_t source_pe, IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_afor_qw_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                  IN dmapp_pe_t source_pe, IN int64_t operand);
dmapp_return_t dmapp_afxor_qw(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                              IN dmapp_pe_t source_pe, IN int64_t operand);
dmapp_return_t dmapp_afxor_qw_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                 IN dmapp_pe_t source_pe, IN int64_t operand, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_afxor_qw_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                  IN dmapp_pe_t source_pe, IN int64_t operand);

dmapp_return_t dmapp_afax_qw(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                             IN dmapp_pe_t source_pe, IN int64_t andMask, IN int64_t xorMask);
dmapp_return_t dmapp_afax_qw_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                IN dmapp_pe_t source_pe, IN int64_t andMask, IN int64_t xorMask,
                                OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_afax_qw_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                 IN dmapp_pe_t source_pe, IN int64_t andMask, IN int64_t xorMask);
dmapp_return_t dmapp_acswap_qw(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                               IN dmapp_pe_t source_pe, IN int64_t comperand, IN int64_t swaperand);
dmapp_return_t dmapp_acswap_qw_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                  IN dmapp_pe_t source_pe, IN int64_t comperand, IN int64_t swaperand,
                                  OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_acswap_qw_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                   IN dmapp_pe_t source_pe, IN int64_t comperand, IN int64_t swaperand);

/* §6 AMO-struct API (not supported by nicemu: DMAPP_RC_NOT_SUPPORTED) */
dmapp_return_t dmapp_amo_put(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                             IN dmapp_amo_t *amo);
dmapp_return_t dmapp_amo_put_nb(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                IN dmapp_amo_t *amo, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_amo_put_nbi(IN void *target_addr, IN dmapp_seg_desc_t *target_seg, IN dmapp_pe_t target_pe,
                                 IN dmapp_amo_t *amo);
dmapp_return_t dmapp_amo_get(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                             IN dmapp_pe_t source_pe, IN dmapp_amo_t *amo);
dmapp_return_t dmapp_amo_get_nb(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                IN dmapp_pe_t source_pe, IN dmapp_amo_t *amo, OUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_amo_get_nbi(IN void *target_addr, IN void *source_addr, IN dmapp_seg_desc_t *source_seg,
                                 IN dmapp_pe_t source_pe, IN dmapp_amo_t *amo);
dmapp_return_t dmapp_amo_flush(IN dmapp_pe_t target_pe, IN uint64_t flags);

/* §7 synchronisation */
dmapp_return_t dmapp_syncid_test(INOUT dmapp_syncid_handle_t *syncid, OUT int *flag);
dmapp_return_t dmapp_syncid_wait(INOUT dmapp_syncid_handle_t *syncid);
dmapp_return_t dmapp_gsync_test(OUT int *flag);
dmapp_return_t dmapp_gsync_wait(void);

/* §8 symmetric heap and memory registration */
void *dmapp_sheap_malloc(IN size_t size);
void *dmapp_sheap_realloc(IN void *ptr, IN size_t size);
void dmapp_sheap_free(IN void *ptr);
dmapp_return_t dmapp_sheap_stats(OUT dmapp_sheap_stats_t *stats);
dmapp_return_t dmapp_mem_register(IN void *addr, IN uint64_t length, INOUT dmapp_seg_desc_t *seg_desc);
dmapp_return_t dmapp_mem_unregister(INOUT dmapp_seg_desc_t *seg_desc);
dmapp_return_t dmapp_mem_reserve(IN void *addr, IN uint64_t length, IN uint64_t flags,
                                 INOUT dmapp_seg_desc_t *seg_desc);
dmapp_return_t dmapp_mem_update(IN void *addr, IN uint64_t length, IN uint64_t flags,
                                INOUT dmapp_seg_desc_t *seg_desc);
dmapp_return_t dmapp_segdesc_compare(IN dmapp_seg_desc_t *seg_desc1, IN dmapp_seg_desc_t *seg_desc2, OUT int *flag);

/* §9 locks */
dmapp_return_t dmapp_lock_acquire(IN dmapp_lock_desc_t *lock_addr, IN dmapp_seg_desc_t *lock_seg,
                                  IN dmapp_pe_t lock_host, IN uint64_t flags, OUT dmapp_lock_handle_t *handle);
dmapp_return_t dmapp_lock_try(IN dmapp_lock_desc_t *lock_addr, IN dmapp_seg_desc_t *lock_seg,
                              IN dmapp_pe_t lock_host, IN uint64_t flags, OUT dmapp_lock_handle_t *handle);
dmapp_return_t dmapp_lock_release(IN dmapp_lock_handle_t handle, IN uint64_t flags);
dmapp_return_t dmapp_lock_release_addr(IN dmapp_lock_desc_t *lock_addr, IN dmapp_pe_t lock_host, IN uint64_t flags);

/* §10 queues (not supported by nicemu: DMAPP_RC_NOT_SUPPORTED) */
dmapp_return_t dmapp_queue_attach(IN int (*queue_cb)(void *context, void *data, uint32_t len, dmapp_pe_t rank),
                                  IN void *context, IN uint64_t flags, OUT dmapp_queue_handle_t *queue_hndl);
dmapp_return_t dmapp_queue_detach(IN dmapp_queue_handle_t queue_hndl, IN uint64_t flags);
dmapp_return_t dmapp_queue_put(IN dmapp_queue_handle_t queue_hndl, IN void *source, IN uint64_t nelems,
                               IN dmapp_type_t type, IN dmapp_pe_t target_pe, IN uint64_t flags);

/* §11 progress, checkpoint, collectives */
dmapp_return_t dmapp_progress(void);
dmapp_return_t dmapp_register_progress_cb(IN int (*progress_cb)(void *), IN void *data);
dmapp_return_t dmapp_deregister_progress_cb(IN int (*progress_cb)(void *));
dmapp_return_t dmapp_checkpoint(void);
dmapp_return_t dmapp_restart(IN uint32_t restart_modes);
dmapp_return_t dmapp_c_pset_create(IN dmapp_c_pset_desc_t *pdesc, IN uint64_t identifier, IN uint64_t modes,
                                   IN dmapp_c_pset_attrs_t *attrs, OUT dmapp_c_pset_handle_t *pset_hndl);
dmapp_return_t dmapp_c_pset_export(IN dmapp_c_pset_handle_t pset_hndl);
dmapp_return_t dmapp_c_pset_destroy(IN dmapp_c_pset_handle_t pset_hndl);
dmapp_return_t dmapp_c_barrier_join(IN dmapp_c_pset_handle_t pset_hndl);
dmapp_return_t dmapp_c_greduce_start(IN dmapp_c_pset_handle_t pset_hndl, IN void *in, OUT void *out,
                                     IN uint32_t nelems, IN dmapp_c_type_t type, IN dmapp_c_op_t op);
dmapp_return_t dmapp_c_greduce_nelems_max(IN dmapp_c_type_t type, OUT uint32_t *nelems_max);
dmapp_return_t dmapp_c_pset_test(IN dmapp_c_pset_handle_t pset_hndl);
dmapp_return_t dmapp_c_pset_wait(IN dmapp_c_pset_handle_t pset_hndl);
dmapp_return_t dmapp_c_pset_cancel_op(IN dmapp_c_pset_handle_t pset_hndl);

#ifdef __cplusplus
}
#endif

#endif /* _DMAPP_H */
