// Integration-test harness: real nicemu daemons in a private run directory, real child
// processes, and a socketpair for the out-of-band exchange that PMI does in applications.
// Every daemon and child is killed when the fixture goes away, on failure too.
//
// NICEMU_TEST_FABRIC=1 puts every daemon on a "host" of its own: a run directory each (so
// no daemon or client finds another node's socket) and the UDP fabric on loopback between
// them (a fresh cluster key and fabric map per Cluster). The same tests then check that
// operations across hosts keep the semantics they have on one host. NICEMU_TEST_FABRIC_DATA
// names the daemons' --fabric-data (ofi: the ranks' data rank to rank over libfabric).
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gni_pub.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/region_map.h"
#include "nicemu/abi/shm_layout.h"
#include "nicemu/ctl/ctl_client.h"

namespace harness {

inline std::string daemon_binary() {
  const char* e = std::getenv("NICEMU_DAEMON");
  if (!e) throw std::runtime_error("NICEMU_DAEMON is not set (run through meson test)");
  return e;
}

// True when the tests run across hosts (NICEMU_TEST_FABRIC=1: every node its own host).
inline bool across_hosts() {
  const char* f = std::getenv("NICEMU_TEST_FABRIC");
  return f && std::string(f) == "1";
}

// Across hosts with the ranks' data over libfabric (NICEMU_TEST_FABRIC_DATA=ofi).
inline bool across_hosts_ofi() {
  const char* d = std::getenv("NICEMU_TEST_FABRIC_DATA");
  return across_hosts() && d && std::string(d) == "ofi";
}

inline bool daemon_answers(const std::string& sock) {
  nicemu::ctl::Connection c;
  return c.connect(sock) && c.status_json().has_value();
}

struct Cred {
  uint8_t ptag = 0;
  uint32_t cookie = 0;
};

// Connects `conn` to the daemon at `sock` and attaches CDM `inst` by hand, for tests that
// speak the control protocol themselves (forged requests, the region's memfds). The reply
// and the region's two memfds (-1 when absent) come back; true when the daemon answered.
// Attaches as libugni does, by hand: fds = read-only section, MDD table, heap. Like the
// library, maps the MDD table writable (into *mdd_rw if given, else kept mapped) and seals it,
// without which the daemon shows the region to no peer.
inline bool attach_by_hand(nicemu::ctl::Connection& conn, const std::string& sock, uint32_t inst, Cred c,
                           nicemu::abi::ctl::AttachReply& ar, int (&fds)[3], char** mdd_rw = nullptr) {
  namespace ctl = nicemu::abi::ctl;
  ctl::Attach at{};
  at.h.op = uint16_t(ctl::Op::kAttach);
  at.inst_id = inst;
  at.ptag = c.ptag;
  at.cookie = c.cookie;
  at.pid = uint32_t(getpid());
  at.abi_version = nicemu::abi::kAbiVersion;
  ar = {};
  fds[0] = fds[1] = fds[2] = -1;
  if (!conn.connect(sock) || !conn.call(at, ar, fds, 3)) return false;
  if (ar.r.rc != 0 || fds[1] < 0) return true;
  void* rw = mmap(nullptr, nicemu::abi::kMddBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
  if (rw == MAP_FAILED || fcntl(fds[1], F_ADD_SEALS, nicemu::abi::kMddOwnerSeals) != 0) return false;
  if (mdd_rw) *mdd_rw = static_cast<char*>(rw);
  return true;
}

class Cluster {
 public:
  explicit Cluster(int nodes, std::vector<std::string> extra_args = {}) : extra_(extra_args) {
    char tmpl[] = "/tmp/nicemu-test-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    rundir_ = tmpl;
    setenv("NICEMU_RUNDIR", rundir_.c_str(), 1);
    setenv("NICEMU_SPIN_US", "20", 1);
    fabric_ = across_hosts();
    if (fabric_) write_fabric(nodes);
    for (int i = 0; i < nodes; ++i) start_daemon(uint32_t(10 + i), extra_args);
  }
  bool fabric() const { return fabric_; }
  ~Cluster() {
    for (pid_t c : children_) {
      kill(c, SIGKILL);
      waitpid(c, nullptr, 0);
    }
    for (pid_t d : daemons_) {
      if (d <= 0) continue;
      kill(d, SIGKILL);
      waitpid(d, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(rundir_, ec);
  }

  uint32_t addr(int node) const { return uint32_t(10 + node); }
  // The run directory of emulated node `addr` (its own with NICEMU_TEST_FABRIC=1).
  std::string rundir_of(uint32_t addr) const {
    return fabric_ ? rundir_ + "/host" + std::to_string(addr) : rundir_;
  }
  std::string socket(int node) const { return nicemu::ctl::socket_path(rundir_of(addr(node)), addr(node)); }
  pid_t daemon_pid(int node) const { return daemons_.at(size_t(node)); }

  void start_daemon(uint32_t addr, const std::vector<std::string>& extra) {
    std::string bin = daemon_binary();
    pid_t p = fork();
    if (p == 0) {
      std::vector<std::string> args = {bin, "--node", std::to_string(addr), "--rundir", rundir_of(addr),
                                       "--log-level", "warn"};
      if (fabric_)
        args.insert(args.end(), {"--fabric", rundir_ + "/fabric.toml", "--fabric-key", rundir_ + "/fabric.key"});
      // NICEMU_TEST_FABRIC_DATA=ofi: the CDMs move data across hosts over libfabric (ofi-fabric.md).
      if (const char* d = std::getenv("NICEMU_TEST_FABRIC_DATA"); fabric_ && d && *d)
        args.insert(args.end(), {"--fabric-data", d});
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    daemons_.push_back(p);
    std::string sock = nicemu::ctl::socket_path(rundir_of(addr), addr);
    for (int i = 0; i < 2000 && !daemon_answers(sock); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!daemon_answers(sock)) throw std::runtime_error("daemon did not start on " + sock);
  }

  // SIGTERM a daemon and wait for it (clean shutdown).
  int stop_daemon(int node) {
    pid_t d = daemons_.at(size_t(node));
    kill(d, SIGTERM);
    int st = 0;
    waitpid(d, &st, 0);
    daemons_[size_t(node)] = -1;
    return st;
  }

  // Stops the daemon of `node` (SIGTERM, or SIGKILL when `hard`) and starts a new one in
  // its place (same run directory and arguments, a new fabric epoch); returns once the new
  // one answers.
  void restart_daemon(int node, bool hard = false) {
    pid_t d = daemons_.at(size_t(node));
    if (d > 0) {
      kill(d, hard ? SIGKILL : SIGTERM);
      waitpid(d, nullptr, 0);
    }
    daemons_[size_t(node)] = -1;
    start_daemon(addr(node), extra_);
    daemons_[size_t(node)] = daemons_.back();
    daemons_.pop_back();
  }

  // A credential issued on node 0 and granted on the others, for this user.
  Cred credential() {
    nicemu::abi::ctl::Cred req{};
    req.h.op = uint16_t(nicemu::abi::ctl::Op::kCredIssue);
    req.uid = getuid();
    nicemu::abi::ctl::CredReply rep{};
    nicemu::ctl::Connection c;
    if (!c.connect(socket(0)) || !c.call(req, rep) || rep.r.rc != 0) throw std::runtime_error("cred issue failed");
    for (size_t n = 1; n < daemons_.size(); ++n) {
      nicemu::abi::ctl::Cred g = req;
      g.h.op = uint16_t(nicemu::abi::ctl::Op::kCredGrant);
      g.ptag = rep.ptag;
      g.cookie = rep.cookie;
      nicemu::ctl::Connection cn;
      nicemu::abi::ctl::CredReply r2{};
      if (!cn.connect(socket(int(n))) || !cn.call(g, r2) || r2.r.rc != 0) throw std::runtime_error("grant failed");
    }
    return Cred{uint8_t(rep.ptag), rep.cookie};
  }

  nlohmann::json status(int node) {
    nicemu::ctl::Connection c;
    if (!c.connect(socket(node))) return {};
    auto s = c.status_json();
    return s ? nlohmann::json::parse(*s) : nlohmann::json{};
  }

  // Runs `fn` in a child process attached to `node`; its return value is the exit code.
  pid_t spawn(int node, std::function<int()> fn) {
    pid_t p = fork();
    if (p == 0) {
      setenv("NICEMU_NODE", std::to_string(addr(node)).c_str(), 1);
      setenv("NICEMU_RUNDIR", rundir_of(addr(node)).c_str(), 1);
      int rc = 1;
      try {
        rc = fn();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
      }
      _exit(rc);
    }
    children_.push_back(p);
    return p;
  }

  // Waits for a child; returns its exit code (or 128+signal).
  int wait(pid_t p, int timeout_s = 30) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int st = 0;
    while (waitpid(p, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        std::erase(children_, p);
        return 255;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::erase(children_, p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

 private:
  // Key and map for `nodes` daemons on loopback ports (a base from the pid, so concurrent
  // runs do not collide; below the ephemeral range).
  void write_fabric(int nodes) {
    std::random_device rd;
    {
      std::ofstream k(rundir_ + "/fabric.key");
      for (int i = 0; i < 32; ++i) {
        char h[3];
        std::snprintf(h, sizeof h, "%02x", unsigned(rd() & 0xFF));
        k << h;
      }
      k << "\n";
    }
    std::filesystem::permissions(rundir_ + "/fabric.key", std::filesystem::perms::owner_read |
                                                              std::filesystem::perms::owner_write);
    const int base = 21000 + int(getpid() % 1400) * 8;
    std::ofstream m(rundir_ + "/fabric.toml");
    for (int i = 0; i < nodes; ++i) {
      std::filesystem::create_directories(rundir_of(addr(i)));
      m << "[[node]]\nnic = " << addr(i) << "\nhost = \"127.0.0.1\"\nport = " << base + i << "\n\n";
    }
  }

  bool fabric_ = false;
  std::vector<std::string> extra_;
  std::string rundir_;
  std::vector<pid_t> daemons_;
  std::vector<pid_t> children_;
};

// Out-of-band channel between two processes (what PMI/KVS is in applications).
class Oob {
 public:
  Oob() {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds_) != 0) throw std::runtime_error("socketpair");
    // A peer that died must fail the waiting side, not hang it.
    timeval tv{30, 0};
    for (int fd : fds_) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Oob() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  // Side 0 is the parent's first child, side 1 the second.
  template <typename T>
  void send(int side, const T& v) {
    if (::send(fds_[side], &v, sizeof(T), 0) != sizeof(T)) throw std::runtime_error("oob send");
  }
  template <typename T>
  T recv(int side) {
    T v{};
    if (::recv(fds_[side], &v, sizeof(T), 0) != sizeof(T)) throw std::runtime_error("oob recv");
    return v;
  }

 private:
  int fds_[2];
};

// Fixtures (TEST_CASE_FIXTURE) for the usual set-up of a test: a cluster of N nodes, a
// credential valid on every node, and an out-of-band channel.
template <int N>
struct OnNodes {
  Cluster cl{N};
  Cred c = cl.credential();
  Oob oob;
};
using OneNode = OnNodes<1>;
using TwoNodes = OnNodes<2>;

// Child-side check: prints the failed condition and exits the child with 1.
#define CHILD_CHECK(cond)                                                                      \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: child check failed: %s\n", __FILE__, __LINE__, #cond);     \
      _exit(1);                                                                                \
    }                                                                                          \
  } while (0)

// A post descriptor with the fields every test sets; the rest zero.
inline gni_post_descriptor_t make_desc(gni_post_type_t type, uint64_t local, gni_mem_handle_t lh, uint64_t remote,
                                       gni_mem_handle_t rh, uint64_t len,
                                       uint16_t cq_mode = GNI_CQMODE_GLOBAL_EVENT) {
  gni_post_descriptor_t d{};
  d.type = type;
  d.cq_mode = cq_mode;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = local;
  d.local_mem_hndl = lh;
  d.remote_addr = remote;
  d.remote_mem_hndl = rh;
  d.length = len;
  return d;
}

// An FMA PUT of `len` bytes from `local` (no local handle) to `remote` under `h`.
inline gni_post_descriptor_t put_desc(uint64_t local, uint64_t remote, gni_mem_handle_t h, uint64_t len) {
  return make_desc(GNI_POST_FMA_PUT, local, gni_mem_handle_t{}, remote, h, len);
}

// A CQ write of `value` to the CQ behind `h`.
inline gni_post_descriptor_t cqwrite_desc(gni_mem_handle_t h, uint64_t value,
                                          uint16_t cq_mode = GNI_CQMODE_GLOBAL_EVENT) {
  gni_post_descriptor_t d = make_desc(GNI_POST_CQWRITE, 0, gni_mem_handle_t{}, 0, h, 0, cq_mode);
  d.cqwrite_value = value;
  return d;
}

// An AMO `cmd` of `len` bytes on `remote` under `rh` with operands `a` and `b`.
inline gni_post_descriptor_t amo_desc(uint32_t cmd, uint64_t remote, gni_mem_handle_t rh, uint64_t len, uint64_t a,
                                      uint64_t b = 0) {
  gni_post_descriptor_t d = make_desc(GNI_POST_AMO, 0, gni_mem_handle_t{}, remote, rh, len);
  d.amo_cmd = static_cast<gni_fma_cmd_type_t>(cmd);
  d.first_operand = a;
  d.second_operand = b;
  return d;
}

// Posts `d` on `ep` by its type: RDMA, CQ write or FMA.
inline gni_return_t post(gni_ep_handle_t ep, gni_post_descriptor_t& d) {
  return d.type == GNI_POST_RDMA_PUT || d.type == GNI_POST_RDMA_GET ? GNI_PostRdma(ep, &d)
         : d.type == GNI_POST_CQWRITE                               ? GNI_PostCqWrite(ep, &d)
                                                                    : GNI_PostFma(ep, &d);
}

// Child side: waits for the local event of `d` on `cq` and checks it: a post event for
// which GNI_GetCompleted returns `d` itself, successfully exactly when the status is 0.
// Returns the CQE status (0 = ok); the entry itself in `*entry` when asked.
inline uint64_t wait_completion(gni_cq_handle_t cq, gni_post_descriptor_t& d, uint32_t timeout_ms = 10000,
                                gni_cq_entry_t* entry = nullptr) {
  gni_cq_entry_t e = 0;
  gni_return_t rc = GNI_CqWaitEvent(cq, timeout_ms, &e);
  if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) std::fprintf(stderr, "CqWaitEvent: %s\n", gni_err_str[rc]);
  CHILD_CHECK(rc == GNI_RC_SUCCESS || rc == GNI_RC_TRANSACTION_ERROR);
  CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST);
  gni_post_descriptor_t* out = nullptr;
  gni_return_t rc2 = GNI_GetCompleted(cq, e, &out);
  CHILD_CHECK(out == &d);  // the very descriptor that was posted
  CHILD_CHECK((rc2 == GNI_RC_SUCCESS) == (GNI_CQ_GET_STATUS(e) == 0));
  if (entry) *entry = e;
  return GNI_CQ_GET_STATUS(e);
}

// Child side: posts `d` (post) and waits for its completion (wait_completion); returns
// the CQE status.
inline uint64_t post_and_wait(gni_cq_handle_t cq, gni_ep_handle_t ep, gni_post_descriptor_t& d,
                              uint32_t timeout_ms = 10000) {
  const gni_return_t posted = post(ep, d);
  if (posted != GNI_RC_SUCCESS)
    std::fprintf(stderr, "post of type %d, %lu bytes: %s\n", int(d.type), (unsigned long)d.length, gni_err_str[posted]);
  CHILD_CHECK(posted == GNI_RC_SUCCESS);
  return wait_completion(cq, d, timeout_ms);
}

// Child side: registers [addr, addr + len) on `nic` (remote events to `cq`, may be null;
// GNI_MEM_* `flags`); the memory handle.
inline gni_mem_handle_t mem_register(gni_nic_handle_t nic, uint64_t addr, uint64_t len, gni_cq_handle_t cq = nullptr,
                                     uint32_t flags = 0) {
  gni_mem_handle_t h{};
  CHILD_CHECK(GNI_MemRegister(nic, addr, len, cq, flags, uint32_t(-1), &h) == GNI_RC_SUCCESS);
  return h;
}

// Child side: an endpoint on `nic` with local events to `cq` (may be null), bound to
// instance `inst` at NIC address `addr`.
inline gni_ep_handle_t bound_ep(gni_nic_handle_t nic, gni_cq_handle_t cq, uint32_t addr, uint32_t inst) {
  gni_ep_handle_t ep = nullptr;
  CHILD_CHECK(GNI_EpCreate(nic, cq, &ep) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_EpBind(ep, addr, inst) == GNI_RC_SUCCESS);
  return ep;
}

// Attached CDM with a CQ, the usual first steps of every client.
struct Gni {
  gni_cdm_handle_t cdm = nullptr;
  gni_nic_handle_t nic = nullptr;
  gni_cq_handle_t cq = nullptr;      // local events
  gni_cq_handle_t rcq = nullptr;     // remote events
  uint32_t addr = 0;
  uint32_t inst = 0;

  gni_return_t open(uint32_t inst_id, Cred c, uint32_t modes = GNI_CDM_MODE_ERR_NO_KILL) {
    inst = inst_id;
    gni_return_t rc = GNI_CdmCreate(inst_id, c.ptag, c.cookie, modes, &cdm);
    if (rc != GNI_RC_SUCCESS) return rc;
    rc = GNI_CdmAttach(cdm, 0, &addr, &nic);
    if (rc != GNI_RC_SUCCESS) return rc;
    rc = GNI_CqCreate(nic, 256, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &cq);
    if (rc != GNI_RC_SUCCESS) return rc;
    return GNI_CqCreate(nic, 256, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &rcq);
  }
};

// Child side: this side's SMSG attributes for a mailbox of `credits` messages of up to
// `maxsize` bytes (auto-retransmit type) at `offset` in `mbox` (sized to fit), registered on
// g's NIC with remote events to g.rcq.
inline gni_smsg_attr_t smsg_mailbox(Gni& g, std::vector<char>& mbox, uint16_t credits, uint32_t maxsize,
                                    uint32_t offset = 0) {
  gni_smsg_attr_t a{};
  a.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
  a.mbox_maxcredit = credits;
  a.msg_maxsize = maxsize;
  unsigned size = 0;
  CHILD_CHECK(GNI_SmsgBufferSizeNeeded(&a, &size) == GNI_RC_SUCCESS && size > 0);
  mbox.assign(size + offset, 0);
  a.msg_buffer = mbox.data();
  a.buff_size = uint32_t(mbox.size());
  a.mbox_offset = offset;
  CHILD_CHECK(GNI_MemRegister(g.nic, uint64_t(mbox.data()), mbox.size(), g.rcq, 0, uint32_t(-1), &a.mem_hndl) ==
              GNI_RC_SUCCESS);
  return a;
}

// Child side: a Gni opened as CDM instance `inst` with credential `c` (the child fails
// when it cannot be).
inline Gni open_gni(uint32_t inst, Cred c, uint32_t modes = GNI_CDM_MODE_ERR_NO_KILL) {
  Gni g;
  CHILD_CHECK(g.open(inst, c, modes) == GNI_RC_SUCCESS);
  return g;
}

// Parent side: a test with one child on a one-node cluster. Runs `body(cl, c, g)` in a
// child on node 0 attached as CDM instance `inst` with a fresh credential `c`; returns its
// exit code (255 when it outlives `timeout_s`).
inline int in_one_child(uint32_t inst, int timeout_s, const std::function<int(Cluster&, Cred, Gni&)>& body) {
  Cluster cl(1);
  Cred c = cl.credential();
  pid_t p = cl.spawn(0, [&] {
    Gni g = open_gni(inst, c);
    return body(cl, c, g);
  });
  return cl.wait(p, timeout_s);
}

}  // namespace harness
