// Two real Linux users on one daemon (run by test_two_users.sh, which creates the users):
// user B, holding user A's ptag/cookie, cannot attach with it, look up A's region or MSGQ
// segment, open A's mailboxes, take or revoke A's credential, reach A's registered memory
// by FMA, CQ write or RDMA, match A's datagrams, or read A's cookie; a second process of A
// can do what B cannot (the positive control); refusals are counted.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <cstring>
#include <filesystem>

#include "harness.h"
#include "nicemu/abi/mem_handle.h"

using namespace harness;
namespace ctl = nicemu::abi::ctl;

namespace {

constexpr size_t kBuf = 4096;
constexpr uint8_t kFill = 0x5A;

struct User {
  uid_t uid;
  gid_t gid;
};

User user_from_env(const char* uid_var, const char* gid_var) {
  const char* u = std::getenv(uid_var);
  const char* g = std::getenv(gid_var);
  if (!u || !g) throw std::runtime_error(std::string(uid_var) + " / " + gid_var + " not set (run test_two_users.sh)");
  return User{uid_t(std::stoul(u)), gid_t(std::stoul(g))};
}

// In a forked child: become `u` for good. Dumpable again afterwards, as a process that
// exec'd a program of that user would be (a credential change clears it), so that only
// the uid decides what other processes may do to it.
void become(User u) {
  if (setgroups(0, nullptr) != 0 || setresgid(u.gid, u.gid, u.gid) != 0 || setresuid(u.uid, u.uid, u.uid) != 0)
    throw std::runtime_error(std::string("dropping privileges: ") + strerror(errno));
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

Cred issue_for(Cluster& cl, User u) {
  ctl::Cred req{};
  req.h.op = uint16_t(ctl::Op::kCredIssue);
  req.uid = u.uid;
  ctl::CredReply rep{};
  nicemu::ctl::Connection c;
  if (!c.connect(cl.socket(0)) || !c.call(req, rep) || rep.r.rc != 0) throw std::runtime_error("cred issue failed");
  return Cred{uint8_t(rep.ptag), rep.cookie};
}

// What the owner (user A) publishes about itself.
struct OwnerInfo {
  pid_t pid;
  uint32_t addr, inst;
  uint64_t buf;
  gni_mem_handle_t mdh;
  uint64_t dgram_id;
};

// PeerLookup names the target by the memory domain of a handle it issued.
int32_t peer_lookup(const std::string& sock, uint32_t addr, const gni_mem_handle_t& mdh, Cred c, int& fd) {
  nicemu::ctl::Connection conn;
  if (!conn.connect(sock)) return -1;
  ctl::PeerLookup req{};
  req.h.op = uint16_t(ctl::Op::kPeerLookup);
  req.nic_addr = addr;
  req.mem_domain = nicemu::abi::mdh::domain_of(mdh.qword1);
  req.ptag = c.ptag;
  req.cookie = c.cookie;
  ctl::PeerLookupReply rep{};
  fd = -1;
  if (!conn.call(req, rep, &fd)) return -1;
  return rep.r.rc;
}

int32_t cred_request(const std::string& sock, ctl::Op op, uid_t uid, Cred c) {
  nicemu::ctl::Connection conn;
  if (!conn.connect(sock)) return -1;
  ctl::Cred req{};
  req.h.op = uint16_t(op);
  req.uid = uid;
  req.ptag = c.ptag;
  req.cookie = c.cookie;
  ctl::CredReply rep{};
  if (!conn.call(req, rep)) return -1;
  return rep.r.rc;
}

// A post that the NIC must refuse: either GNI_Post* fails, or its completion carries an error.
bool refused(gni_return_t post_rc, gni_cq_handle_t cq) {
  if (post_rc != GNI_RC_SUCCESS) return true;
  gni_cq_entry_t e = 0;
  gni_return_t rc = GNI_CqWaitEvent(cq, 5000, &e);
  if (rc == GNI_RC_TIMEOUT) return false;  // no completion at all is a hang, not a refusal
  gni_post_descriptor_t* d = nullptr;
  gni_return_t rc2 = GNI_GetCompleted(cq, e, &d);
  return rc == GNI_RC_TRANSACTION_ERROR || GNI_CQ_GET_STATUS(e) != 0 || rc2 != GNI_RC_SUCCESS;
}

gni_post_descriptor_t desc(gni_post_type_t type, uint64_t local, gni_mem_handle_t lh, const OwnerInfo& t) {
  gni_post_descriptor_t d{};
  d.type = type;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT;  // an event at A would show
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = local;
  d.local_mem_hndl = lh;
  d.remote_addr = t.buf;
  d.remote_mem_hndl = t.mdh;
  d.length = 64;
  return d;
}

// User A's job: a registration with a remote-event CQ and a pending wildcard datagram; it
// waits until the others are done, then checks that only its own peer wrote.
int owner(Cluster& cl, User a, Cred ca, int info_fd, int go_fd) {
  become(a);
  Gni g = open_gni(1, ca);
  static uint8_t buf[kBuf];
  std::memset(buf, kFill, sizeof buf);
  OwnerInfo info{getpid(), g.addr, 1, uint64_t(buf), {}, 77};
  info.mdh = mem_register(g.nic, info.buf, kBuf, g.rcq, GNI_MEM_READWRITE);
  gni_ep_handle_t any;
  CHILD_CHECK(GNI_EpCreate(g.nic, g.cq, &any) == GNI_RC_SUCCESS);
  static uint8_t in[16], out[16];
  CHILD_CHECK(GNI_EpPostDataWId(any, in, sizeof in, out, sizeof out, info.dgram_id) == GNI_RC_SUCCESS);
  CHILD_CHECK(write(info_fd, &info, sizeof info) == sizeof info);
  char go;
  CHILD_CHECK(read(go_fd, &go, 1) == 1);
  (void)cl;
  // The positive control (A's second process) PUT 0xA2 into bytes [0, 64); nothing else changed.
  for (size_t i = 0; i < 64; ++i) CHILD_CHECK(buf[i] == 0xA2);
  for (size_t i = 64; i < kBuf; ++i) CHILD_CHECK(buf[i] == kFill);
  // B's directed datagram never matched A's wildcard post.
  gni_post_state_t st;
  uint32_t ra = 0, ri = 0;
  CHILD_CHECK(GNI_EpPostDataTestById(any, info.dgram_id, &st, &ra, &ri) == GNI_RC_SUCCESS);
  CHILD_CHECK(st == GNI_POST_PENDING);
  // Exactly one remote event: the control's PUT. None from B (no CQ write, no RDMA).
  gni_cq_entry_t e;
  int events = 0;
  while (GNI_CqGetEvent(g.rcq, &e) == GNI_RC_SUCCESS) ++events;
  CHILD_CHECK(events == 1);
  return 0;
}

// A's second process: the same credential, the same uid, so everything B tries works here.
int control(Cluster& cl, User a, Cred ca, const OwnerInfo& t) {
  become(a);
  int fd = -1;
  CHILD_CHECK(peer_lookup(cl.socket(0), t.addr, t.mdh, ca, fd) == GNI_RC_SUCCESS && fd >= 0);
  close(fd);
  Gni g = open_gni(2, ca);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, t.inst);
  static uint8_t src[64];
  std::memset(src, 0xA2, sizeof src);
  gni_post_descriptor_t d = desc(GNI_POST_FMA_PUT, uint64_t(src), {}, t);
  CHILD_CHECK(GNI_PostFma(ep, &d) == GNI_RC_SUCCESS);
  gni_cq_entry_t e = 0;
  CHILD_CHECK(GNI_CqWaitEvent(g.cq, 5000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_STATUS(e) == 0);
  return 0;
}

// User B, who learnt A's ptag and cookie (they are not secrets: the uid is the key).
int intruder(Cluster& cl, User a, User b, Cred ca, Cred cb, const OwnerInfo& t) {
  become(b);
  const std::string sock = cl.socket(0);

  // Attach with A's credential.
  {
    gni_cdm_handle_t cdm;
    gni_nic_handle_t nic;
    uint32_t addr;
    CHILD_CHECK(GNI_CdmCreate(9, ca.ptag, ca.cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmAttach(cdm, 0, &addr, &nic) == GNI_RC_PERMISSION_ERROR);
    GNI_CdmDestroy(cdm);
  }
  // A's region: not with A's credential, not with B's own.
  int fd = -1;
  CHILD_CHECK(peer_lookup(sock, t.addr, t.mdh, ca, fd) == GNI_RC_PERMISSION_ERROR && fd < 0);
  CHILD_CHECK(peer_lookup(sock, t.addr, t.mdh, cb, fd) == GNI_RC_NO_MATCH && fd < 0);
  // A's mailboxes, A's MSGQ segment.
  {
    nicemu::ctl::Connection conn;
    CHILD_CHECK(conn.connect(sock));
    ctl::MboxOpen m{};
    m.h.op = uint16_t(ctl::Op::kMboxOpen);
    m.ptag = ca.ptag;
    m.cookie = ca.cookie;
    m.qword1 = t.mdh.qword1;
    m.qword2 = t.mdh.qword2;
    m.msg_buffer = t.buf;
    m.buff_size = kBuf;
    m.credits = 4;
    m.max_size = 64;
    ctl::MboxOpenReply mr{};
    CHILD_CHECK(conn.call(m, mr) && mr.r.rc == GNI_RC_PERMISSION_ERROR);
    ctl::MsgqLookup q{};
    q.h.op = uint16_t(ctl::Op::kMsgqLookup);
    q.nic_addr = t.addr;
    q.ptag = ca.ptag;
    q.cookie = ca.cookie;
    ctl::MsgqLookupReply qr{};
    int qfd = -1;
    CHILD_CHECK(conn.call(q, qr, &qfd) && qr.r.rc == GNI_RC_PERMISSION_ERROR && qfd < 0);
  }
  // A's credential: not grantable to B, not revocable by B, nothing issued in A's name.
  CHILD_CHECK(cred_request(sock, ctl::Op::kCredGrant, b.uid, ca) == GNI_RC_PERMISSION_ERROR);
  CHILD_CHECK(cred_request(sock, ctl::Op::kCredRevoke, b.uid, ca) == GNI_RC_NO_MATCH);
  CHILD_CHECK(cred_request(sock, ctl::Op::kCredIssue, a.uid, Cred{}) == GNI_RC_PERMISSION_ERROR);
  // The status shows B A's uid and ptag, not A's cookie.
  {
    nlohmann::json s = cl.status(0);
    bool seen_a = false;
    for (const auto& c : s["credentials"]) {
      if (c["ptag"] == ca.ptag && c["uid"] == a.uid) {
        seen_a = true;
        CHILD_CHECK(c["cookie"].is_null());
      }
      if (c["ptag"] == cb.ptag && c["uid"] == b.uid) CHILD_CHECK(c["cookie"] == cb.cookie);
    }
    CHILD_CHECK(seen_a);
    for (const auto& d : s["cdms"])
      if (d["ptag"] == ca.ptag) CHILD_CHECK(d["cookie"].is_null());
  }
  // The data path from B's own domain: FMA PUT/GET, CQ write and RDMA at A's memory.
  Gni g = open_gni(1, cb);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, t.inst);  // binding is local; posts are checked
  {
    static uint8_t src[kBuf];
    std::memset(src, 0xBB, sizeof src);
    gni_mem_handle_t sh;
    sh = mem_register(g.nic, uint64_t(src), kBuf, nullptr, GNI_MEM_READWRITE);
    gni_post_descriptor_t put = desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t);
    CHILD_CHECK(refused(GNI_PostFma(ep, &put), g.cq));
    gni_post_descriptor_t get = desc(GNI_POST_FMA_GET, uint64_t(src), sh, t);
    CHILD_CHECK(refused(GNI_PostFma(ep, &get), g.cq));
    for (size_t i = 0; i < kBuf; ++i) CHILD_CHECK(src[i] == 0xBB);  // nothing of A's read
    gni_post_descriptor_t cqw{};
    cqw.type = GNI_POST_CQWRITE;
    cqw.cq_mode = GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT;
    cqw.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
    cqw.cqwrite_value = 0x1234;
    cqw.remote_mem_hndl = t.mdh;
    CHILD_CHECK(refused(GNI_PostCqWrite(ep, &cqw), g.cq));
    gni_post_descriptor_t rdma = desc(GNI_POST_RDMA_PUT, uint64_t(src), sh, t);
    CHILD_CHECK(refused(GNI_PostRdma(ep, &rdma), g.cq));
  }
  // A directed datagram at A's instance, from B's domain: it must not match A's wildcard.
  gni_ep_handle_t dep = bound_ep(g.nic, g.cq, t.addr, t.inst);
  {
    static uint8_t din[16], dout[16];
    CHILD_CHECK(GNI_EpPostDataWId(dep, din, sizeof din, dout, sizeof dout, 5) == GNI_RC_SUCCESS);
    gni_post_state_t st = GNI_POST_PENDING;
    uint32_t ra, ri;
    // Give the matcher time; a match would complete the post.
    CHILD_CHECK(GNI_EpPostDataWaitById(dep, 5, 300, &st, &ra, &ri) == GNI_RC_TIMEOUT);
    CHILD_CHECK(st != GNI_POST_COMPLETED);
    CHILD_CHECK(GNI_EpPostDataCancelById(dep, 5) == GNI_RC_SUCCESS);
  }
  // The kernel's own checks between users: A's descriptors and memory.
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/" + std::to_string(t.pid) + "/fd", ec);
  CHILD_CHECK(ec == std::errc::permission_denied);
  uint8_t peek[8];
  iovec l{peek, sizeof peek}, r{reinterpret_cast<void*>(t.buf), sizeof peek};
  CHILD_CHECK(process_vm_readv(t.pid, &l, 1, &r, 1, 0) < 0 && errno == EPERM);
  return 0;
}

uint64_t counter(const nlohmann::json& s, const char* name) { return s["counters"][name].get<uint64_t>(); }

}  // namespace

TEST_CASE("user B cannot reach user A's job, with or without A's credential") {
  User a = user_from_env("TRUST_UID_A", "TRUST_GID_A");
  User b = user_from_env("TRUST_UID_B", "TRUST_GID_B");
  Cluster cl(1);
  // The users must reach the socket; what each may do is then the daemon's decision.
  REQUIRE(chmod(std::filesystem::path(cl.socket(0)).parent_path().c_str(), 0755) == 0);
  Cred ca = issue_for(cl, a);
  Cred cb = issue_for(cl, b);
  REQUIRE(!(ca.ptag == cb.ptag && ca.cookie == cb.cookie));
  uint64_t refused_before = counter(cl.status(0), "credential_refused");

  int info_pipe[2], go_pipe[2];
  REQUIRE(pipe(info_pipe) == 0);
  REQUIRE(pipe(go_pipe) == 0);
  pid_t own = cl.spawn(0, [&] { return owner(cl, a, ca, info_pipe[1], go_pipe[0]); });
  OwnerInfo t{};
  REQUIRE(read(info_pipe[0], &t, sizeof t) == sizeof t);

  pid_t bad = cl.spawn(0, [&] { return intruder(cl, a, b, ca, cb, t); });
  CHECK(cl.wait(bad) == 0);
  pid_t good = cl.spawn(0, [&] { return control(cl, a, ca, t); });
  CHECK(cl.wait(good) == 0);
  REQUIRE(write(go_pipe[1], "g", 1) == 1);
  CHECK(cl.wait(own) == 0);

  // attach, two lookups and a mailbox open with A's credential, a grant and an issue: 6.
  uint64_t refused_after = counter(cl.status(0), "credential_refused");
  CHECK(refused_after - refused_before >= 6);
  for (int fd : {info_pipe[0], info_pipe[1], go_pipe[0], go_pipe[1]}) close(fd);
}
