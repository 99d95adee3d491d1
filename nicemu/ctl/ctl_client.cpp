#include "nicemu/ctl/ctl_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "nicemu/common/params.h"

namespace nicemu::ctl {

std::string daemon_rundir() {
  if (const char* d = std::getenv(params::param("rundir").env.data()); d && *d) return d;
  if (geteuid() == 0) return kSystemRundir;
  return "/tmp/nicemu-" + std::to_string(geteuid());
}

std::string default_rundir() {
  // Daemons started by the system (nicemu@.service) serve every user of the host.
  const char* d = std::getenv(params::param("rundir").env.data());
  if (!(d && *d) && !list_nodes(kSystemRundir).empty()) return kSystemRundir;
  return daemon_rundir();
}

std::string socket_path(const std::string& rundir, uint32_t nic_addr) {
  return rundir + "/nic-" + std::to_string(nic_addr) + ".sock";
}

std::string stats_path(const std::string& socket) {
  constexpr std::string_view kSock = ".sock";
  if (socket.size() > kSock.size() && socket.ends_with(kSock))
    return socket.substr(0, socket.size() - kSock.size()) + ".stats";
  return socket + ".stats";
}

std::vector<uint32_t> list_nodes(const std::string& rundir) {
  std::vector<uint32_t> out;
  DIR* d = opendir(rundir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    unsigned long v;
    char tail[8];
    if (std::sscanf(e->d_name, "nic-%lu.soc%1s", &v, tail) == 2 && v <= 0xFFFFFFFFul)
      out.push_back(static_cast<uint32_t>(v));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Connection::~Connection() { close(); }

Connection::Connection(Connection&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), seq_(o.seq_) { o.fd_ = -1; }

Connection& Connection::operator=(Connection&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    seq_ = o.seq_;
    o.fd_ = -1;
  }
  return *this;
}

void Connection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool Connection::connect(const std::string& path) {
  close();
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) {
    errno = ENAMETOOLONG;
    return false;
  }
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return false;
  }
  fd_ = fd;
  path_ = path;
  return true;
}

bool Connection::send_locked(void* req, size_t req_size) {
  if (fd_ < 0) return false;
  auto* h = static_cast<abi::ctl::Header*>(req);
  h->magic = abi::ctl::kMagic;
  h->version = abi::ctl::kVersion;
  h->seq = ++seq_;
  h->length = static_cast<uint32_t>(req_size);
  ssize_t s;
  do {
    s = ::send(fd_, req, req_size, MSG_NOSIGNAL);
  } while (s < 0 && errno == EINTR);
  return s == static_cast<ssize_t>(req_size);
}

bool Connection::send(void* req, size_t req_size) {
  std::lock_guard<std::mutex> lk(mu_);
  return send_locked(req, req_size);
}

long Connection::call(void* req, size_t req_size, void* reply, size_t reply_size, int* fd_out, size_t max_fds) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!fd_out) max_fds = 0;
  for (size_t i = 0; i < max_fds; ++i) fd_out[i] = -1;
  if (!send_locked(req, req_size)) return -1;

  iovec iov{reply, reply_size};
  constexpr size_t kMaxPassed = 3;  // a CDM region: read-only section, MDD table, heap
  alignas(cmsghdr) char cbuf[CMSG_SPACE(kMaxPassed * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof(cbuf);
  ssize_t n;
  do {
    n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return -1;
  size_t got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t n_fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n_fds; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (got < max_fds)
          fd_out[got++] = passed;
        else
          ::close(passed);
      }
    }
  }
  if (static_cast<size_t>(n) < sizeof(abi::ctl::Reply)) return -1;
  auto* rh = static_cast<abi::ctl::Header*>(reply);
  if (rh->magic != abi::ctl::kMagic || rh->seq != static_cast<abi::ctl::Header*>(req)->seq) return -1;
  if (rh->version != abi::ctl::kVersion) {
    // The daemon refused us as a client of another version (node.cpp): say so, once.
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr,
                   "nicemu: the daemon at %s speaks control protocol %u, this program's nicemu library %u: "
                   "install matching nicemu versions\n",
                   path_.c_str(), unsigned(rh->version), unsigned(abi::ctl::kVersion));
    errno = EPROTO;
    return -1;
  }
  return n;
}

std::optional<std::string> Connection::status_json() {
  std::string out;
  std::vector<char> buf(sizeof(abi::ctl::StatusReply) + abi::ctl::kStatusPage);
  uint32_t total = 0;
  do {
    abi::ctl::Status req{};
    req.h.op = static_cast<uint16_t>(abi::ctl::Op::kStatus);
    req.offset = static_cast<uint32_t>(out.size());
    long n = call(&req, sizeof(req), buf.data(), buf.size());
    if (n < static_cast<long>(sizeof(abi::ctl::StatusReply))) return std::nullopt;
    abi::ctl::StatusReply rep;
    std::memcpy(&rep, buf.data(), sizeof(rep));
    if (rep.r.rc != 0 || rep.json_length > static_cast<size_t>(n) - sizeof(rep)) return std::nullopt;
    if (req.offset == 0) total = rep.total_length;
    // The document changed under us only if the daemon restarted the snapshot; a page that
    // makes no progress would loop forever.
    if (rep.total_length != total || (rep.json_length == 0 && total != 0)) return std::nullopt;
    out.append(buf.data() + sizeof(rep), rep.json_length);
  } while (out.size() < total);
  return out;
}

}  // namespace nicemu::ctl
