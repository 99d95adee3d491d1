/*
 * libalpslli: the low-level request/response interface between an application and ALPS
 * (nicemu's ALPS compatibility library).
 *
 * On a Cray the requests travel through pipes to the node's ALPS shepherd. Here the library
 * answers them itself, in the calling process, from what nicemu's launchers put in the
 * environment (docs/launchers.md, "ALPS"). The protocol is the same: lock, put a request,
 * get the response header (status and byte count), get the response bytes, unlock.
 *
 * Unless stated otherwise the functions return 0 on success and -1 with errno set on
 * failure.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NICEMU_ALPS_LIBALPSLLI_H
#define NICEMU_ALPS_LIBALPSLLI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Header of a request on the application-to-ALPS pipe, and of a response. */
typedef struct {
  int request; /* ALPS_APP_LLI_ALPS_REQ_* */
  pid_t pid;   /* sender */
  size_t len;  /* bytes of request data that follow */
} alpsLliReq_t;

typedef struct {
  int status;  /* ALPS_APP_LLI_ALPS_STAT_* */
  size_t len;  /* bytes of response data that follow */
} alpsLliRep_t;

/* Request codes. */
#define ALPS_APP_LLI_ALPS_REQ_SIGNAL 1   /* signal PEs: int32 signal, int32 PE (-1 = all) */
#define ALPS_APP_LLI_ALPS_REQ_EXITING 2  /* the application is exiting normally */
#define ALPS_APP_LLI_ALPS_REQ_APID 3     /* response: the uint64_t apid */
#define ALPS_APP_LLI_ALPS_REQ_CPUMASK 4  /* response: cpu_set_t of the node's PEs */
#define ALPS_APP_LLI_ALPS_REQ_START 5    /* wait for the start barrier */
#define ALPS_APP_LLI_ALPS_REQ_REBIND 6   /* reset CPU binding */
#define ALPS_APP_LLI_ALPS_REQ_GNI 7      /* response: alpsAppLLIGni_t, one entry per device */

/* One GNI device's credential in the response to ALPS_APP_LLI_ALPS_REQ_GNI. */
typedef struct {
  uint32_t device_id; /* device index */
  int32_t local_addr; /* NIC address of this node on that device */
  uint32_t cookie;    /* the job's cookie */
  uint32_t ptag;      /* the job's ptag */
} alpsAppGni_t;

/* The response to ALPS_APP_LLI_ALPS_REQ_GNI: `count` alpsAppGni_t entries from u.buf. */
typedef struct {
  int count;
  union {
    int64_t align;
    char buf[1];
  } u;
} alpsAppLLIGni_t;

/* Status codes of a response. */
#define ALPS_APP_LLI_ALPS_STAT_OK 0
#define ALPS_APP_LLI_ALPS_STAT_REQ 1     /* unknown request */
#define ALPS_APP_LLI_ALPS_STAT_FORM 2    /* malformed request */
#define ALPS_APP_LLI_ALPS_STAT_READ 3    /* response read error */
#define ALPS_APP_LLI_ALPS_STAT_UNAVAIL 4 /* data unavailable */
#define ALPS_APP_LLI_ALPS_STAT_FAIL 5    /* request failed */

/*
 * ALPS side of the interface (the shepherd's). There is no shepherd under nicemu: these
 * return -1 with errno ENOSYS.
 */
extern int alps_app_lli_init(void);
extern int alps_app_lli_pipes(int app_alps_filedes[2], int alps_app_filedes[2]);
extern int alps_app_lli_get_request(alpsLliReq_t *req);
extern int alps_app_lli_get_request_bytes(void *buf, size_t count);
extern int alps_app_lli_put_response(const void *buf, size_t count, int status);

/* Application side. */

/* Sends a request whose response is discarded; takes the lock itself. Returns 0 when the
   response status is ALPS_APP_LLI_ALPS_STAT_OK, else -1. */
extern int alps_app_lli_put_simple_request(int32_t req_code, const void *buf, size_t count);

/* Serialises the requests of the process's threads (ALPS: of the node's PEs). */
extern int alps_app_lli_lock(void);
extern int alps_app_lli_unlock(void);

/* Sends a request (buf may be NULL when count is 0); more request data may follow with
   alps_app_lli_put_request_bytes. */
extern int alps_app_lli_put_request(int32_t req_code, const void *buf, size_t count);
extern int alps_app_lli_put_request_bytes(const void *buf, size_t count);

/* Reads the response header of the last request: its status and the bytes that follow. */
extern int alps_app_lli_get_response(int *status, size_t *count);

/* Reads exactly `count` more bytes of the response (-1, EINVAL if fewer remain). */
extern int alps_app_lli_get_response_bytes(void *buf, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* NICEMU_ALPS_LIBALPSLLI_H */
