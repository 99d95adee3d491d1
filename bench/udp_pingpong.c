/* udp_pingpong: the floor under anything that crosses hosts over UDP. An 8-byte ping-pong
 * between two processes, median round trip over N exchanges, either sleeping in recv()
 * (every hop a wake-up, as a daemon that sleeps pays) or polling the socket with
 * MSG_DONTWAIT (no wake-up, as UCX and libfabric do). bench/run-fabric runs both across
 * its veth pair.
 *
 *   udp_pingpong server ADDR PORT N [--poll]
 *   udp_pingpong client ADDR PORT N [--poll]     prints "<median round trip us>"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One datagram into buf; polling spins on MSG_DONTWAIT. */
static ssize_t take(int fd, char *buf, size_t len, struct sockaddr_in *from, int poll) {
  for (;;) {
    socklen_t fl = sizeof *from;
    ssize_t n = recvfrom(fd, buf, len, poll ? MSG_DONTWAIT : 0, (struct sockaddr *)from, &fl);
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) return n;
  }
}

int main(int argc, char **argv) {
  if (argc < 5 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0)) {
    fprintf(stderr, "usage: udp_pingpong server|client ADDR PORT N [--poll]\n");
    return 2;
  }
  const int server = strcmp(argv[1], "server") == 0;
  const int n = atoi(argv[4]);
  const int poll = argc > 5 && strcmp(argv[5], "--poll") == 0;
  if (n <= 0) return 2;
  struct sockaddr_in peer = {0};
  peer.sin_family = AF_INET;
  peer.sin_port = htons((unsigned short)atoi(argv[3]));
  if (inet_pton(AF_INET, argv[2], &peer.sin_addr) != 1) {
    fprintf(stderr, "udp_pingpong: bad address %s\n", argv[2]);
    return 2;
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return perror("socket"), 1;
  char buf[64] = "ping-pon";
  struct sockaddr_in from;
  if (server) {
    if (bind(fd, (struct sockaddr *)&peer, sizeof peer) != 0) return perror("bind"), 1;
    for (int i = 0; i < n + 100; ++i) {
      ssize_t k = take(fd, buf, sizeof buf, &from, poll);
      if (k < 0) return perror("recvfrom"), 1;
      if (k == 1) break; /* the client's "done" */
      sendto(fd, buf, (size_t)k, 0, (struct sockaddr *)&from, sizeof from);
    }
    return 0;
  }
  double *rtt = malloc(sizeof(double) * (size_t)n);
  if (!rtt) return 1;
  usleep(200000); /* the server binds */
  for (int i = -100; i < n; ++i) { /* 100 warm-up exchanges */
    double t0 = now_us();
    if (sendto(fd, buf, 8, 0, (struct sockaddr *)&peer, sizeof peer) != 8) return perror("sendto"), 1;
    if (take(fd, buf, sizeof buf, &from, poll) < 0) return perror("recvfrom"), 1;
    if (i >= 0) rtt[i] = now_us() - t0;
  }
  sendto(fd, buf, 1, 0, (struct sockaddr *)&peer, sizeof peer);
  qsort(rtt, (size_t)n, sizeof rtt[0], cmp_double);
  printf("%.1f\n", rtt[n / 2]);
  free(rtt);
  return 0;
}
