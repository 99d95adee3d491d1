// The daemon's control socket: a Unix SOCK_SEQPACKET listener served by Asio (through its
// generic protocol: this Asio has no local seq-packet protocol of its own). Each
// connection is identified by its peer credentials (SO_PEERCRED); requests are handed to
// the Node, replies go back with an optional file descriptor (SCM_RIGHTS).
#pragma once
#include <memory>
#include <string>

#include <asio.hpp>

#include "nicemu/daemon/node.h"

namespace nicemu::daemon {

class ControlServer {
 public:
  ControlServer(asio::io_context& io, Node& node, const std::string& path);
  ~ControlServer();
  void start();
  void stop();  // closes the listener and every connection

 private:
  class Session;
  void accept_next();

  asio::io_context& io_;
  Node& node_;
  std::string path_;
  asio::basic_socket_acceptor<asio::generic::seq_packet_protocol> acceptor_;
  std::vector<std::weak_ptr<Session>> sessions_;
  // Out of descriptors (EMFILE/ENFILE): the pending connection stays in the backlog and
  // accept would fail again at once, so the next try waits instead of spinning.
  asio::steady_timer accept_backoff_;
  bool out_of_fds_ = false;
  uint64_t next_id_ = 1;
};

}  // namespace nicemu::daemon
