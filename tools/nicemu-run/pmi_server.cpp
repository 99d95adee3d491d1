// nicemu-run's simple-PMI server; see pmi_server.h. Wire facts: shared/spec/pmi-api.md §8.
#include "pmi_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace nicemu::run {

namespace {

using wire::Message;

// Escaped values may be up to three times the announced limit (every byte as "%XX").
constexpr size_t kMaxWireValue = 3 * wire::kVallenMax;

Message result(std::string_view cmd, int rc, std::string_view msg = {}) {
  Message m(cmd);
  m.add("rc", rc);
  if (!msg.empty()) m.add("msg", msg);
  return m;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

PmiServer::PmiServer(Options opts, Listener& listener)
    : opts_(std::move(opts)), listener_(listener), ranks_(static_cast<size_t>(opts_.size)) {
  for (auto& [k, v] : opts_.preload) kvs_[k] = v;
}

PmiServer::~PmiServer() {
  for (auto& [fd, c] : conns_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void PmiServer::add_rank_connection(int rank, int fd) {
  set_nonblocking(fd);
  Conn& c = conns_[fd];
  c.fd = fd;
  c.rank = rank;
  ranks_[rank].conn_fd = fd;
}

std::string PmiServer::listen_tcp() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(fd, opts_.size + 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error(std::string("PMI TCP listener: ") + std::strerror(e));
  }
  listen_fd_ = fd;
  return "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
}

void PmiServer::add_pollfds(std::vector<pollfd>& fds) const {
  if (listen_fd_ >= 0) fds.push_back({listen_fd_, POLLIN, 0});
  for (const auto& [fd, c] : conns_)
    fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
}

bool PmiServer::handle(const pollfd& p) {
  if (p.fd == listen_fd_ && listen_fd_ >= 0) {
    if (p.revents & POLLIN) accept_tcp();
    return true;
  }
  auto it = conns_.find(p.fd);
  if (it == conns_.end()) return false;
  if (p.revents & POLLOUT) flush(it->second);
  // Re-find: flush() may have closed the connection.
  it = conns_.find(p.fd);
  if (it != conns_.end() && (p.revents & (POLLIN | POLLHUP | POLLERR))) read_conn(it->second);
  return true;
}

void PmiServer::accept_tcp() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient error: poll again
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn& c = conns_[fd];
    c.fd = fd;
    spdlog::debug("PMI: TCP connection fd {} accepted", fd);
  }
}

std::string PmiServer::who(const Conn& c) const {
  return c.rank >= 0 ? "rank " + std::to_string(c.rank) : "connection fd " + std::to_string(c.fd);
}

void PmiServer::read_conn(Conn& c) {
  const int fd = c.fd;
  const char* eof = nullptr;  // set when the peer closed: lines already read still count
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      eof = n == 0 ? "closed" : std::strerror(errno);
      break;
    }
    c.in.append(buf, static_cast<size_t>(n));
    if (static_cast<size_t>(n) < sizeof buf) break;
  }
  std::string line;
  for (;;) {
    auto st = c.in.next(line);
    if (st == wire::LineReader::Status::kNeedMore) break;
    if (st == wire::LineReader::Status::kTooLong) {
      spdlog::warn("PMI: {} sent a line longer than {} bytes; closing its connection", who(c),
                   wire::kMaxLine);
      close_conn(fd, "protocol error");
      return;
    }
    on_line(c, line);
    if (!conns_.count(fd)) return;  // closed while handling
  }
  if (eof)
    close_conn(fd, eof);
  else
    flush(c);
}

void PmiServer::on_line(Conn& c, const std::string& line) {
  spdlog::trace("PMI: {} -> {}", who(c), line);
  if (c.in_spawn) {
    // Multi-line spawn: swallow until "endcmd", then refuse (no dynamic processes).
    if (line.rfind("endcmd", 0) == 0) {
      c.in_spawn = false;
      send(c, result("spawn_result", -1, "spawn_not_supported"));
    }
    return;
  }
  auto m = wire::parse(line);
  if (!m || m->cmd().empty()) {
    spdlog::warn("PMI: {} sent a malformed line \"{}\"", who(c), line);
    send(c, result("error", -1, "malformed_line"));
    return;
  }
  dispatch(c, *m);
}

void PmiServer::dispatch(Conn& c, const wire::Message& m) {
  const std::string_view cmd = m.cmd();
  if (m.fields().front().key == "mcmd") {
    c.in_spawn = true;
    if (m.get("endcmd")) {  // a one-line mcmd: answer at once
      c.in_spawn = false;
      send(c, result("spawn_result", -1, "spawn_not_supported"));
    }
    return;
  }

  if (c.rank < 0) {
    // TCP connection: the first message must say which rank this is.
    auto id = m.get_int("pmiid");
    if (cmd != "initack" || !id || *id < 0 || *id >= opts_.size) {
      spdlog::warn("PMI: {} did not identify itself (cmd={}); closing it", who(c), cmd);
      close_conn(c.fd, "no initack");
      return;
    }
    c.rank = static_cast<int>(*id);
    RankState& r = ranks_[c.rank];
    if (r.conn_fd >= 0 && r.conn_fd != c.fd) close_conn(r.conn_fd, "replaced by a new connection");
    r.conn_fd = c.fd;
    send(c, Message("initack"));
    send(c, Message("set").add("size", opts_.size));
    send(c, Message("set").add("rank", c.rank));
    send(c, Message("set").add("debug", 0));
    return;
  }

  RankState& r = ranks_[c.rank];
  if (cmd == "init") {
    auto version = m.get_int("pmi_version");
    Message reply("response_to_init");
    reply.add("pmi_version", 1).add("pmi_subversion", 1);
    if (version && *version != 1) {
      spdlog::warn("PMI: {} asked for PMI version {}; nicemu-run serves the PMI-1 wire "
                   "protocol only", who(c), *version);
      reply.add("rc", -1);
    } else {
      reply.add("rc", 0);
    }
    r.finalized = false;  // libpmi re-inits on the same connection after a finalize
    send(c, reply);
  } else if (cmd == "get_maxes") {
    send(c, Message("maxes")
                .add("kvsname_max", wire::kKvsnameMax)
                .add("keylen_max", wire::kKeylenMax)
                .add("vallen_max", wire::kVallenMax));
  } else if (cmd == "get_appnum") {
    send(c, Message("appnum").add("appnum", opts_.appnum));
  } else if (cmd == "get_my_kvsname") {
    send(c, Message("my_kvsname").add("kvsname", opts_.kvsname));
  } else if (cmd == "get_universe_size") {
    send(c, Message("universe_size").add("size", opts_.size));
  } else if (cmd == "put") {
    auto kvs = m.get("kvsname"), key = m.get("key"), value = m.get("value");
    if (!kvs || *kvs != opts_.kvsname) {
      send(c, result("put_result", -1, "unknown_kvsname"));
    } else if (!key || !wire::valid_key(*key) || key->size() > wire::kKeylenMax) {
      send(c, result("put_result", -1, "invalid_key"));
    } else if (!value || value->size() > kMaxWireValue) {
      send(c, result("put_result", -1, "invalid_value"));
    } else {
      kvs_[std::string(*key)] = std::string(*value);  // last writer wins (spec §6)
      send(c, result("put_result", 0));
    }
  } else if (cmd == "get") {
    auto kvs = m.get("kvsname"), key = m.get("key");
    if (!kvs || *kvs != opts_.kvsname) {
      send(c, result("get_result", -1, "unknown_kvsname"));
    } else if (auto it = key ? kvs_.find(std::string(*key)) : kvs_.end(); it == kvs_.end()) {
      send(c, result("get_result", -1, "key_not_found"));
    } else {
      send(c, Message("get_result").add("rc", 0).add("value", it->second));
    }
  } else if (cmd == "barrier_in") {
    if (!r.in_barrier) {
      r.in_barrier = true;
      ++in_barrier_;
    }
    check_barrier();
  } else if (cmd == "finalize") {
    r.finalized = true;
    send(c, Message("finalize_ack"));
  } else if (cmd == "abort") {
    int code = static_cast<int>(m.get_int("exitcode").value_or(1));
    listener_.on_pmi_abort(c.rank, code);
  } else {
    spdlog::warn("PMI: {} sent unsupported command cmd={}", who(c), cmd);
    send(c, result("error", -1, "unsupported_command"));
  }
}

void PmiServer::send(Conn& c, const wire::Message& m) {
  std::string line = m.serialize();
  spdlog::trace("PMI: {} <- {}", who(c), std::string_view(line).substr(0, line.size() - 1));
  c.out += line;  // flushed once the current input is handled (or on POLLOUT)
}

void PmiServer::flush(Conn& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT later
    if (n < 0) {
      close_conn(c.fd, std::strerror(errno));
      return;
    }
    c.out.erase(0, static_cast<size_t>(n));
  }
}

void PmiServer::close_conn(int fd, const char* why) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  int rank = it->second.rank;
  spdlog::debug("PMI: {} disconnected ({})", who(it->second), why);
  ::close(fd);
  conns_.erase(it);
  if (rank >= 0 && ranks_[rank].conn_fd == fd) {
    ranks_[rank].conn_fd = -1;
    // Over PMI_FD the connection is the rank's for life: closing it means the rank can
    // no longer take part. (A TCP rank could reconnect; its exit is what counts.)
    if (listen_fd_ < 0) mark_gone(rank);
  }
}

void PmiServer::rank_exited(int rank) {
  if (rank >= 0 && rank < opts_.size) mark_gone(rank);
}

void PmiServer::mark_gone(int rank) {
  RankState& r = ranks_[rank];
  if (r.gone) return;
  r.gone = true;
  if (r.in_barrier) {
    r.in_barrier = false;
    --in_barrier_;
  }
  check_barrier();
}

void PmiServer::check_barrier() {
  if (in_barrier_ == opts_.size) {
    // Everyone arrived: the fence is complete, all puts are visible. State is reset
    // before sending, as a failed send closes a connection and re-enters here.
    std::vector<int> fds;
    for (RankState& r : ranks_) {
      r.in_barrier = false;
      fds.push_back(r.conn_fd);
    }
    in_barrier_ = 0;
    for (int fd : fds) {
      if (auto it = conns_.find(fd); it != conns_.end()) {
        send(it->second, Message("barrier_out"));
        flush(it->second);
      }
    }
    return;
  }
  if (in_barrier_ == 0 || stuck_reported_) return;
  std::vector<int> gone;
  for (int i = 0; i < opts_.size; ++i) {
    if (ranks_[i].in_barrier) continue;
    if (!ranks_[i].gone) return;  // someone may still arrive
    gone.push_back(i);
  }
  stuck_reported_ = true;
  listener_.on_barrier_stuck(gone);
}

}  // namespace nicemu::run
