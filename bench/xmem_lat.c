// xmem_lat: what one cross-memory-attach read costs, the floor under an RDMA GET on the
// one-copy path (and under the rendezvous round trip of gni_bench --test rdv_lat).
// The parent reads S bytes of a touched buffer of a forked child with process_vm_readv,
// and, for the bare cost of entering the kernel, calls getppid; each is timed in batches
// of 100 calls, the median batch reported per call (ns); so is a zero-timeout poll of a
// pidfd of the child (the BTE engine's liveness check, one per side and step). Parent and child are pinned to
// CPUs A and B; the child sleeps in pause() (a CMA read does not need the target running).
//   xmem_lat [--cpus A,B] [--sizes "S ..."] [--batches N]
//   prints, one line per figure: name,bytes,ns
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // process_vm_readv, sched_setaffinity
#endif
#include <sched.h>
#include <signal.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kBatch = 100, kMaxBytes = 1 << 20 };

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    perror("xmem_lat: sched_setaffinity");
    exit(1);
  }
}

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

static double median_ns(uint64_t* t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_u64);
  return (double)t[n / 2] / kBatch;
}

int main(int argc, char** argv) {
  int cpu_a = 0, cpu_b = 1, batches = 2000;
  const char* sizes = "8 100 4096";
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--cpus") && i + 1 < argc && sscanf(argv[i + 1], "%d,%d", &cpu_a, &cpu_b) == 2) {
      ++i;
    } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      sizes = argv[++i];
    } else if (!strcmp(argv[i], "--batches") && i + 1 < argc && (batches = atoi(argv[i + 1])) > 0) {
      ++i;
    } else {
      fprintf(stderr, "usage: xmem_lat [--cpus A,B] [--sizes \"S ...\"] [--batches N]\n");
      return 2;
    }
  }
  static char src[kMaxBytes], dst[kMaxBytes];
  memset(src, 0x5a, sizeof src);  // touched: the read finds the pages present
  memset(dst, 0, sizeof dst);
  pid_t child = fork();
  if (child < 0) {
    perror("xmem_lat: fork");
    return 1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pin(cpu_b);
    for (;;) pause();
  }
  pin(cpu_a);
  uint64_t* t = malloc(sizeof(uint64_t) * (size_t)batches);
  if (!t) return 1;
  int rc = 0;
  for (int b = 0; b < batches; ++b) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < kBatch; ++i) syscall(SYS_getppid);
    t[b] = now_ns() - t0;
  }
  printf("getppid,0,%.1f\n", median_ns(t, batches));
  int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
  if (pidfd >= 0) {
    for (int b = 0; b < batches; ++b) {
      uint64_t t0 = now_ns();
      for (int i = 0; i < kBatch; ++i) {
        struct pollfd p = {pidfd, POLLIN, 0};
        if (poll(&p, 1, 0) != 0) {
          fprintf(stderr, "xmem_lat: the child exited\n");
          return 1;
        }
      }
      t[b] = now_ns() - t0;
    }
    printf("pidfd_poll,0,%.1f\n", median_ns(t, batches));
    close(pidfd);
  }
  char* end = NULL;
  for (const char* p = sizes;; p = end) {
    long s = strtol(p, &end, 10);
    if (end == p) break;
    if (s <= 0 || s > kMaxBytes) {
      fprintf(stderr, "xmem_lat: a size must be 1..%d\n", kMaxBytes);
      rc = 2;
      break;
    }
    struct iovec l = {dst, (size_t)s}, r = {src, (size_t)s};
    for (int b = 0; b < batches; ++b) {
      uint64_t t0 = now_ns();
      for (int i = 0; i < kBatch; ++i)
        if (process_vm_readv(child, &l, 1, &r, 1, 0) != s) {
          perror("xmem_lat: process_vm_readv");
          rc = 1;
          goto out;
        }
      t[b] = now_ns() - t0;
    }
    printf("process_vm_readv,%ld,%.1f\n", s, median_ns(t, batches));
  }
out:
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  free(t);
  return rc;
}
