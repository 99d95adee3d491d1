// libpmi's connection to the process manager; see client.h.
#include "client.h"
#include "pmix_backend.h"

#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "process_mapping.h"

namespace nicemu::pmi {

namespace {

// Parses a whole decimal environment value; nullopt when unset or malformed.
std::optional<long> env_long(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

// Hydra started without auto-cleanup tells the surviving ranks of a rank's death with SIGUSR1
// (its proxy's notice, pmip_cb.c; MPICH installs a handler for it). SIGUSR1's default action
// ends the process, so a rank of a program that is not MPICH would die with its peer, the
// opposite of what -disable-auto-cleanup asks. The notice is taken and dropped (the dead peer
// shows in nicemu as error completions); the application's own handler, set before or after,
// wins.
void on_failure_notice(int) {}

void keep_running_on_failure_notices() {
  struct sigaction old {};
  if (sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) return;
  struct sigaction sa {};
  sa.sa_handler = on_failure_notice;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
}

}  // namespace

Client& Client::get() {
  static Client* instance = new Client();
  return *instance;
}

int copy_out(std::string_view s, char* buf, int len) {
  if (!buf || len <= 0) return PMI_ERR_INVALID_ARG;
  size_t cap = static_cast<size_t>(len);
  if (s.size() + 1 > cap) {
    std::memcpy(buf, s.data(), cap - 1);
    buf[cap - 1] = '\0';
    return PMI_ERR_INVALID_LENGTH;
  }
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return PMI_SUCCESS;
}

void Client::report(std::string_view msg) const {
  std::string line = "libpmi: ";
  if (rank_known_) line += "rank " + std::to_string(rank_) + ": ";
  line += msg;
  line += '\n';
  // One write so lines of concurrent ranks do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void Client::lost(std::string_view what, int err) {
  if (broken_) return;
  broken_ = true;
  std::string msg = "lost the connection to the process manager (" + fd_origin_ + "): ";
  msg += what;
  if (err) {
    msg += ": ";
    msg += std::strerror(err);
  }
  msg += "; PMI calls now return PMI_FAIL";
  report(msg);
}

bool Client::send_line(const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    // MSG_NOSIGNAL: a dead launcher must give an error, not a SIGPIPE.
    ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      lost("send failed", errno);
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

bool Client::recv_line(std::string& line) {
  for (;;) {
    switch (reader_.next(line)) {
      case wire::LineReader::Status::kLine:
        return true;
      case wire::LineReader::Status::kTooLong:
        lost("the server sent an over-long line", 0);
        return false;
      case wire::LineReader::Status::kNeedMore:
        break;
    }
    char buf[4096];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      lost("receive failed", errno);
      return false;
    }
    if (n == 0) {
      lost("the server closed the connection", 0);
      return false;
    }
    reader_.append(buf, static_cast<size_t>(n));
  }
}

int Client::exchange(const wire::Message& req, std::string_view expect, wire::Message& reply) {
  if (broken_ || !connected_) return PMI_FAIL;
  if (!send_line(req.serialize())) return PMI_FAIL;
  std::string line;
  if (!recv_line(line)) return PMI_FAIL;
  auto m = wire::parse(line);
  if (!m || m->cmd() != expect) {
    // Out of step with the server: nothing later can be trusted.
    lost("unexpected answer to cmd=" + std::string(req.cmd()) + ": \"" + line + "\"", 0);
    return PMI_FAIL;
  }
  reply = std::move(*m);
  return PMI_SUCCESS;
}

int Client::connect_port(const char* port) {
  std::string s(port);
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    report("PMI_PORT=\"" + s + "\" is not host:port");
    return PMI_FAIL;
  }
  std::string host = s.substr(0, colon), service = s.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    report("cannot resolve PMI_PORT=" + s + ": " + gai_strerror(rc));
    return PMI_FAIL;
  }
  int err = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fd_ = fd;
      break;
    }
    err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (fd_ < 0) {
    report("cannot connect to PMI_PORT=" + s + ": " + std::strerror(err));
    return PMI_FAIL;
  }
  return PMI_SUCCESS;
}

// PMI_PORT with PMI_ID: the server learns who we are from `initack` and tells us our size
// and rank in three `cmd=set` lines (size, rank, debug).
int Client::handshake_initack(int id) {
  wire::Message req("initack");
  req.add("pmiid", id);
  wire::Message reply;
  if (int rc = exchange(req, "initack", reply); rc != PMI_SUCCESS) return rc;
  std::optional<long long> size, rank;
  for (int i = 0; i < 3; ++i) {
    std::string line;
    if (!recv_line(line)) return PMI_FAIL;
    auto m = wire::parse(line);
    if (!m || m->cmd() != "set") {
      lost("unexpected line during initack: \"" + line + "\"", 0);
      return PMI_FAIL;
    }
    if (auto v = m->get_int("size")) size = v;
    if (auto v = m->get_int("rank")) rank = v;
  }
  if (!size || !rank) {
    lost("initack did not give size and rank", 0);
    return PMI_FAIL;
  }
  size_ = static_cast<int>(*size);
  rank_ = static_cast<int>(*rank);
  rank_known_ = true;
  return PMI_SUCCESS;
}

int Client::connect() {
  if (const char* port = std::getenv("PMI_PORT"); port && *port) {
    fd_origin_ = std::string("PMI_PORT ") + port;
    if (int rc = connect_port(port); rc != PMI_SUCCESS) return rc;
    connected_ = true;
    keep_running_on_failure_notices();
    if (auto id = env_long("PMI_ID")) return handshake_initack(static_cast<int>(*id));
  } else if (std::getenv("PMI_FD")) {
    auto fd = env_long("PMI_FD");
    fd_origin_ = std::string("PMI_FD ") + std::getenv("PMI_FD");
    if (!fd || *fd < 0 || *fd > 1 << 24) {
      report("PMI_FD=\"" + std::string(std::getenv("PMI_FD")) + "\" is not a descriptor number");
      return PMI_FAIL;
    }
    fd_ = static_cast<int>(*fd);
    connected_ = true;
    keep_running_on_failure_notices();
  } else if (pmix::selected()) {
    // Started by a PMIx server (Open MPI's mpirun, Slurm --mpi=pmix): job facts at init.
    pmix_ = true;
    connected_ = true;
    return PMI_SUCCESS;
  } else {
    if (pmix::requested_but_unavailable())
      report("PMIX_RANK/PMIX_NAMESPACE are set but this libpmi was built without PMIx; running as a singleton");
    // No process manager: a job of one rank, as MPICH's singleton mode.
    singleton_ = true;
    connected_ = true;
    rank_ = 0;
    size_ = 1;
    rank_known_ = true;
    kvsname_ = "kvs_" + std::to_string(::getpid()) + "_0";
    local_kvs_["PMI_process_mapping"] = wire::format_process_mapping({0});
    return PMI_SUCCESS;
  }
  auto rank = env_long("PMI_RANK"), size = env_long("PMI_SIZE");
  if (!rank || !size || *size < 1 || *rank < 0 || *rank >= *size) {
    report("PMI_RANK/PMI_SIZE missing or invalid (PMI_RANK=" +
           std::string(std::getenv("PMI_RANK") ? std::getenv("PMI_RANK") : "unset") +
           ", PMI_SIZE=" +
           std::string(std::getenv("PMI_SIZE") ? std::getenv("PMI_SIZE") : "unset") + ")");
    return PMI_FAIL;
  }
  rank_ = static_cast<int>(*rank);
  size_ = static_cast<int>(*size);
  rank_known_ = true;
  return PMI_SUCCESS;
}

// `init`, then the job facts the API hands out without further round trips.
int Client::handshake_init() {
  wire::Message reply;
  wire::Message init("init");
  init.add("pmi_version", 1).add("pmi_subversion", 1);
  if (int rc = exchange(init, "response_to_init", reply); rc != PMI_SUCCESS) return rc;
  if (reply.get_int("rc").value_or(0) != 0) {
    std::string answer = reply.serialize();
    answer.pop_back();  // the '\n'
    report("the process manager refused PMI-1 init (" + answer + ")");
    return PMI_FAIL;
  }
  if (known_) return PMI_SUCCESS;  // re-init after finalize: facts unchanged

  if (int rc = exchange(wire::Message("get_maxes"), "maxes", reply); rc != PMI_SUCCESS) return rc;
  auto kn = reply.get_int("kvsname_max"), kl = reply.get_int("keylen_max"),
       vl = reply.get_int("vallen_max");
  if (kn && *kn > 0) kvsname_max_ = static_cast<int>(*kn);
  if (kl && *kl > 0) keylen_max_ = static_cast<int>(*kl);
  if (vl && *vl > 0) vallen_max_ = static_cast<int>(*vl);

  if (int rc = exchange(wire::Message("get_appnum"), "appnum", reply); rc != PMI_SUCCESS)
    return rc;
  appnum_ = static_cast<int>(reply.get_int("appnum").value_or(0));
  // A server that does not number applications answers -1 (Slurm's PMI-2 plugin over
  // PMI-1): a job of one application, number 0, as Cray PMI reports it.
  if (appnum_ < 0) appnum_ = 0;

  if (int rc = exchange(wire::Message("get_my_kvsname"), "my_kvsname", reply); rc != PMI_SUCCESS)
    return rc;
  auto name = reply.get("kvsname");
  if (!name || name->empty()) {
    lost("the server sent no KVS name", 0);
    return PMI_FAIL;
  }
  kvsname_ = std::string(*name);
  return PMI_SUCCESS;
}

int Client::init(int* spawned) {
  std::lock_guard lock(mu_);
  if (refcount_ > 0) {
    ++refcount_;
    if (spawned) *spawned = spawned_ ? 1 : 0;
    return PMI_SUCCESS;
  }
  if (broken_) return PMI_FAIL;
  if (!connected_) {
    if (int rc = connect(); rc != PMI_SUCCESS) {
      broken_ = true;  // the environment will not change: fail fast, say it once
      return rc;
    }
    spawned_ = env_long("PMI_SPAWNED").value_or(0) != 0;
  }
  bool publish = false;
  if (pmix_) {
    pmix::JobFacts f;
    if (int rc = pmix::init(f); rc != PMI_SUCCESS) return rc;
    rank_ = f.rank;
    size_ = f.size;
    appnum_ = f.appnum;
    rank_known_ = true;
    // A PMI-1 KVS name: the namespace with anything the wire would refuse replaced.
    kvsname_ = f.nspace;
    for (char& ch : kvsname_)
      if (ch == '=' || static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7F) ch = '_';
    if (kvsname_.empty()) kvsname_ = "pmix";
  } else if (!singleton_) {
    publish = !known_;  // the first init only: a re-init after finalize keeps what it put
    if (int rc = handshake_init(); rc != PMI_SUCCESS) return rc;
  }
  known_ = true;
  refcount_ = 1;
  if (publish) publish_nic_addr();
  if (spawned) *spawned = spawned_ ? 1 : 0;
  return PMI_SUCCESS;
}

bool Client::server_is_nicemu_run() {
  static const bool yes = std::getenv("NICEMU_PMI_PIPELINE") != nullptr;
  return yes;
}

// nicemu-run pre-loads every node's NIC address (nicemu_nic_addrs). Another PMI-1 server
// (Slurm's, Hydra) knows nothing of NICs: each rank puts its own under
// nicemu_nic_addr_<rank>, committed by the application's next barrier, and
// PMI_nid_to_nicaddrs reads the first rank's of a node (layout.h).
void Client::publish_nic_addr() {
  if (server_is_nicemu_run()) return;
  const char* addr = std::getenv("PMI_GNI_LOC_ADDR");
  if (!addr || !*addr) return;
  std::string first(addr, std::strcspn(addr, ":"));
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) return;
  if (kvs_put(kvsname_, kNicAddrKeyPrefix + std::to_string(rank_), first) != PMI_SUCCESS)
    report("could not publish this rank's NIC address (PMI_nid_to_nicaddrs will answer node ids)");
}

int Client::finalize() {
  std::lock_guard lock(mu_);
  if (refcount_ == 0) return PMI_SUCCESS;  // more finalizes than inits: harmless
  if (--refcount_ > 0) return PMI_SUCCESS;
  if (singleton_) return PMI_SUCCESS;
  if (pmix_) return pmix::finalize();  // PMIx counts its own inits: MPI's stays
  wire::Message reply;
  return exchange(wire::Message("finalize"), "finalize_ack", reply);
}

bool Client::initialized() {
  std::lock_guard lock(mu_);
  return refcount_ > 0;
}

int Client::check_init() { return initialized() ? PMI_SUCCESS : PMI_ERR_INIT; }

int Client::kvs_put(std::string_view kvsname, std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  if (refcount_ == 0) return PMI_ERR_INIT;
  if (static_cast<int>(key.size()) > keylen_max_) return PMI_ERR_INVALID_KEY_LENGTH;
  if (!wire::valid_key(key)) return PMI_ERR_INVALID_KEY;
  if (static_cast<int>(value.size()) > vallen_max_) return PMI_ERR_INVALID_VAL_LENGTH;
  if (kvsname.empty() || !wire::valid_key(kvsname)) return PMI_ERR_INVALID_ARG;
  if (singleton_) {
    if (kvsname != kvsname_) return PMI_ERR_INVALID_KVS;
    local_kvs_[std::string(key)] = std::string(value);
    return PMI_SUCCESS;
  }
  if (pmix_) return kvsname == kvsname_ ? pmix::put(key, value) : PMI_ERR_INVALID_KVS;
  wire::Message req("put");
  req.add("kvsname", kvsname).add("key", key).add("value", wire::escape_value(value));
  wire::Message reply;
  if (int rc = exchange(req, "put_result", reply); rc != PMI_SUCCESS) return rc;
  if (reply.get_int("rc").value_or(-1) != 0) {
    auto msg = reply.get("msg");
    report("put of key " + std::string(key) + " refused by the server" +
           (msg ? " (" + std::string(*msg) + ")" : std::string()));
    return PMI_FAIL;
  }
  return PMI_SUCCESS;
}

int Client::kvs_get(std::string_view kvsname, std::string_view key, std::string& value) {
  std::lock_guard lock(mu_);
  if (refcount_ == 0) return PMI_ERR_INIT;
  if (!wire::valid_key(key)) return PMI_ERR_INVALID_KEY;
  if (static_cast<int>(key.size()) > keylen_max_) return PMI_ERR_INVALID_KEY_LENGTH;
  if (kvsname.empty() || !wire::valid_key(kvsname)) return PMI_ERR_INVALID_ARG;
  if (singleton_) {
    if (kvsname != kvsname_) return PMI_ERR_INVALID_KVS;
    auto it = local_kvs_.find(key);
    if (it == local_kvs_.end()) return PMI_ERR_INVALID_KEY;
    value = it->second;
    return PMI_SUCCESS;
  }
  if (pmix_) return kvsname == kvsname_ ? pmix::get(key, value) : PMI_ERR_INVALID_KVS;
  wire::Message req("get");
  req.add("kvsname", kvsname).add("key", key);
  wire::Message reply;
  if (int rc = exchange(req, "get_result", reply); rc != PMI_SUCCESS) return rc;
  // Absent keys are an error code, silently (spec §6: Cray's stderr noise is avoided).
  if (reply.get_int("rc").value_or(-1) != 0) return PMI_ERR_INVALID_KEY;
  value = wire::unescape_value(reply.get("value").value_or(""));
  return PMI_SUCCESS;
}

int Client::kvs_get_many(std::string_view kvsname, const std::vector<std::string>& keys,
                         std::vector<std::string>& values, std::vector<int>& rcs) {
  std::lock_guard lock(mu_);
  values.assign(keys.size(), std::string());
  rcs.assign(keys.size(), PMI_SUCCESS);
  if (singleton_ || pmix_) {
    for (size_t i = 0; i < keys.size(); ++i) rcs[i] = kvs_get(kvsname, keys[i], values[i]);
    return PMI_SUCCESS;
  }
  if (refcount_ == 0) return PMI_ERR_INIT;
  if (kvsname.empty() || !wire::valid_key(kvsname)) return PMI_ERR_INVALID_ARG;
  if (broken_ || !connected_) return PMI_FAIL;
  // Pipelined only when the server says it answers in order and buffers its answers
  // (nicemu-run sets NICEMU_PMI_PIPELINE); a bounded window keeps both sides' buffers
  // small. Any other server gets one get per round trip, as before.
  size_t window = 1;
  if (const char* w = std::getenv("NICEMU_PMI_PIPELINE"); w && *w)
    window = std::clamp<size_t>(std::strtoul(w, nullptr, 10), 1, 256);
  for (size_t first = 0; first < keys.size(); first += window) {
    const size_t last = std::min(keys.size(), first + window);
    std::string batch;
    std::vector<bool> sent(last - first, false);
    for (size_t i = first; i < last; ++i) {
      if (!wire::valid_key(keys[i])) {
        rcs[i] = PMI_ERR_INVALID_KEY;
        continue;
      }
      if (static_cast<int>(keys[i].size()) > keylen_max_) {
        rcs[i] = PMI_ERR_INVALID_KEY_LENGTH;
        continue;
      }
      wire::Message req("get");
      req.add("kvsname", kvsname).add("key", keys[i]);
      batch += req.serialize();
      sent[i - first] = true;
    }
    if (!batch.empty() && !send_line(batch)) return PMI_FAIL;
    for (size_t i = first; i < last; ++i) {
      if (!sent[i - first]) continue;
      std::string line;
      if (!recv_line(line)) return PMI_FAIL;
      auto m = wire::parse(line);
      if (!m || m->cmd() != "get_result") {
        lost("unexpected answer to a pipelined cmd=get: \"" + line + "\"", 0);
        return PMI_FAIL;
      }
      if (m->get_int("rc").value_or(-1) != 0) {
        rcs[i] = PMI_ERR_INVALID_KEY;
        continue;
      }
      values[i] = wire::unescape_value(m->get("value").value_or(""));
    }
  }
  return PMI_SUCCESS;
}

int Client::barrier() {
  std::lock_guard lock(mu_);
  if (refcount_ == 0) return PMI_ERR_INIT;
  if (singleton_) return PMI_SUCCESS;
  if (pmix_) return pmix::fence();
  wire::Message reply;
  return exchange(wire::Message("barrier_in"), "barrier_out", reply);
}

int Client::universe_size(int* size) {
  std::lock_guard lock(mu_);
  if (refcount_ == 0) return PMI_ERR_INIT;
  if (singleton_) {
    *size = 1;
    return PMI_SUCCESS;
  }
  if (pmix_) return pmix::universe_size(*size);
  wire::Message reply;
  if (int rc = exchange(wire::Message("get_universe_size"), "universe_size", reply);
      rc != PMI_SUCCESS)
    return rc;
  auto v = reply.get_int("size");
  if (!v) return PMI_FAIL;
  // Hydra answers -1 when no universe size was given; Cray PMI reports the job size.
  *size = *v >= 1 ? static_cast<int>(*v) : size_;
  return PMI_SUCCESS;
}

void Client::send_abort(int exit_code) {
  std::lock_guard lock(mu_);
  if (singleton_ || !connected_ || broken_) return;
  if (pmix_) return pmix::abort(exit_code, "PMI_Abort");
  wire::Message req("abort");
  req.add("exitcode", exit_code);
  send_line(req.serialize());
}

}  // namespace nicemu::pmi
