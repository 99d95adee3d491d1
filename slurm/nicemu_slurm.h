/* The SPANK plugin's way to its node's nicemu daemons (C interface over the C++ control
 * client, nicemu/ctl/ctl_client.h): deriving a job's credential from its job id, and
 * issuing and revoking it. Every function returns 0 on success, -1 with a message in
 * err[0 .. errlen) otherwise. */
#ifndef NICEMU_SLURM_H
#define NICEMU_SLURM_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nicemu_job_cred {
  uint32_t ptag;    /* 3 .. 253, the range the daemons choose from themselves */
  uint32_t cookie;  /* pkey (bits 31..16) 128 .. 65406, as the daemons choose */
};

/* The credential of Slurm job `job_id`: a keyed BLAKE2b hash of the job id under the
 * key in `key_path` (a `nicemuctl keygen` file, mode 0600), so every node of the job
 * computes the same one without talking to the others, and no user can predict another
 * job's. */
int nicemu_slurm_derive(const char* key_path, uint32_t job_id, struct nicemu_job_cred* out, char* err,
                        size_t errlen);

/* Gives `cred` to `uid` on every daemon in `rundir` (NULL: the default run dir), each
 * within `timeout_ms`. Issuing a credential the uid already holds succeeds (the job's
 * later steps). *nic_addr receives the lowest NIC address among them. Fails when the run
 * dir has no daemon, or one does not answer or refuses; then the daemons this call gave the
 * credential to have it revoked again (all or nothing). */
int nicemu_slurm_issue(const char* rundir, uint32_t uid, const struct nicemu_job_cred* cred, int timeout_ms,
                       uint32_t* nic_addr, char* err, size_t errlen);

/* Revokes `cred` on every daemon in `rundir` that holds it (as root: whoever it belongs
 * to). *revoked receives how many held it. Fails only when a daemon does not answer. */
int nicemu_slurm_revoke(const char* rundir, const struct nicemu_job_cred* cred, int timeout_ms, int* revoked,
                        char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
