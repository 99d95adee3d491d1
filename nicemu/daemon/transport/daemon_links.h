// One-way messages to the other daemons on this host (datagram matching between emulated
// nodes). Connections are opened on first use and reopened once if a send fails.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace nicemu::daemon {

class DaemonLinks {
 public:
  explicit DaemonLinks(std::string rundir) : rundir_(std::move(rundir)) {}
  ~DaemonLinks();
  DaemonLinks(const DaemonLinks&) = delete;
  DaemonLinks& operator=(const DaemonLinks&) = delete;

  bool send(uint32_t node, const void* msg, size_t len);
  // Whether the daemon of `node` is on this host (connected, or its socket exists).
  bool local(uint32_t node);

 private:
  int connect_to(uint32_t node);
  std::string rundir_;
  std::map<uint32_t, int> fds_;
  // Nodes found to have no socket here, and until when that is believed (steady clock):
  // a message to another host's node costs no file-system lookup each time.
  std::map<uint32_t, std::chrono::steady_clock::time_point> remote_until_;
};

}  // namespace nicemu::daemon
