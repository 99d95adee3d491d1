/* libdrc against running daemons (test_drc.sh): the owner acquires a credential and
 * attaches with it; a granted uid (a forked child that drops to it) may access and attach;
 * an ungranted uid may not; after drc_revoke the granted uid's new attach is refused; after
 * drc_release the owner's too; drc_strerror and invalid arguments.
 * Usage: drc_check GRANTED_UID UNGRANTED_UID (run as root). */
#define NICEMU_DRC_STRERROR
#include <rdmacred.h>

#include <gni_pub.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int fails;
#define CHECK(c, ...)                                                    \
  do {                                                                   \
    if (!(c)) {                                                          \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #c);       \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
      fails++;                                                           \
    }                                                                    \
  } while (0)

/* drc_access, cookie -> ptag by GNI_GetPtag (as libfabric's gni provider does), attach. */
static gni_return_t attach_with(uint32_t cred, int* drc_rc) {
  drc_info_handle_t info = NULL;
  *drc_rc = drc_access(cred, 0, &info);
  if (*drc_rc != DRC_SUCCESS) return GNI_RC_PERMISSION_ERROR;
  uint32_t cookie = drc_get_first_cookie(info);
  drc_release_local(&info);
  free(info); /* NULL now: Mercury's pattern of free() after drc_release_local is harmless */
  uint8_t ptag = 0;
  gni_return_t rc = GNI_GetPtag(0, cookie, &ptag);
  if (rc != GNI_RC_SUCCESS) return rc;
  gni_cdm_handle_t cdm;
  rc = GNI_CdmCreate((uint32_t)getpid(), ptag, cookie, 0, &cdm);
  if (rc != GNI_RC_SUCCESS) return rc;
  uint32_t addr;
  gni_nic_handle_t nic;
  rc = GNI_CdmAttach(cdm, 0, &addr, &nic);
  GNI_CdmDestroy(cdm);
  return rc;
}

/* In a child running as `uid`: exit 0 if attach_with gave (want_drc, want_gni). */
static int as_user(uid_t uid, uint32_t cred, int want_drc, gni_return_t want_gni) {
  pid_t p = fork();
  if (p == 0) {
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(3);
    int drc_rc;
    gni_return_t rc = attach_with(cred, &drc_rc);
    if (drc_rc != want_drc || rc != want_gni) {
      fprintf(stderr, "uid %u: drc_access %d (%s), attach %d; wanted %d, %d\n", (unsigned)uid, drc_rc,
              drc_strerror(drc_rc), rc, want_drc, want_gni);
      _exit(1);
    }
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: drc_check GRANTED_UID UNGRANTED_UID\n");
    return 2;
  }
  uid_t granted = (uid_t)atoi(argv[1]), other = (uid_t)atoi(argv[2]);

  /* Arguments. */
  CHECK(drc_acquire(NULL, 0) == -DRC_EINVAL, "NULL credential");
  uint32_t cred = 0;
  CHECK(drc_acquire(&cred, 0x4000) == -DRC_EINVAL, "unknown flag");
  CHECK(drc_grant(0, 1, DRC_FLAGS_TARGET_UID) == -DRC_EINVAL, "credential 0");
  CHECK(drc_access(1, 0, NULL) == -DRC_EINVAL, "NULL info");
  CHECK(drc_release_local(NULL) == -DRC_EINVAL, "NULL info");
  CHECK(drc_strerror(-DRC_EPERM) != NULL && strstr(drc_strerror(-DRC_EPERM), "DRC_EPERM"), "strerror");
  CHECK(strstr(drc_strerror(DRC_CRED_NOT_FOUND), "DRC_CRED_NOT_FOUND") != NULL, "strerror positive");
  CHECK(strcmp(drc_strerror(9999), "unknown DRC error") == 0, "strerror unknown");

  int rc = drc_acquire(&cred, DRC_FLAGS_FLEX_CREDENTIAL);
  CHECK(rc == DRC_SUCCESS && cred != 0, "drc_acquire: %d %s", rc, drc_strerror(rc));
  if (rc != DRC_SUCCESS) return 1;
  printf("credential %u\n", cred);
  CHECK(drc_grant(cred, granted, 0x8000) == -DRC_EINVAL, "grant without a target flag");
  CHECK(drc_access(cred + 1, 0, &(drc_info_handle_t){0}) == -DRC_CRED_NOT_FOUND, "unknown credential");

  int drc_rc;
  gni_return_t g = attach_with(cred, &drc_rc);
  CHECK(drc_rc == DRC_SUCCESS && g == GNI_RC_SUCCESS, "owner attach: drc %d gni %d", drc_rc, g);

  CHECK(as_user(granted, cred, -DRC_EPERM, GNI_RC_PERMISSION_ERROR) == 0, "not yet granted: refused");
  rc = drc_grant(cred, granted, DRC_FLAGS_TARGET_UID);
  CHECK(rc == DRC_SUCCESS, "grant: %s", drc_strerror(rc));
  CHECK(drc_grant(cred, granted, DRC_FLAGS_TARGET_UID) == -DRC_ALREADY_GRANTED, "grant twice");
  CHECK(as_user(granted, cred, DRC_SUCCESS, GNI_RC_SUCCESS) == 0, "granted uid attaches");
  CHECK(as_user(other, cred, -DRC_EPERM, GNI_RC_PERMISSION_ERROR) == 0, "ungranted uid refused");

  rc = drc_grant(cred, drc_get_wlm_id(), DRC_FLAGS_TARGET_WLM);
  CHECK(drc_get_wlm_id() != 0 && rc == DRC_SUCCESS, "grant to this job %u: %s", drc_get_wlm_id(), drc_strerror(rc));
  /* The forked child is in this job (nicemu-run's NICEMU_JOB_ID), whatever its uid. */
  CHECK(as_user(other, cred, DRC_SUCCESS, GNI_RC_SUCCESS) == 0, "member of the granted job attaches");
  rc = drc_revoke(cred, drc_get_wlm_id(), DRC_FLAGS_TARGET_WLM);
  CHECK(rc == DRC_SUCCESS, "revoke the job: %s", drc_strerror(rc));
  CHECK(as_user(other, cred, -DRC_EPERM, GNI_RC_PERMISSION_ERROR) == 0, "job revoked: refused");
  rc = drc_revoke(cred, granted, DRC_FLAGS_TARGET_UID);
  CHECK(rc == DRC_SUCCESS, "revoke: %s", drc_strerror(rc));
  CHECK(drc_revoke(cred, granted, DRC_FLAGS_TARGET_UID) == -DRC_CRED_NOT_FOUND, "revoke twice");
  CHECK(as_user(granted, cred, -DRC_EPERM, GNI_RC_PERMISSION_ERROR) == 0, "revoked uid refused");

  rc = drc_release(cred, 0);
  CHECK(rc == DRC_SUCCESS, "release: %s", drc_strerror(rc));
  g = attach_with(cred, &drc_rc);
  CHECK(drc_rc == -DRC_CRED_NOT_FOUND, "released: drc_access %d", drc_rc);
  CHECK(drc_release(cred, 0) == -DRC_CRED_NOT_FOUND, "release twice");
  if (fails) return 1;
  printf("drc_check: ok\n");
  return 0;
}
