#include "nicemu/daemon/control_server.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include <spdlog/spdlog.h>

#include "nicemu/abi/ctl_header.h"

namespace nicemu::daemon {

using seqpacket = asio::generic::seq_packet_protocol;

class ControlServer::Session : public std::enable_shared_from_this<ControlServer::Session> {
 public:
  Session(seqpacket::socket sock, Node& node, uint64_t id) : sock_(std::move(sock)), node_(node) {
    peer_.id = id;
    ucred cr{};
    socklen_t len = sizeof(cr);
    if (getsockopt(sock_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
      peer_.pid = cr.pid;
      peer_.uid = cr.uid;
      peer_.gid = cr.gid;
    }
    buf_.resize(abi::ctl::kMaxMessage + 1);
  }

  void start() {
    // A handler that answers later (a DRC change waiting for the other daemons) sends its
    // reply through this, unless the connection is gone by then.
    peer_.reply_later = [w = weak_from_this()](std::vector<char> reply) {
      auto self = w.lock();
      if (!self || self->closed_) return;
      self->reply_ = std::move(reply);
      if (!self->send_reply(PassFds{-1, -1, -1})) self->close();
    };
    wait_readable();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    node_.connection_closed(peer_);
    asio::error_code ec;
    sock_.close(ec);
    if (pidfd_) pidfd_->close(ec);
  }

 private:
  void wait_readable() {
    auto self = shared_from_this();
    sock_.async_wait(seqpacket::socket::wait_read, [self](const asio::error_code& ec) {
      if (ec || self->closed_) return self->close();
      self->on_readable();
    });
  }

  // Drains up to kBatch messages per wake-up: a rank streaming one-way messages (SMSG or
  // MSGQ to another host, remote posts) has them handled in one turn of the loop, so the
  // fabric flush queued behind this handler coalesces them into shared packets.
  static constexpr int kBatch = 64;

  void on_readable() {
    for (int i = 0; i < kBatch; ++i) {
      ssize_t n = ::recv(sock_.native_handle(), buf_.data(), buf_.size(), MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (n <= 0) return close();  // EOF: the client closed or died
      if (static_cast<size_t>(n) > abi::ctl::kMaxMessage) {
        ++node_.counters().malformed_messages;
        spdlog::warn("oversized control message ({} bytes) from pid {} dropped", n, peer_.pid);
        continue;
      }
      if (node_.must_wait(buf_.data(), static_cast<size_t>(n))) {
        // Held until the node has the DRC table (control/credentials.h); the connection is
        // not read meanwhile, so its requests keep their order. The callback holds the
        // connection: with no read pending, nothing else does (the wait is bounded).
        parked_.assign(buf_.data(), buf_.data() + n);
        node_.when_ready([self = shared_from_this()] {
          if (self->closed_) return;
          std::vector<char> msg = std::move(self->parked_);
          if (!self->handle_one(msg.data(), msg.size())) return;
          self->wait_readable();
        });
        return;
      }
      if (!handle_one(buf_.data(), static_cast<size_t>(n))) return;
      if (node_.shutdown_requested()) break;
    }
    wait_readable();
  }

  // One request: handled, answered; false if the connection was closed.
  bool handle_one(const char* msg, size_t n) {
    PassFds pass_fds{-1, -1, -1};
    uint64_t attached_before = peer_.attach_id;
    node_.handle(peer_, msg, n, reply_, pass_fds);
    if (!reply_.empty() && !send_reply(pass_fds)) {
      close();
      return false;
    }
    if (attached_before == 0 && peer_.attach_id != 0) watch_process();
    if (node_.shutdown_requested()) raise(SIGTERM);
    return true;
  }

  // The attach connection closing is the usual sign of death, but a forked child may keep
  // it open; a pidfd turns readable when the process itself exits.
  void watch_process() {
    int fd = static_cast<int>(syscall(SYS_pidfd_open, peer_.pid, 0));
    if (fd < 0) return;  // pre-5.3 kernel: the socket alone tells
    pidfd_.emplace(sock_.get_executor(), fd);
    auto self = shared_from_this();
    pidfd_->async_wait(asio::posix::stream_descriptor::wait_read, [self](const asio::error_code& ec) {
      if (ec || self->closed_) return;
      spdlog::debug("pid {} exited", self->peer_.pid);
      self->close();
    });
  }

  bool send_reply(const PassFds& pass_fds) {
    iovec iov{reply_.data(), reply_.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    int fds[std::tuple_size_v<PassFds>];
    size_t nfds = 0;
    for (int fd : pass_fds)
      if (fd >= 0) fds[nfds++] = fd;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof fds)];
    if (nfds > 0) {
      msg.msg_control = cbuf;
      msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    ssize_t s;
    do {
      s = ::sendmsg(sock_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (s < 0 && errno == EINTR);
    if (s != static_cast<ssize_t>(reply_.size())) {
      spdlog::warn("reply to pid {} failed ({}), closing its connection", peer_.pid, strerror(errno));
      return false;
    }
    return true;
  }

  seqpacket::socket sock_;
  Node& node_;
  Peer peer_;
  std::vector<char> buf_;
  std::vector<char> reply_;
  std::vector<char> parked_;  // a request held by Node::must_wait
  std::optional<asio::posix::stream_descriptor> pidfd_;
  bool closed_ = false;
};

ControlServer::ControlServer(asio::io_context& io, Node& node, const std::string& path)
    : io_(io), node_(node), path_(path), acceptor_(io), accept_backoff_(io) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) throw std::runtime_error("socket path too long: " + path);
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  seqpacket::endpoint ep(&sa, sizeof(sa));
  acceptor_.open(seqpacket(AF_UNIX, 0));
  acceptor_.bind(ep);
  // Any local user may connect; what each may do is decided per request from its
  // peer credentials.
  chmod(path.c_str(), 0666);
  acceptor_.listen(128);
}

ControlServer::~ControlServer() { stop(); }

void ControlServer::start() { accept_next(); }

void ControlServer::accept_next() {
  acceptor_.async_accept([this](const asio::error_code& ec, seqpacket::socket sock) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec == asio::error::no_descriptors || ec.value() == ENFILE) {
        if (!out_of_fds_)
          spdlog::warn("accept on {}: {}; new connections wait until a descriptor is free", path_,
                       ec.message());
        out_of_fds_ = true;
        ++node_.counters().accept_deferred;
        accept_backoff_.expires_after(std::chrono::milliseconds(50));
        accept_backoff_.async_wait([this](const asio::error_code& e) {
          if (!e && acceptor_.is_open()) accept_next();
        });
        return;
      }
      spdlog::warn("accept on {}: {}", path_, ec.message());
      accept_next();
      return;
    }
    if (out_of_fds_) spdlog::info("accept on {}: descriptors available again", path_);
    out_of_fds_ = false;
    int big = 2 << 20;
    setsockopt(sock.native_handle(), SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    auto s = std::make_shared<Session>(std::move(sock), node_, next_id_++);
    ++node_.counters().connections;
    std::erase_if(sessions_, [](const std::weak_ptr<Session>& w) { return w.expired(); });
    sessions_.push_back(s);
    s->start();
    accept_next();
  });
}

void ControlServer::stop() {
  accept_backoff_.cancel();
  if (acceptor_.is_open()) {
    asio::error_code ec;
    acceptor_.close(ec);
    ::unlink(path_.c_str());
  }
  for (auto& w : sessions_)
    if (auto s = w.lock()) s->close();
  sessions_.clear();
}

}  // namespace nicemu::daemon
