/* ofi_bw: a provider's own streaming rate, the bound bench/run-fabric-ofi compares nicemu's ofi
 * fabric with (Debian's libfabric-bin ships fi_pingpong only, and the fabtests of 1.13 fail
 * against 1.17's tcp;ofi_rxm). The endpoint as libugni opens it (RDM, FI_DELIVERY_COMPLETE,
 * mr_mode VIRT_ADDR|ALLOCATED, keys we choose); the client streams ITERS operations of BYTES
 * with WINDOW in flight and spins on its CQ, as a polling rank does; the target sleeps in
 * fi_cq_sread between completions (its sockets' activity wakes it), as libugni's progress
 * thread does for a rank that does not poll. Addresses, key and buffer go over a TCP socket.
 *   ofi_bw [-p PROV] [-o write|read|msg] [-S BYTES] [-I ITERS] [-W WINDOW] [-s] -P PORT [SERVER]
 * (-s: the target spins on its CQ instead, as fabtests do)
 * The client prints MB/s, operations/s and the CPU time (getrusage: all threads) of both sides
 * during the stream, per MiB and per operation. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHECK(x)                                                                           \
  do {                                                                                     \
    int rc_ = (int)(x);                                                                    \
    if (rc_) {                                                                             \
      fprintf(stderr, "ofi_bw: %s: %s (%d)\n", #x, fi_strerror(rc_ < 0 ? -rc_ : rc_), rc_); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

struct hello { /* what each side tells the other */
  uint8_t addr[256];
  uint64_t addr_len, key, va;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}
static void xfer(int fd, void *p, size_t n, int out) {
  for (size_t k = 0; k < n;) {
    ssize_t r = out ? write(fd, (char *)p + k, n - k) : read(fd, (char *)p + k, n - k);
    if (r <= 0) {
      perror("ofi_bw: socket");
      exit(1);
    }
    k += (size_t)r;
  }
}

int main(int argc, char **argv) {
  const char *prov = "tcp;ofi_rxm", *op = "write", *host = NULL;
  size_t bytes = 1 << 20;
  long iters = 1000, window = 16;
  int port = 0, spin = 0, c;
  while ((c = getopt(argc, argv, "p:o:S:I:W:P:s")) != -1) switch (c) {
      case 'p': prov = optarg; break;
      case 'o': op = optarg; break;
      case 'S': bytes = strtoull(optarg, NULL, 10); break;
      case 'I': iters = atol(optarg); break;
      case 'W': window = atol(optarg); break;
      case 'P': port = atoi(optarg); break;
      case 's': spin = 1; break; /* the target spins on its CQ too */
      default: fprintf(stderr, "usage: ofi_bw [-p PROV] [-o write|read|msg] [-S BYTES] [-I ITERS] [-W WINDOW] [-s] -P PORT [SERVER]\n"); return 2;
    }
  if (optind < argc) host = argv[optind];
  const int initiator = host != NULL; /* else the target (listens) */
  const int msg = strcmp(op, "msg") == 0, rd = strcmp(op, "read") == 0;
  if (!port || !bytes || iters < 1 || window < 1 || window > 1024 || (!msg && !rd && strcmp(op, "write"))) {
    fprintf(stderr, "ofi_bw: bad arguments\n");
    return 2;
  }

  struct fi_info *hints = fi_allocinfo(), *info = NULL;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->fabric_attr->prov_name = strdup(prov);
  CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
  struct fid_fabric *fab;
  struct fid_domain *dom;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  struct fid_mr *mr;
  struct fi_av_attr ava = {.type = FI_AV_TABLE};
  struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = initiator ? FI_WAIT_NONE : FI_WAIT_UNSPEC};
  CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
  CHECK(fi_domain(fab, info, &dom, NULL));
  CHECK(fi_av_open(dom, &ava, &av, NULL));
  CHECK(fi_cq_open(dom, &cqa, &cq, NULL));
  CHECK(fi_endpoint(dom, info, &ep, NULL));
  CHECK(fi_ep_bind(ep, &av->fid, 0));
  CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
  CHECK(fi_enable(ep));
  /* One buffer per operation in flight (a message's receive needs its own). */
  const size_t slots = msg ? (size_t)window : 1;
  char *buf = aligned_alloc(4096, (slots * bytes + 4095) & ~(size_t)4095);
  if (!buf) return 1;
  memset(buf, 0x5a, slots * bytes);
  struct hello me = {0}, peer;
  me.key = initiator ? 0xB0B : 0xA11CE;
  me.va = (uint64_t)(uintptr_t)buf;
  CHECK(fi_mr_reg(dom, buf, slots * bytes, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV, 0,
                  me.key, 0, &mr, NULL));
  size_t len = sizeof me.addr;
  CHECK(fi_getname(&ep->fid, me.addr, &len));
  me.addr_len = len;

  int fd, one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (initiator) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    inet_pton(AF_INET, host, &sa.sin_addr);
    for (int t = 0; connect(fd, (struct sockaddr *)&sa, sizeof sa); ++t) {
      if (t > 50) {
        perror("ofi_bw: connect");
        return 1;
      }
      usleep(100000);
      close(fd);
      fd = socket(AF_INET, SOCK_STREAM, 0);
    }
  } else {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1) || (fd = accept(ls, NULL, NULL)) < 0) {
      perror("ofi_bw: listen");
      return 1;
    }
    close(ls);
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  xfer(fd, &me, sizeof me, 1);
  xfer(fd, &peer, sizeof peer, 0);
  /* Without FI_MR_VIRT_ADDR the remote address is an offset into the registration. */
  if (!(info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)) peer.va = 0;
  fi_addr_t dest;
  if (fi_av_insert(av, peer.addr, 1, &dest, 0, NULL) != 1) return fprintf(stderr, "ofi_bw: fi_av_insert\n"), 1;
  void *desc = fi_mr_desc(mr);
  struct fi_cq_entry ce[16];
  struct fi_context2 ctx[1024];
  if (msg && !initiator)
    for (long k = 0; k < window; ++k) CHECK(fi_recv(ep, buf + (size_t)k * bytes, bytes, desc, FI_ADDR_UNSPEC, &ctx[k]));
  char go = 'g';
  xfer(fd, &go, 1, !initiator); /* the target is ready (its receives posted) */

  /* A window's worth first, untimed: rxm connects on the first operation. */
  const long warm = window;
  double c0 = 0, t0 = 0;
  long done = 0;
  if (initiator) { /* the initiator: spins on its CQ */
    for (int phase = 0; phase < 2; ++phase) {
      const long n = phase ? iters : warm;
      long posted = 0;
      done = 0;
      if (phase) c0 = cpu_s(), t0 = now_s();
      while (done < n) {
        while (posted < n && posted - done < window) {
          ssize_t rc = msg ? fi_send(ep, buf, bytes, desc, dest, &ctx[posted % window])
                       : rd ? fi_read(ep, buf, bytes, desc, dest, peer.va, peer.key, &ctx[posted % window])
                            : fi_write(ep, buf, bytes, desc, dest, peer.va, peer.key, &ctx[posted % window]);
          if (rc == -FI_EAGAIN) break;
          CHECK(rc);
          ++posted;
        }
        ssize_t k = fi_cq_read(cq, ce, 16);
        if (k > 0) done += k;
        else if (k == -FI_EAVAIL) {
          struct fi_cq_err_entry err = {0};
          fi_cq_readerr(cq, &err, 0);
          fprintf(stderr, "ofi_bw: completion error %s\n", fi_strerror(err.err));
          return 1;
        }
      }
    }
  } else { /* the target: asleep in fi_cq_sread; for messages, counts and re-posts */
    c0 = cpu_s(), t0 = now_s();
    while (msg ? done < iters + warm : 1) {
      ssize_t k = spin ? fi_cq_read(cq, ce, 16) : fi_cq_sread(cq, ce, 16, NULL, msg ? 100 : 1);
      for (ssize_t j = 0; j < k; ++j, ++done) {
        struct fi_context2 *x = ce[j].op_context;
        CHECK(fi_recv(ep, buf + (size_t)(x - ctx) * bytes, bytes, desc, FI_ADDR_UNSPEC, x));
      }
      if (!msg) { /* RMA: until the initiator says it is done */
        char b;
        if (recv(fd, &b, 1, MSG_DONTWAIT) == 1) break;
      }
    }
  }
  const double secs = now_s() - t0;
  double cpu = cpu_s() - c0;
  double other = 0;
  if (initiator) {
    xfer(fd, &go, 1, 1);
    xfer(fd, &other, sizeof other, 0);
    const double mib = (double)bytes * (double)iters / (1 << 20);
    printf("ofi_bw: %s %zu B x %ld, window %ld, %s: %.1f MB/s, %.0f ops/s; CPU s initiator %.3f target %.3f; "
           "CPU us per MiB %.1f, per op %.2f\n",
           op, bytes, iters, window, prov, (double)bytes * (double)iters / secs / 1e6, (double)iters / secs, cpu, other,
           (cpu + other) / mib * 1e6, (cpu + other) / (double)iters * 1e6);
  } else {
    if (msg) xfer(fd, &go, 1, 0);
    xfer(fd, &cpu, sizeof cpu, 1);
  }
  close(fd);
  fi_close(&ep->fid);
  fi_close(&mr->fid);
  fi_close(&cq->fid);
  fi_close(&av->fid);
  fi_close(&dom->fid);
  fi_close(&fab->fid);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  free(buf);
  return 0;
}
