#include "daemons.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/common/params.h"
#include "nicemu/ctl/ctl_client.h"
#include "nicemu/fabric/fabric_map.h"
#include "nicemu/fabric/packet_codec.h"

#include <netinet/in.h>
#include <sys/socket.h>

namespace nicemu::run {

namespace {

std::string nicemu_binary() {
  if (const char* e = std::getenv(params::param("daemon_binary").env.data()); e && *e) return e;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // Build tree (tools/nicemu-run/ next to nicemu/daemon/), or installed: PREFIX/sbin
    // beside PREFIX/bin (meson install, the Debian package), or the same bin/.
    for (auto cand : {self.parent_path() / "../../nicemu/daemon/nicemu", self.parent_path() / "../sbin/nicemu",
                      self.parent_path() / "nicemu"}) {
      if (std::filesystem::exists(cand, ec)) return std::filesystem::weakly_canonical(cand, ec).string();
    }
  }
  return "nicemu";  // from PATH
}

bool answers(const std::string& socket) {
  ctl::Connection c;
  if (!c.connect(socket)) return false;
  abi::ctl::Hello req{};
  req.h.op = static_cast<uint16_t>(abi::ctl::Op::kHello);
  abi::ctl::HelloReply rep{};
  return c.call(req, rep) && rep.r.rc == abi::gni::kSuccess;
}

abi::ctl::CredReply cred_call(const std::string& socket, abi::ctl::Op op, uid_t uid, uint32_t ptag, uint32_t cookie) {
  ctl::Connection c;
  if (!c.connect(socket)) throw std::runtime_error("cannot reach the daemon at " + socket);
  abi::ctl::Cred req{};
  req.h.op = static_cast<uint16_t>(op);
  req.uid = uid;
  req.ptag = ptag;
  req.cookie = cookie;
  abi::ctl::CredReply rep{};
  if (!c.call(req, rep)) throw std::runtime_error("no answer from the daemon at " + socket);
  return rep;
}

}  // namespace

void DaemonSet::spawn(const std::string& bin, uint32_t addr, const std::string& sock,
                      const std::vector<std::string>& args) {
  const std::string node = std::to_string(addr);
  std::vector<const char*> argv{bin.c_str(), "--node", node.c_str()};
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed starting nicemu");
  if (pid == 0) {
    execvp(bin.c_str(), const_cast<char* const*>(argv.data()));
    std::fprintf(stderr, "nicemu-run: cannot execute %s: %s\n", bin.c_str(), strerror(errno));
    _exit(127);
  }
  started_.push_back(pid);
  starting_.push_back(Starting{pid, addr, sock});
}

// Every daemon spawned has 10 s (plus 20 ms for each one starting beside it: they share the
// host's cores) to answer on its socket; throws if one exits or does not come up.
void DaemonSet::wait_up() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10) +
                  std::chrono::milliseconds(20) * starting_.size();
  while (!starting_.empty()) {
    for (auto it = starting_.begin(); it != starting_.end();) {
      if (answers(it->socket)) {
        it = starting_.erase(it);
        continue;
      }
      int st;
      if (waitpid(it->pid, &st, WNOHANG) == it->pid) {
        std::erase(started_, it->pid);
        throw std::runtime_error("nicemu for NIC address " + std::to_string(it->addr) + " exited at start-up");
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("nicemu for NIC address " + std::to_string(it->addr) + " did not come up on " +
                                 it->socket);
      ++it;
    }
    if (!starting_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::unique_ptr<DaemonSet> DaemonSet::start_or_find(int nodes, const std::string& rundir,
                                                    const std::string& log_level) {
  if (nodes < 1) throw std::runtime_error("--nodes must be at least 1");
  auto set = std::unique_ptr<DaemonSet>(new DaemonSet);
  set->rundir_ = rundir;
  std::error_code ec;
  std::filesystem::create_directories(rundir, ec);

  std::vector<uint32_t> running;
  for (uint32_t a : ctl::list_nodes(rundir))
    if (answers(ctl::socket_path(rundir, a))) running.push_back(a);

  // Running daemons are used as they are; missing nodes get addresses 0, 1, 2, ...
  std::string bin = nicemu_binary();
  uint32_t next = 0;
  for (uint32_t a : running) {
    if (static_cast<int>(set->nodes_.size()) == nodes) break;
    set->nodes_.push_back(Node{a, ctl::socket_path(rundir, a), rundir});
  }
  while (static_cast<int>(set->nodes_.size()) < nodes) {
    while (std::find(running.begin(), running.end(), next) != running.end()) ++next;
    uint32_t addr = next++;
    std::string sock = ctl::socket_path(rundir, addr);
    set->spawn(bin, addr, sock, {"--rundir", rundir, "--log-level", log_level});
    set->nodes_.push_back(Node{addr, sock, rundir});
  }
  set->wait_up();
  return set;
}

namespace {
// Free UDP ports on loopback, asked of the kernel (bound to port 0, then released; a port
// taken by someone else meanwhile makes that daemon fail to start, which is reported).
std::vector<uint16_t> free_udp_ports(int n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("no free UDP port on loopback");
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}
}  // namespace

std::unique_ptr<DaemonSet> DaemonSet::start_fabric(int nodes, const std::string& rundir, const std::string& log_level,
                                                   const std::string& data) {
  if (nodes < 1) throw std::runtime_error("--nodes must be at least 1");
  auto set = std::unique_ptr<DaemonSet>(new DaemonSet);
  set->rundir_ = rundir;
  set->fabric_dir_ = rundir + "/fabric-" + std::to_string(getpid());
  std::error_code ec;
  std::filesystem::create_directories(set->fabric_dir_, ec);
  if (ec) throw std::runtime_error("cannot create " + set->fabric_dir_ + ": " + ec.message());
  const std::string key = set->fabric_dir_ + "/fabric.key", map = set->fabric_dir_ + "/fabric.toml";
  std::string err;
  if (!fabric::write_new_key(key, err)) throw std::runtime_error("cluster key: " + err);
  auto ports = free_udp_ports(nodes);
  {
    std::string text = "# nicemu-run --fabric " + data + ": one host per node, all on loopback\n";
    for (int a = 0; a < nodes; ++a)
      text += "\n[[node]]\nnic = " + std::to_string(a) + "\nhost = \"127.0.0.1\"\nport = " + std::to_string(ports[a]) + "\n";
    FILE* f = std::fopen(map.c_str(), "w");
    if (!f || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0) throw std::runtime_error("cannot write " + map);
  }
  std::string bin = nicemu_binary();
  for (int i = 0; i < nodes; ++i) {
    uint32_t addr = static_cast<uint32_t>(i);
    std::string host_dir = set->fabric_dir_ + "/host-" + std::to_string(addr);
    std::filesystem::create_directories(host_dir, ec);
    std::string sock = ctl::socket_path(host_dir, addr);
    set->spawn(bin, addr, sock,
               {"--rundir", host_dir, "--log-level", log_level, "--fabric", map, "--fabric-key", key, "--fabric-data", data});
    set->nodes_.push_back(Node{addr, sock, host_dir});
  }
  set->wait_up();
  return set;
}

DaemonSet::~DaemonSet() {
  for (pid_t p : started_) kill(p, SIGTERM);
  for (pid_t p : started_) {
    int st;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(p, &st, WNOHANG) == p) goto next;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(p, SIGKILL);
    waitpid(p, &st, 0);
  next:;
  }
  if (!fabric_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(fabric_dir_, ec);
  }
}

JobCredential DaemonSet::issue_credential(uid_t uid) {
  auto rep = cred_call(nodes_.front().socket, abi::ctl::Op::kCredIssue, uid, 0, 0);
  if (rep.r.rc != abi::gni::kSuccess)
    throw std::runtime_error("daemon at " + nodes_.front().socket + " refused to issue a credential");
  JobCredential c{static_cast<uint8_t>(rep.ptag), rep.cookie};
  for (size_t i = 1; i < nodes_.size(); ++i) {
    auto g = cred_call(nodes_[i].socket, abi::ctl::Op::kCredGrant, uid, c.ptag, c.cookie);
    if (g.r.rc != abi::gni::kSuccess)
      throw std::runtime_error("daemon at " + nodes_[i].socket + " refused the job credential");
  }
  return c;
}

void DaemonSet::revoke_credential(const JobCredential& cred) {
  for (auto& n : nodes_) {
    try {
      cred_call(n.socket, abi::ctl::Op::kCredRevoke, getuid(), cred.ptag, cred.cookie);
    } catch (const std::exception&) {
      // A daemon that is gone has nothing left to revoke.
    }
  }
}

}  // namespace nicemu::run
