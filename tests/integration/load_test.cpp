// Load test of one daemon: N client processes in pairs attach, register a mailbox, exchange
// SMSG messages with their partner, tear everything down and start over, for a given time;
// the daemon's resident memory (VmRSS) is sampled before, during and after, and must come
// back to its baseline. Used by tools/load-test (long run) and the `load` test (short run).
//   load_test DAEMON_SOCKET DAEMON_PID PTAG COOKIE [CLIENTS=64] [SECONDS=10] [SLACK_KIB=8192]
// Exit: 0 pass, 1 fail (a client failed, or RSS stayed above baseline + slack).
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gni_pub.h"

namespace {

long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

#define LT_CHECK(cond)                                                                   \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "client %d: check failed at %d: %s\n", rank, __LINE__, #cond); \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

struct Attrs {
  uint32_t addr, inst;
  gni_smsg_attr_t smsg;
};

// One pair member: `round` attach/exchange/detach cycles until `end`. Instance ids are
// fresh every round (rank * 1e6 + round) so a late peer never meets a recycled one.
int client(int rank, int sock, uint8_t ptag, uint32_t cookie, std::chrono::steady_clock::time_point end) {
  const int msgs = 32;
  int rounds = 0;
  for (;; ++rounds) {
    // Both sides agree to stop: side 0 decides and tells side 1.
    int go = 0;
    if (rank % 2 == 0) {
      go = std::chrono::steady_clock::now() < end ? 1 : 0;
      LT_CHECK(send(sock, &go, sizeof go, 0) == sizeof go);
    } else {
      LT_CHECK(recv(sock, &go, sizeof go, 0) == sizeof go);
    }
    if (!go) break;
    uint32_t inst = uint32_t(rank) * 1000000u + uint32_t(rounds);
    gni_cdm_handle_t cdm;
    gni_nic_handle_t nic;
    uint32_t addr;
    LT_CHECK(GNI_CdmCreate(inst, ptag, cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm) == GNI_RC_SUCCESS);
    LT_CHECK(GNI_CdmAttach(cdm, 0, &addr, &nic) == GNI_RC_SUCCESS);
    gni_cq_handle_t cq, rcq;
    LT_CHECK(GNI_CqCreate(nic, 64, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &cq) == GNI_RC_SUCCESS);
    LT_CHECK(GNI_CqCreate(nic, 64, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &rcq) == GNI_RC_SUCCESS);
    gni_smsg_attr_t local{};
    local.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    local.mbox_maxcredit = 16;
    local.msg_maxsize = 128;
    unsigned size = 0;
    LT_CHECK(GNI_SmsgBufferSizeNeeded(&local, &size) == GNI_RC_SUCCESS);
    std::vector<char> mbox(size);
    local.msg_buffer = mbox.data();
    local.buff_size = size;
    local.mbox_offset = 0;
    LT_CHECK(GNI_MemRegister(nic, uint64_t(mbox.data()), size, rcq, GNI_MEM_READWRITE, uint32_t(-1),
                             &local.mem_hndl) == GNI_RC_SUCCESS);
    Attrs mine{addr, inst, local}, peer{};
    LT_CHECK(send(sock, &mine, sizeof mine, 0) == sizeof mine);
    LT_CHECK(recv(sock, &peer, sizeof peer, 0) == sizeof peer);
    gni_ep_handle_t ep;
    LT_CHECK(GNI_EpCreate(nic, cq, &ep) == GNI_RC_SUCCESS);
    LT_CHECK(GNI_EpBind(ep, peer.addr, peer.inst) == GNI_RC_SUCCESS);
    LT_CHECK(GNI_SmsgInit(ep, &local, &peer.smsg) == GNI_RC_SUCCESS);
    int sent = 0, got = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((sent < msgs || got < msgs) && std::chrono::steady_clock::now() < deadline) {
      if (sent < msgs) {
        uint32_t v = uint32_t(sent);
        gni_return_t rc = GNI_SmsgSend(ep, &v, sizeof v, nullptr, 0, uint32_t(sent));
        LT_CHECK(rc == GNI_RC_SUCCESS || rc == GNI_RC_NOT_DONE);
        if (rc == GNI_RC_SUCCESS) ++sent;
      }
      void* m = nullptr;
      if (GNI_SmsgGetNext(ep, &m) == GNI_RC_SUCCESS) {
        uint32_t v;
        std::memcpy(&v, m, sizeof v);
        LT_CHECK(v == uint32_t(got));  // in order, nothing lost or duplicated
        ++got;
        LT_CHECK(GNI_SmsgRelease(ep) == GNI_RC_SUCCESS);
      }
      gni_cq_entry_t e;
      while (GNI_CqGetEvent(cq, &e) == GNI_RC_SUCCESS) {
      }
      while (GNI_CqGetEvent(rcq, &e) == GNI_RC_SUCCESS) {
      }
    }
    LT_CHECK(sent == msgs && got == msgs);
    // Both done before either detaches, so no message is in flight to a vanished mailbox.
    int done = 1;
    LT_CHECK(send(sock, &done, sizeof done, 0) == sizeof done);
    LT_CHECK(recv(sock, &done, sizeof done, 0) == sizeof done);
    LT_CHECK(GNI_EpDestroy(ep) == GNI_RC_SUCCESS);
    LT_CHECK(GNI_MemDeregister(nic, &local.mem_hndl) == GNI_RC_SUCCESS);
    LT_CHECK(GNI_CqDestroy(cq) == GNI_RC_SUCCESS && GNI_CqDestroy(rcq) == GNI_RC_SUCCESS);
    LT_CHECK(GNI_CdmDestroy(cdm) == GNI_RC_SUCCESS);
  }
  std::printf("client %d: %d rounds\n", rank, rounds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s DAEMON_SOCKET DAEMON_PID PTAG COOKIE [CLIENTS] [SECONDS] [SLACK_KIB]\n", argv[0]);
    return 2;
  }
  setenv("NICEMU_SOCKET", argv[1], 1);
  pid_t daemon = pid_t(std::atoi(argv[2]));
  uint8_t ptag = uint8_t(std::atoi(argv[3]));
  uint32_t cookie = uint32_t(std::strtoul(argv[4], nullptr, 0));
  int clients = argc > 5 ? std::atoi(argv[5]) : 64;
  int seconds = argc > 6 ? std::atoi(argv[6]) : 10;
  long slack = argc > 7 ? std::atol(argv[7]) : 8192;
  if (clients < 2 || clients % 2) {
    std::fprintf(stderr, "CLIENTS must be even and >= 2\n");
    return 2;
  }
  long baseline = rss_kib(daemon);
  if (baseline < 0) {
    std::fprintf(stderr, "cannot read VmRSS of pid %d\n", daemon);
    return 2;
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<pid_t> kids;
  for (int r = 0; r < clients; r += 2) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) return 1;
    timeval tv{30, 0};
    for (int fd : sv) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (int side = 0; side < 2; ++side) {
      pid_t p = fork();
      if (p == 0) {
        close(sv[1 - side]);
        _exit(client(r + side, sv[side], ptag, cookie, end));
      }
      kids.push_back(p);
    }
    close(sv[0]);
    close(sv[1]);
  }
  long peak = baseline;
  int failed = 0;
  size_t left = kids.size();
  while (left > 0) {
    peak = std::max(peak, rss_kib(daemon));
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      --left;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failed;
      continue;
    }
    if (std::chrono::steady_clock::now() > end + std::chrono::seconds(60)) {
      for (pid_t k : kids) kill(k, SIGKILL);  // only our own children
      std::fprintf(stderr, "clients did not finish in time\n");
      failed = 1;
      while (waitpid(-1, nullptr, 0) > 0) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Give the daemon a moment to reclaim the last CDMs, then read the final RSS.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  long final_rss = rss_kib(daemon);
  std::printf("daemon RSS: baseline %ld KiB, peak %ld KiB, after %ld KiB (slack %ld KiB); %d clients, %d s, %d failed\n",
              baseline, peak, final_rss, slack, clients, seconds, failed);
  if (failed) return 1;
  if (final_rss < 0 || final_rss > baseline + slack) {
    std::fprintf(stderr, "daemon memory did not return to its baseline\n");
    return 1;
  }
  return 0;
}
