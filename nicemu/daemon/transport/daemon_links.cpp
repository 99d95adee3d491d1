#include "nicemu/daemon/transport/daemon_links.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <spdlog/spdlog.h>

#include "nicemu/ctl/ctl_client.h"

namespace nicemu::daemon {

DaemonLinks::~DaemonLinks() {
  for (auto& [n, fd] : fds_) ::close(fd);
}

int DaemonLinks::connect_to(uint32_t node) {
  std::string path = ctl::socket_path(rundir_, node);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) return -1;
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  // Bounded sends: a peer daemon that stopped reading must not stall this one.
  timeval tv{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool DaemonLinks::local(uint32_t node) {
  if (fds_.contains(node)) return true;
  const auto now = std::chrono::steady_clock::now();
  if (auto it = remote_until_.find(node); it != remote_until_.end() && now < it->second) return false;
  if (::access(ctl::socket_path(rundir_, node).c_str(), F_OK) == 0) return true;
  remote_until_[node] = now + std::chrono::seconds(1);  // a daemon started here later is found within 1 s
  return false;
}

bool DaemonLinks::send(uint32_t node, const void* msg, size_t len) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto it = fds_.find(node);
    if (it == fds_.end()) {
      int fd = connect_to(node);
      if (fd < 0) {
        spdlog::warn("no daemon for NIC address {} under {}", node, rundir_);
        return false;
      }
      it = fds_.emplace(node, fd).first;
    }
    if (::send(it->second, msg, len, MSG_NOSIGNAL) == static_cast<ssize_t>(len)) return true;
    ::close(it->second);
    fds_.erase(it);
  }
  return false;
}

}  // namespace nicemu::daemon
