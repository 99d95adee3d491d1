/* One libdrc call against this node's daemon, for scripts (test_drc_netns.sh):
 *   drc_call acquire                     prints "id N"
 *   drc_call grant|revoke ID UID         a uid grant or its revoke
 *   drc_call release ID
 *   drc_call attach ID [UID]             as UID (default: the caller): drc_access, GNI_GetPtag
 *                                        and GNI_CdmAttach with the credential
 * Prints "rc N NAME" (the DRC return code, or for attach the first failing step's) and
 * exits 0 on success, 1 on a refusal, 2 on a usage error. */
#define NICEMU_DRC_STRERROR
#include <rdmacred.h>

#include <gni_pub.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int report(const char* what, int rc) {
  printf("%s: rc %d %s\n", what, rc, drc_strerror(rc));
  return rc == DRC_SUCCESS ? 0 : 1;
}

static int attach(uint32_t cred) {
  drc_info_handle_t info = NULL;
  int rc = drc_access(cred, 0, &info);
  if (rc != DRC_SUCCESS) return report("drc_access", rc);
  uint32_t cookie = drc_get_first_cookie(info);
  drc_release_local(&info);
  uint8_t ptag = 0;
  gni_return_t g = GNI_GetPtag(0, cookie, &ptag);
  gni_cdm_handle_t cdm;
  if (g == GNI_RC_SUCCESS) g = GNI_CdmCreate((uint32_t)getpid(), ptag, cookie, 0, &cdm);
  if (g == GNI_RC_SUCCESS) {
    uint32_t addr;
    gni_nic_handle_t nic;
    g = GNI_CdmAttach(cdm, 0, &addr, &nic);
    GNI_CdmDestroy(cdm);
  }
  printf("attach: gni rc %d\n", (int)g);
  return g == GNI_RC_SUCCESS ? 0 : 1;
}

int main(int argc, char** argv) {
  const char* op = argc > 1 ? argv[1] : "";
  uint32_t id = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 0;
  if (strcmp(op, "acquire") == 0 && argc == 2) {
    uint32_t cred = 0;
    int rc = drc_acquire(&cred, 0);
    if (rc == DRC_SUCCESS) printf("id %u\n", cred);
    return report("drc_acquire", rc);
  }
  if ((strcmp(op, "grant") == 0 || strcmp(op, "revoke") == 0) && argc == 4) {
    uint32_t uid = (uint32_t)strtoul(argv[3], NULL, 10);
    int rc = op[0] == 'g' ? drc_grant(id, uid, DRC_FLAGS_TARGET_UID) : drc_revoke(id, uid, DRC_FLAGS_TARGET_UID);
    return report(op[0] == 'g' ? "drc_grant" : "drc_revoke", rc);
  }
  if (strcmp(op, "release") == 0 && argc == 3) return report("drc_release", drc_release(id, 0));
  if (strcmp(op, "attach") == 0 && (argc == 3 || argc == 4)) {
    if (argc == 4) {
      uid_t uid = (uid_t)strtoul(argv[3], NULL, 10);
      if (setgid(uid) != 0 || setuid(uid) != 0) {
        perror("drc_call: setuid");
        return 2;
      }
    }
    return attach(id);
  }
  fprintf(stderr, "usage: drc_call acquire | grant|revoke ID UID | release ID | attach ID [UID]\n");
  return 2;
}
