// Control requests about who may use the NIC: job credentials (issue, grant, revoke), the
// attach of a CDM, the daemon's own hello and shutdown.
#include "nicemu/daemon/control/request.h"

#include <unistd.h>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "nicemu/daemon/cdm/process_mdd.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

void Node::on_hello(Request& q) {
  auto& r = init_reply<ctl::HelloReply>(q.reply, q.h);
  r.nic_addr = cfg_.nic_addr;
  r.device_type = cfg_.device_type;
  r.daemon_pid = static_cast<uint32_t>(getpid());
  r.abi_version = kAbiVersion;
  r.r.rc = rc::kSuccess;
}

void Node::on_attach(Request& q) {
  ctl::Attach req;
  if (!parse(q, req)) return bad(q);
  auto& r = init_reply<ctl::AttachReply>(q.reply, q.h);
  r.r.rc = attach(q.peer, req, r, q.pass_fds);
}

void Node::on_cred(Request& q) {
  ctl::Cred req;
  if (!parse(q, req) || (req.flags & ~ctl::kCredGid) != 0) return bad(q);
  auto& r = init_reply<ctl::CredReply>(q.reply, q.h);
  r.r.rc = handle_cred(q.peer, q.h, req, r);
}

void Node::on_shutdown(Request& q) {
  auto& r = init_reply<PlainReply>(q.reply, q.h);
  if (q.peer.uid != 0 && q.peer.uid != geteuid()) {
    r.r.rc = rc::kPermissionError;
    return;
  }
  r.r.rc = rc::kSuccess;
  shutdown_requested_ = true;
}

bool Node::may_use(const Peer& peer, const Credential& c) const {
  auto it = credentials_.find(c);
  if (it == credentials_.end()) return false;
  const CredOwner& o = it->second;
  return peer.uid == 0 || o.uid == peer.uid || (o.has_gid && o.gid == peer.gid);
}

int Node::refuse_credential(Peer& peer, const char* what, const Credential& c) {
  ++ctr_.credential_refused;
  // Logged, but a client probing in a loop must not fill the log: the first few refusals
  // of a connection, then every 1000th.
  ++peer.refusals;
  if (peer.refusals <= 8 || peer.refusals % 1000 == 0)
    spdlog::warn("nic {}: {} refused: pid {} uid {} gid {} may not use ptag {} cookie {:#x} ({} refusals on this "
                 "connection)",
                 cfg_.nic_addr, what, peer.pid, peer.uid, peer.gid, c.ptag, c.cookie, peer.refusals);
  return rc::kPermissionError;
}

// Issue (the daemon chooses what is 0), grant (a credential of a job issued elsewhere) or
// revoke. Non-root callers act only for themselves: their own uid, and their own gid.
int Node::handle_cred(Peer& peer, const ctl::Header& h, const ctl::Cred& req, ctl::CredReply& r) {
  Op op = static_cast<Op>(h.op);
  const bool with_gid = (req.flags & ctl::kCredGid) != 0;
  if (peer.uid != 0 && (req.uid != peer.uid || (with_gid && req.gid != peer.gid))) {
    ++ctr_.credential_refused;
    spdlog::warn("nic {}: credential request (op {}) by pid {} uid {} for uid {} refused: only root acts for others",
                 cfg_.nic_addr, h.op, peer.pid, peer.uid, req.uid);
    return rc::kPermissionError;
  }
  Credential c{req.ptag, req.cookie};
  if (op == Op::kCredRevoke) {
    auto it = credentials_.find(c);
    if (it == credentials_.end() || (peer.uid != 0 && it->second.uid != peer.uid)) return rc::kNoMatch;
    credentials_.erase(it);
    spdlog::info("nic {}: credential ptag {} revoked by uid {}", cfg_.nic_addr, req.ptag, peer.uid);
    return rc::kSuccess;
  }
  if (op == Op::kCredIssue) {
    // ptag from the user range, cookie with a random pkey (bits 31..16, 128..65406) and
    // random low bits: unpredictable, and unique on this node.
    bool found = false;
    for (int tries = 0; tries < 1000 && !found; ++tries) {
      Credential cand{req.ptag ? req.ptag : 3 + randombytes_uniform(251),
                      req.cookie ? req.cookie : ((128 + randombytes_uniform(65407 - 128)) << 16) |
                                                    randombytes_uniform(0x10000)};
      if (!credentials_.contains(cand)) {
        c = cand;
        found = true;
      }
    }
    if (!found) return rc::kErrorResource;
  }
  if (c.ptag == 0 || c.ptag > 255) return rc::kInvalidParam;
  CredOwner owner{static_cast<uid_t>(req.uid), static_cast<gid_t>(req.gid), with_gid};
  if (auto it = credentials_.find(c); it != credentials_.end() && it->second.uid != owner.uid) {
    // Someone else's: granting it to yourself is exactly the attack this check stops.
    ++ctr_.credential_refused;
    spdlog::warn("nic {}: credential ptag {} held by uid {} cannot be {} to uid {} (requested by pid {} uid {})",
                 cfg_.nic_addr, c.ptag, it->second.uid, op == Op::kCredIssue ? "issued" : "granted", req.uid,
                 peer.pid, peer.uid);
    return rc::kPermissionError;
  }
  credentials_[c] = owner;
  ++ctr_.credentials_issued;
  r.ptag = c.ptag;
  r.cookie = c.cookie;
  spdlog::info("nic {}: credential ptag {} cookie {:#x} {} for uid {}{}", cfg_.nic_addr, c.ptag, c.cookie,
               op == Op::kCredIssue ? "issued" : "granted", req.uid,
               with_gid ? fmt::format(" and gid {}", req.gid) : std::string());
  return rc::kSuccess;
}

int Node::attach(Peer& peer, const ctl::Attach& req, ctl::AttachReply& rep, PassFds& pass_fds) {
  auto refuse = [&](int code, const char* why) {
    ++ctr_.attach_refused;
    spdlog::warn("nic {}: attach of inst {} ptag {} by pid {} uid {} refused: {}", cfg_.nic_addr, req.inst_id,
                 req.ptag, peer.pid, peer.uid, why);
    return code;
  };
  if (peer.attach_id != 0) return refuse(rc::kInvalidState, "connection already attached");
  if (req.abi_version != kAbiVersion) return refuse(rc::kInvalidState, "ABI version mismatch");
  if (static_cast<pid_t>(req.pid) != peer.pid) return refuse(rc::kPermissionError, "pid does not match peer credentials");
  if (req.ptag == 0 || req.ptag > 255) return refuse(rc::kInvalidParam, "invalid ptag");
  Credential c{req.ptag, req.cookie};
  if (!credentials_.contains(c) && cfg_.allow_any_credential) credentials_[c] = CredOwner{peer.uid, 0, false};
  if (!may_use(peer, c)) {
    ++ctr_.attach_refused;
    return refuse_credential(peer, "attach", c);
  }
  if (find_cdm(c, req.inst_id)) return refuse(rc::kInvalidParam, "inst_id already in use in this domain");
  if (!may_take(peer, Resource::kCdms, peer.pid, c)) return refuse(rc::kErrorResource, "CDM limit reached");
  uint32_t domain = 0;
  for (uint32_t i = 0; i < mdh::kMaxDomains && domain == 0; ++i) {
    uint32_t d = (next_domain_ + i) % mdh::kMaxDomains;
    if (d != 0 && domains_[d] == 0) domain = d;
  }
  if (domain == 0) return refuse(rc::kErrorResource, "no memory domain left (4095 CDMs attached to this NIC)");
  std::unique_ptr<CdmRegion> region;
  try {
    region = std::make_unique<CdmRegion>(cfg_.nic_addr, cfg_.device_type, req, peer.pid, next_attach_++,
                                         cfg_.region_size, domain);
  } catch (const std::exception& e) {
    return refuse(rc::kErrorNomem, e.what());
  }
  rep.nic_addr = cfg_.nic_addr;
  rep.device_type = cfg_.device_type;
  rep.attach_id = region->attach_id();
  rep.region_size = region->region_size();
  rep.ro_size = kRoSize;
  rep.mem_domain = domain;
  pass_fds = {region->ro_memfd(), region->heap_memfd()};
  peer.attach_id = region->attach_id();
  domains_[domain] = peer.attach_id;
  next_domain_ = domain + 1;
  spdlog::info("nic {}: pid {} attached inst {} ptag {} (attach {}, memory domain {})", cfg_.nic_addr, peer.pid,
               req.inst_id, req.ptag, peer.attach_id, domain);
  bte_.region_attached(region->ro_memfd(), region->heap_memfd(), region->region_size(), peer.pid);
  if (auto sib = family(peer.pid, c); !sib.empty()) mdd_copy_into(*region, *sib.front());
  // The page is readable by every local user: it names the job's uid and ptag, not its cookie.
  stats_.cdm_attached(peer.attach_id, peer.pid, peer.uid, req.inst_id, req.ptag, 0);
  leases_.add(region->header());
  cdm_index_.add(peer.attach_id, peer.pid, c, req.inst_id);
  cdms_[peer.attach_id] = std::move(region);
  ++ctr_.attaches;
  return rc::kSuccess;
}

}  // namespace nicemu::daemon
