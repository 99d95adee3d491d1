// Client side of the control protocol (nicemu/abi/ctl_protocol.h): used by libugni, the
// launcher and nicemuctl. Synchronous request/reply on a SOCK_SEQPACKET Unix socket.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"

namespace nicemu::ctl {

inline constexpr const char* kSystemRundir = "/run/nicemu";
// Where clients and tools look for daemons: $NICEMU_RUNDIR, else /run/nicemu for root or
// when daemons run there (the system service), else /tmp/nicemu-<uid>.
std::string default_rundir();
// Where a daemon puts its socket by default: $NICEMU_RUNDIR, else /run/nicemu for root,
// else /tmp/nicemu-<uid>.
std::string daemon_rundir();
// Socket of the daemon emulating NIC address `nic_addr` in `rundir`.
std::string socket_path(const std::string& rundir, uint32_t nic_addr);
// The counter page (abi/counters_layout.h) of the daemon listening on `socket`: the same
// path with ".stats" instead of ".sock" (appended when the socket has another suffix).
std::string stats_path(const std::string& socket);
// NIC addresses of all daemon sockets present in `rundir`, ascending.
std::vector<uint32_t> list_nodes(const std::string& rundir);

class Connection {
 public:
  Connection() = default;
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  Connection(Connection&& o) noexcept;
  Connection& operator=(Connection&& o) noexcept;

  // Connects to a daemon socket; false (with errno set) if nothing listens there.
  bool connect(const std::string& path);
  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close();

  // Sends `req` (a message struct starting with abi::ctl::Header, whose seq is filled in)
  // and receives the reply into `reply` (at most reply_size bytes). If `fd_out` is given,
  // up to `max_fds` passed file descriptors are stored in fd_out[0 .. max_fds) (-1 where
  // none; any beyond are closed). Returns bytes received, or -1 on a broken connection
  // (the daemon went away).
  long call(void* req, size_t req_size, void* reply, size_t reply_size, int* fd_out = nullptr,
            size_t max_fds = 1);

  // Sends a one-way request (the daemon sends no reply). False on a broken connection.
  bool send(void* req, size_t req_size);

  template <typename Req, typename Rep>
  bool call(Req& req, Rep& rep, int* fd_out = nullptr, size_t max_fds = 1) {
    long n = call(&req, sizeof(Req), &rep, sizeof(Rep), fd_out, max_fds);
    return n >= static_cast<long>(sizeof(abi::ctl::Reply));
  }

  // Status request: returns the JSON text, nullopt if the daemon is unreachable.
  std::optional<std::string> status_json();

 private:
  // Stamps the header and sends `req` whole; under mu_.
  bool send_locked(void* req, size_t req_size);
  int fd_ = -1;
  std::string path_;  // for messages
  uint32_t seq_ = 0;
  std::mutex mu_;
};

}  // namespace nicemu::ctl
