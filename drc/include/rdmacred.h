/* Cray Dynamic RDMA Credentials (DRC) over nicemu: a job credential (ptag/cookie) that its
 * owner grants to other users, groups or jobs, so that separate jobs (a data service and
 * its clients) share one protection domain. The daemons enforce the grants at attach.
 * Functions return DRC_SUCCESS or a negated DRC error code. SPDX-License-Identifier: BSD-3-Clause */
#ifndef NICEMU_RDMACRED_H
#define NICEMU_RDMACRED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (returned negated). */
enum {
  DRC_SUCCESS = 0,
  DRC_EINVAL,                /* invalid argument */
  DRC_EPERM,                 /* not the owner, or not granted */
  DRC_ENOSPC,                /* no credential left */
  DRC_ECONNREFUSED,          /* no nicemu daemon answered */
  DRC_ALREADY_GRANTED,       /* that grant exists */
  DRC_CRED_NOT_FOUND,        /* no such credential */
  DRC_CRED_CREATE_FAILURE,   /* a daemon refused the new credential */
  DRC_CRED_EXTERNAL_FAILURE, /* a daemon failed otherwise */
  DRC_BAD_TOKEN              /* (tokens are not provided) */
};

/* drc_acquire flags */
#define DRC_FLAGS_FLEX_CREDENTIAL 0x1
/* drc_grant / drc_revoke: what `value` names */
#define DRC_FLAGS_TARGET_UID 0x10
#define DRC_FLAGS_TARGET_GID 0x20
#define DRC_FLAGS_TARGET_WLM 0x40

typedef struct drc_info *drc_info_handle_t;

int drc_acquire(uint32_t *credential, int flags);
int drc_grant(uint32_t credential, uint32_t value, int flags);
int drc_revoke(uint32_t credential, uint32_t value, int flags);
int drc_access(uint32_t credential, int flags, drc_info_handle_t *info);
uint32_t drc_get_first_cookie(drc_info_handle_t info);
uint32_t drc_get_second_cookie(drc_info_handle_t info);
/* Frees the handle and sets *info to NULL (a later free(*info) is harmless). */
int drc_release_local(drc_info_handle_t *info);
int drc_release(uint32_t credential, int flags);
/* The workload manager's id of the calling job (Slurm job id, or nicemu-run's job id). */
uint32_t drc_get_wlm_id(void);

/* Public callers define their own static drc_strerror(), so the library's is declared
 * only on request. It takes a DRC code, positive or negated. */
#ifdef NICEMU_DRC_STRERROR
const char *drc_strerror(int errnum);
#endif

#ifdef __cplusplus
}
#endif

#endif
