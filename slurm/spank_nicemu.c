/* SPANK plugin: a nicemu job credential (ptag/cookie) per Slurm job, the same on every node
 * of the job and for all its steps, bound to the job owner's uid, in every task's
 * environment; revoked by the job epilog on each node. See spank_nicemu(8).
 *
 * Every node derives the credential from the job id with a keyed hash (nicemu_slurm.h), so
 * the nodes agree without talking to one another or to slurmctld, and a user cannot
 * predict another job's cookie. The daemon binds it to the uid: a process of another user
 * cannot attach with it even if it learns the numbers. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "nicemu_slurm.h"

SPANK_PLUGIN(nicemu, 1);

/* The extern step (PrologFlags=Contain) runs no tasks of the job. */
#define NICEMU_EXTERN_STEP 0xfffffffcu

static char rundir_pattern[PATH_MAX];                    /* empty: the daemons' default */
static char key_path[PATH_MAX] = "/etc/nicemu/slurm.key";
static int timeout_ms = 5000;
static int enabled = 1;     /* default=on|off in plugstack.conf */
static char task_failure[1024];  /* why this node cannot run the step's tasks */

static int opt_nicemu(int val, const char* optarg, int remote) {
  (void)val;
  (void)remote;
  if (optarg && strcmp(optarg, "off") == 0) {
    enabled = 0;
  } else if (optarg && strcmp(optarg, "on") == 0) {
    enabled = 1;
  } else {
    slurm_error("nicemu: --nicemu=%s: expected on or off", optarg ? optarg : "");
    return -1;
  }
  return 0;
}

struct spank_option spank_options[] = {
    {"nicemu", "on|off",
     "nicemu job credential (PMI_GNI_PTAG/COOKIE) for this job's tasks: on (the default) or off", 1, 0,
     opt_nicemu},
    SPANK_OPTIONS_TABLE_END};

/* rundir=PATH, with %h replaced by the short host name (several emulated hosts on one
 * machine, each with its own run directory); key=PATH; timeout_ms=N; default=on|off. */
static int parse_args(int ac, char** av, int with_default) {
  for (int i = 0; i < ac; ++i) {
    const char* a = av[i];
    if (strncmp(a, "rundir=", 7) == 0) {
      if (snprintf(rundir_pattern, sizeof rundir_pattern, "%s", a + 7) >= (int)sizeof rundir_pattern) goto long_arg;
    } else if (strncmp(a, "key=", 4) == 0) {
      if (snprintf(key_path, sizeof key_path, "%s", a + 4) >= (int)sizeof key_path) goto long_arg;
    } else if (strncmp(a, "timeout_ms=", 11) == 0) {
      char* end;
      long v = strtol(a + 11, &end, 10);
      if (*end || v < 1 || v > 600000) {
        slurm_error("nicemu: plugstack.conf argument %s: expected 1 .. 600000 milliseconds", a);
        return -1;
      }
      timeout_ms = (int)v;
    } else if (strcmp(a, "default=on") == 0 || strcmp(a, "default=off") == 0) {
      if (with_default) enabled = a[9] == 'n';
    } else {
      slurm_error("nicemu: unknown plugstack.conf argument \"%s\" (rundir=, key=, timeout_ms=, default=on|off)", a);
      return -1;
    }
  }
  return 0;
long_arg:
  slurm_error("nicemu: plugstack.conf argument too long: %s", ac ? av[0] : "");
  return -1;
}

/* The run directory of this node's daemons: rundir= with %h expanded; empty for the default. */
static int node_rundir(char* out, size_t len) {
  char host[256] = "";
  size_t o = 0;
  out[0] = '\0';
  for (const char* p = rundir_pattern; *p; ++p) {
    const char* piece = NULL;
    char one[2] = {*p, '\0'};
    if (p[0] == '%' && p[1] == 'h') {
      if (!host[0]) {
        if (gethostname(host, sizeof host - 1) != 0) return -1;
        host[strcspn(host, ".")] = '\0';
      }
      piece = host;
      ++p;
    } else {
      piece = one;
    }
    size_t n = strlen(piece);
    if (o + n >= len) return -1;
    memcpy(out + o, piece, n + 1);
    o += n;
  }
  return 0;
}

int slurm_spank_init(spank_t sp, int ac, char** av) {
  (void)sp;
  return parse_args(ac, av, 1);
}

static int set_env(spank_t sp, const char* name, const char* value) {
  spank_err_t e = spank_setenv(sp, name, value, 1);
  if (e != ESPANK_SUCCESS) {
    slurm_error("nicemu: cannot set %s in the job environment: %s", name, spank_strerror(e));
    return -1;
  }
  return 0;
}

/* In slurmstepd, as root, once the options are known: the job's credential on this node's
 * daemons, and the variables every task needs. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char** av) {
  (void)ac;
  (void)av;
  if (spank_context() != S_CTX_REMOTE) return 0;
  uint32_t job_id = 0, step_id = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
    slurm_error("nicemu: cannot read the job id and owner of this step");
    return -1;
  }
  if (spank_get_item(sp, S_JOB_STEPID, &step_id) == ESPANK_SUCCESS && step_id == NICEMU_EXTERN_STEP) return 0;
  if (!enabled) {
    slurm_verbose("nicemu: job %u: --nicemu=off, no credential", job_id);
    return 0;
  }
  char err[512], rundir[PATH_MAX];
  if (node_rundir(rundir, sizeof rundir) != 0) {
    slurm_error("nicemu: rundir=%s does not expand to a path", rundir_pattern);
    return -1;
  }
  struct nicemu_job_cred cred;
  if (nicemu_slurm_derive(key_path, job_id, &cred, err, sizeof err) != 0) {
    slurm_error("nicemu: job %u: %s", job_id, err);
    return -1;
  }
  uint32_t nic = 0;
  if (nicemu_slurm_issue(rundir[0] ? rundir : NULL, (uint32_t)uid, &cred, timeout_ms, &nic, err, sizeof err) != 0) {
    /* Failing here would fail the step with only "Plugin initialization failed" at srun
     * (and srun's exit status 0): each task fails instead, before exec, saying why. */
    snprintf(task_failure, sizeof task_failure, "nicemu: job %u cannot run on this node: %s", job_id, err);
    slurm_error("%s", task_failure);
    return 0;
  }
  char v[32];
  snprintf(v, sizeof v, "%u", cred.ptag);
  if (set_env(sp, "PMI_GNI_PTAG", v)) return -1;
  snprintf(v, sizeof v, "%u", cred.cookie);
  if (set_env(sp, "PMI_GNI_COOKIE", v)) return -1;
  if (set_env(sp, "PMI_GNI_DEV_ID", "0")) return -1;
  snprintf(v, sizeof v, "%u", nic);
  if (set_env(sp, "PMI_GNI_LOC_ADDR", v) || set_env(sp, "NICEMU_NODE", v)) return -1;
  if (rundir[0] && set_env(sp, "NICEMU_RUNDIR", rundir)) return -1;
  slurm_verbose("nicemu: job %u uid %u: ptag %u cookie %#x on NIC %u", job_id, (unsigned)uid, cred.ptag, cred.cookie,
                nic);
  return 0;
}

/* In each task's process before exec: the reason the node cannot run the job, on the
 * task's stderr (which srun shows), and a failed task. */
int slurm_spank_task_init(spank_t sp, int ac, char** av) {
  (void)sp;
  (void)ac;
  (void)av;
  if (!task_failure[0]) return 0;
  fprintf(stderr, "%s\n", task_failure);
  return -1;
}

/* In slurmd's epilog on every node of the job, however it ended (completed, scancel, a
 * killed step, a node failure of another node): its processes are gone, so is the
 * credential. Never fails the epilog (that would drain the node): a daemon that is down
 * holds no credential to revoke. */
int slurm_spank_job_epilog(spank_t sp, int ac, char** av) {
  /* slurmd's epilog does not run slurm_spank_init first: read the arguments here. */
  if (parse_args(ac, av, 0) != 0) return 0;
  uint32_t job_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
    const char* s = getenv("SLURM_JOB_ID");
    if (!s || !*s) {
      slurm_error("nicemu: epilog: no job id");
      return 0;
    }
    job_id = (uint32_t)strtoul(s, NULL, 10);
  }
  char err[512], rundir[PATH_MAX];
  struct nicemu_job_cred cred;
  if (node_rundir(rundir, sizeof rundir) != 0) {
    slurm_error("nicemu: rundir=%s does not expand to a path", rundir_pattern);
    return 0;
  }
  if (nicemu_slurm_derive(key_path, job_id, &cred, err, sizeof err) != 0) {
    slurm_error("nicemu: epilog of job %u: %s", job_id, err);
    return 0;
  }
  int revoked = 0;
  if (nicemu_slurm_revoke(rundir[0] ? rundir : NULL, &cred, timeout_ms, &revoked, err, sizeof err) != 0)
    slurm_error("nicemu: epilog of job %u: %s", job_id, err);
  if (revoked) slurm_info("nicemu: job %u: credential ptag %u revoked on %d NIC(s)", job_id, cred.ptag, revoked);
  return 0;
}
