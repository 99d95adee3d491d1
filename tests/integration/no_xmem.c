/* Runs a program where the kernel refuses cross-memory attach, as a container's seccomp
 * profile may: a seccomp filter makes process_vm_readv and process_vm_writev fail with
 * EPERM (or the errno named), everything else is allowed; then execs PROGRAM, which keeps
 * the filter, as do its children. libugni must then reach its same-host peers through the
 * daemon (docs/decisions.md, "Where the kernel refuses cross-memory attach"); the daemon is
 * started outside the filter (test_no_xmem.sh).
 *   no_xmem [-e EPERM|EACCES|ENOSYS] PROGRAM [ARG...]
 * Exit: PROGRAM's, or 2 for a usage error, 3 when the filter cannot be installed or does
 * not hold (checked on this process before the exec). */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "no_xmem: add this architecture's AUDIT_ARCH value"
#endif

int main(int argc, char** argv) {
  int err = EPERM, first = 1;
  if (argc > 2 && strcmp(argv[1], "-e") == 0) {
    err = strcmp(argv[2], "EPERM") == 0 ? EPERM : strcmp(argv[2], "EACCES") == 0 ? EACCES
          : strcmp(argv[2], "ENOSYS") == 0 ? ENOSYS : 0;
    first = 3;
  }
  if (err == 0 || first >= argc) {
    fprintf(stderr, "usage: no_xmem [-e EPERM|EACCES|ENOSYS] PROGRAM [ARG...]\n");
    return 2;
  }
  struct sock_filter filter[] = {
      /* Another architecture's system call numbers mean other calls: refuse them all. */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
  /* Without privileges the kernel takes a filter only from a process that cannot gain any. */
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    fprintf(stderr, "no_xmem: installing the seccomp filter: %s\n", strerror(errno));
    return 3;
  }
  /* A copy from this very process, which the kernel would allow: must be refused now. */
  char src = 1, dst = 0;
  struct iovec l = {&dst, 1}, r = {&src, 1};
  if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != -1 || errno != err) {
    fprintf(stderr, "no_xmem: the filter does not refuse process_vm_readv\n");
    return 3;
  }
  execvp(argv[first], argv + first);
  fprintf(stderr, "no_xmem: %s: %s\n", argv[first], strerror(errno));
  return 127;
}
