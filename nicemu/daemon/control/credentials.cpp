// Control requests about who may use the NIC: job credentials (issue, grant, revoke), DRC
// credentials (libdrc: acquire, grant, revoke, access, release), the attach of a CDM, the
// daemon's own hello and shutdown.
#include "nicemu/daemon/control/credentials.h"

#include <unistd.h>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/common/wlm_job.h"
#include "nicemu/daemon/bte/bte_engine.h"
#include "nicemu/daemon/cdm/process_mdd.h"
#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/handlers.h"
#include "nicemu/daemon/control/quotas.h"
#include "nicemu/daemon/control/request.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

void control::hello(Request& q, const NicInfo& nic) {
  auto& r = init_reply<ctl::HelloReply>(q.reply, q.h);
  r.nic_addr = nic.nic_addr;
  r.device_type = nic.device_type;
  r.daemon_pid = static_cast<uint32_t>(getpid());
  r.abi_version = kAbiVersion;
  r.r.rc = rc::kSuccess;
}

void control::cred(Request& q, Credentials& creds, Counters& ctr) {
  ctl::Cred req;
  if (!parse(q, req) || (req.flags & ~ctl::kCredGid) != 0) return bad(q, ctr);
  auto& r = init_reply<ctl::CredReply>(q.reply, q.h);
  r.r.rc = creds.cred(q.peer, q.h, req, r);
  if (r.r.rc == rc::kSuccess) creds.save();
}

void control::drc(Request& q, Credentials& creds, Counters& ctr) {
  ctl::Drc req;
  if (!parse(q, req) || (req.flags & ~(ctl::kDrcFlex | ctl::kDrcCopy)) != 0) return bad(q, ctr);
  auto& r = init_reply<ctl::DrcReply>(q.reply, q.h);
  r.r.rc = creds.drc(q.peer, req, r);
  if (r.r.rc == rc::kSuccess) creds.save();
  if (r.r.rc == rc::kSuccess && !(req.flags & ctl::kDrcCopy)) creds.send_drc_sync(q.peer, req, r);
}

void Credentials::send_drc_sync(const Peer& peer, const ctl::Drc& req, const ctl::DrcReply& r) {
  using ctl::DrcAction;
  const auto action = static_cast<DrcAction>(req.action);
  if (action != DrcAction::kAcquire && action != DrcAction::kGrant && action != DrcAction::kRevoke &&
      action != DrcAction::kRelease)
    return;
  ctl::DrcSync m{};
  m.h = ctl::make_header<ctl::DrcSync>(Op::kDrcSync, 0);
  m.action = req.action;
  m.id = action == DrcAction::kAcquire ? r.id : req.id;
  m.kind = req.kind;
  m.value = req.value;
  m.ptag = action == DrcAction::kAcquire ? r.ptag : 0;
  m.cookie = action == DrcAction::kAcquire ? r.cookie : 0;
  m.flags = req.flags & ctl::kDrcFlex;
  m.uid = static_cast<uint32_t>(peer.uid);
  // In order on each channel, so a grant never arrives before its acquire. A host that is
  // down now misses the change (logged): DRC state is not replayed to a daemon that returns.
  for (uint32_t node : port_.remote_nodes())
    if (!port_.send(node, &m, sizeof m))
      spdlog::warn("nic {}: DRC credential {} change (action {}) not sent to NIC address {}: its daemon is not "
                   "reachable",
                   nic_addr_, m.id, m.action, node);
}

const char* Credentials::receive(uint32_t from, const ctl::Header&, const uint8_t* msg, size_t len) {
  ctl::DrcSync m;
  if (len != sizeof m) return "DRC change of the wrong size";
  std::memcpy(&m, msg, sizeof m);
  using ctl::DrcAction;
  const auto action = static_cast<DrcAction>(m.action);
  if (action != DrcAction::kAcquire && action != DrcAction::kGrant && action != DrcAction::kRevoke &&
      action != DrcAction::kRelease)
    return "DRC change with an unknown action";
  if (action == DrcAction::kAcquire && (m.id == 0 || m.ptag == 0 || m.cookie == 0))
    return "DRC acquire without its credential";
  // The requester as the other host's daemon saw it (SO_PEERCRED there): the fabric key
  // vouches for that daemon.
  Peer remote{};
  remote.uid = static_cast<uid_t>(m.uid);
  remote.gid = static_cast<gid_t>(-1);
  ctl::Drc req{};
  req.action = m.action;
  req.id = m.id;
  req.kind = m.kind;
  req.value = m.value;
  req.ptag = m.ptag;
  req.cookie = m.cookie;
  req.flags = m.flags;
  ctl::DrcReply r{};
  int code = drc(remote, req, r);
  if (code == rc::kSuccess) save();
  // A repeated grant or a revoke/release of what is already gone changes nothing.
  if (code != rc::kSuccess && !(code == rc::kInvalidState && action == DrcAction::kGrant) &&
      !(code == rc::kNoMatch && action != DrcAction::kAcquire))
    spdlog::warn("nic {}: DRC credential {} change (action {}) from NIC address {} for uid {} not applied: rc {}",
                 nic_addr_, m.id, m.action, from, m.uid, code);
  return nullptr;
}

void Credentials::load() {
  if (cred_path_.empty()) return;
  std::string text, why;
  switch (credential_file::read(cred_path_, text, why)) {
    case credential_file::ReadResult::kAbsent: return;
    case credential_file::ReadResult::kRejected: break;
    case credential_file::ReadResult::kOk:
      why = credential_file::decode(text, nic_addr_, credentials_, drc_);
      if (why.empty()) {
        saved_ = text;
        spdlog::info("nic {}: {} credential(s), {} of them DRC, restored from {}", nic_addr_,
                     credentials_.size(), drc_.size(), cred_path_);
        return;
      }
      why = cred_path_ + ": " + why;
      break;
  }
  spdlog::error("nic {}: credential file ignored, starting with no credentials ({}); the next credential change "
                "replaces it",
                nic_addr_, why);
}

void Credentials::save() {
  if (cred_path_.empty()) return;
  std::string text;
  if (!credentials_.empty()) text = credential_file::encode(nic_addr_, credentials_, drc_);
  if (text == saved_) return;
  if (text.empty()) {
    if (::unlink(cred_path_.c_str()) != 0 && errno != ENOENT) {
      spdlog::error("nic {}: cannot remove {}: {}", nic_addr_, cred_path_, std::strerror(errno));
      return;
    }
  } else if (std::string why; !credential_file::write(cred_path_, text, why)) {
    // The table in memory is right; a restart would lose what changed since the last write.
    spdlog::error("nic {}: credential table not saved ({}); a restart would forget the last change", nic_addr_,
                  why);
    return;
  }
  saved_ = std::move(text);
}

void control::shutdown(Request& q, bool& requested) {
  auto& r = init_reply<PlainReply>(q.reply, q.h);
  if (q.peer.uid != 0 && q.peer.uid != geteuid()) {
    r.r.rc = rc::kPermissionError;
    return;
  }
  r.r.rc = rc::kSuccess;
  requested = true;
}

bool Credentials::may_use(const Peer& peer, const Credential& c) const {
  auto it = credentials_.find(c);
  if (it == credentials_.end()) return false;
  const CredOwner& o = it->second;
  if (peer.uid == 0 || o.uid == peer.uid || (o.has_gid && o.gid == peer.gid)) return true;
  if (o.drc_id == 0) return false;
  auto d = drc_.find(o.drc_id);
  return d != drc_.end() && drc_admits(peer, d->second);
}

void Credentials::admit(const Credential& c, uid_t uid) {
  credentials_[c] = CredOwner{uid, 0, false};
  save();
}

nlohmann::json Credentials::shown_cookie(const Peer* viewer, const Credential& c) const {
  // Another user's cookie is not shown: it would not let the viewer in (the uid check
  // does not depend on secrecy), but it is the job's business, as on a Cray.
  if (!viewer || may_use(*viewer, c)) return c.cookie;
  return nullptr;
}

nlohmann::json Credentials::status(const Peer* viewer) const {
  using nlohmann::json;
  json creds = json::array();
  for (const auto& [c, o] : credentials_) {
    json e{{"ptag", c.ptag}, {"cookie", shown_cookie(viewer, c)}, {"uid", o.uid}};
    if (o.has_gid) e["gid"] = o.gid;
    if (auto d = drc_.find(o.drc_id); o.drc_id != 0 && d != drc_.end()) {
      json grants = json::array();
      for (const auto& [kind, value] : d->second.grants)
        grants.push_back(std::string(drc_grant_name(kind)) + ":" + std::to_string(value));
      e["drc"] = {{"id", o.drc_id}, {"flex", d->second.flex}, {"grants", grants}};
    }
    creds.push_back(e);
  }
  return creds;
}

namespace {

// A credential not held on this node; a part given (non-zero) is kept. The ptag from the user
// range, the cookie a random pkey (bits 31..16, 128..65406) over random low bits: neither
// predictable nor in use. nullopt if every draw collided.
std::optional<Credential> fresh_credential(const std::map<Credential, CredOwner>& held, uint32_t ptag,
                                           uint32_t cookie) {
  for (int tries = 0; tries < 1000; ++tries) {
    Credential c{ptag ? ptag : 3 + randombytes_uniform(251),
                 cookie ? cookie : ((128 + randombytes_uniform(65407 - 128)) << 16) | randombytes_uniform(0x10000)};
    if (!held.contains(c)) return c;
  }
  return std::nullopt;
}

// Supplementary groups of `pid` (its "Groups:" line); empty if it is gone.
std::vector<gid_t> groups_of(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  std::vector<gid_t> out;
  for (std::string line; std::getline(st, line);)
    if (line.rfind("Groups:", 0) == 0) {
      std::istringstream in(line.substr(7));
      for (unsigned long g; in >> g;) out.push_back(static_cast<gid_t>(g));
    }
  return out;
}

}  // namespace

bool Credentials::drc_admits(const Peer& peer, const DrcCredential& d) const {
  using ctl::DrcGrant;
  std::optional<std::vector<gid_t>> groups;
  std::optional<std::optional<wlm::JobId>> job;
  for (const auto& [kind, value] : d.grants) {
    switch (static_cast<DrcGrant>(kind)) {
      case DrcGrant::kUid:
        if (peer.uid == value) return true;
        break;
      case DrcGrant::kGid:
        if (peer.gid == value) return true;
        if (!groups) groups = groups_of(peer.pid);
        for (gid_t g : *groups)
          if (g == value) return true;
        break;
      case DrcGrant::kWlm:
        // Read once, and only when a job grant is there to match (wlm_job.h: the id is what
        // the process claims, docs/security.md).
        if (!job) job = wlm::job_of(peer.pid);
        if (*job && (*job)->id == value) return true;
        break;
    }
  }
  return false;
}

// libdrc's requests. Errors map onto DRC codes in libdrc: kNoMatch = no such credential,
// kPermissionError = not the owner / not granted, kInvalidState = already granted.
int Credentials::drc(Peer& peer, const ctl::Drc& req, ctl::DrcReply& r) {
  using ctl::DrcAction;
  const auto action = static_cast<DrcAction>(req.action);
  auto owner = [&](const DrcCredential& d) { return credentials_.at(d.cred).uid; };
  auto owned = [&](const DrcCredential& d) { return peer.uid == 0 || peer.uid == owner(d); };
  if (action == DrcAction::kLookup) {
    for (const auto& [c, o] : credentials_)
      if (c.cookie == req.cookie && may_use(peer, c)) {
        r.ptag = c.ptag;
        r.cookie = c.cookie;
        return rc::kSuccess;
      }
    return rc::kNoMatch;
  }
  if (action == DrcAction::kAcquire) {
    DrcCredential d;
    d.flex = (req.flags & ctl::kDrcFlex) != 0;
    uint32_t id = req.id;
    if (req.id == 0 && req.ptag == 0 && req.cookie == 0) {
      // Drawn as a job credential is (cred), with an id that is not in use here.
      auto c = fresh_credential(credentials_, 0, 0);
      for (int tries = 0; tries < 1000 && (id == 0 || drc_.contains(id)); ++tries)
        id = 1 + randombytes_uniform(0x7FFFFFFF);
      if (!c || id == 0 || drc_.contains(id)) return rc::kErrorResource;
      d.cred = *c;
    } else {
      if (req.id == 0 || req.ptag == 0 || req.ptag > 255 || req.cookie == 0) return rc::kInvalidParam;
      d.cred = Credential{req.ptag, req.cookie};
      if (auto it = drc_.find(req.id); it != drc_.end()) {
        // libdrc copying a credential onto a node that has it already: fine if it is the same.
        if (it->second.cred == d.cred && owned(it->second)) {
          r.id = req.id;
          r.ptag = d.cred.ptag;
          r.cookie = d.cred.cookie;
          return rc::kSuccess;
        }
        return rc::kPermissionError;
      }
      if (credentials_.contains(d.cred)) return rc::kPermissionError;
    }
    credentials_[d.cred] = CredOwner{peer.uid, 0, false, id};
    drc_[id] = d;
    ++ctr_.credentials_issued;
    r.id = id;
    r.ptag = d.cred.ptag;
    r.cookie = d.cred.cookie;
    spdlog::info("nic {}: DRC credential {} (ptag {}) acquired by uid {}", nic_addr_, id, d.cred.ptag, peer.uid);
    return rc::kSuccess;
  }
  auto it = drc_.find(req.id);
  if (it == drc_.end()) return rc::kNoMatch;
  DrcCredential& d = it->second;
  if (action == DrcAction::kAccess) {
    if (!may_use(peer, d.cred)) return refuse(peer, "DRC access", d.cred);
    r.id = req.id;
    r.ptag = d.cred.ptag;
    r.cookie = d.cred.cookie;
    return rc::kSuccess;
  }
  if (!owned(d)) {
    ++ctr_.credential_refused;
    spdlog::warn("nic {}: DRC request {} on credential {} by uid {} refused: owned by uid {}", nic_addr_,
                 req.action, req.id, peer.uid, owner(d));
    return rc::kPermissionError;
  }
  if (action == DrcAction::kRelease) {
    // New attaches stop here; attached CDMs keep their domain until they detach, as a
    // NIC keeps a ptag's state until its last user is gone.
    credentials_.erase(d.cred);
    spdlog::info("nic {}: DRC credential {} released by uid {}", nic_addr_, req.id, peer.uid);
    drc_.erase(it);
    return rc::kSuccess;
  }
  if (action != DrcAction::kGrant && action != DrcAction::kRevoke) return rc::kInvalidParam;
  if (req.kind < static_cast<uint32_t>(ctl::DrcGrant::kUid) || req.kind > static_cast<uint32_t>(ctl::DrcGrant::kWlm))
    return rc::kInvalidParam;
  std::pair<uint32_t, uint32_t> g{req.kind, req.value};
  auto at = std::find(d.grants.begin(), d.grants.end(), g);
  if (action == DrcAction::kGrant) {
    if (at != d.grants.end()) return rc::kInvalidState;
    d.grants.push_back(g);
  } else {
    if (at == d.grants.end()) return rc::kNoMatch;
    d.grants.erase(at);
  }
  spdlog::info("nic {}: DRC credential {} {} {} {}", nic_addr_, req.id,
               action == DrcAction::kGrant ? "granted to" : "revoked from", drc_grant_name(req.kind), req.value);
  return rc::kSuccess;
}

int Credentials::refuse(Peer& peer, const char* what, const Credential& c) {
  ++ctr_.credential_refused;
  // Logged, but a client probing in a loop must not fill the log: the first few refusals
  // of a connection, then every 1000th.
  ++peer.refusals;
  if (peer.refusals <= 8 || peer.refusals % 1000 == 0)
    spdlog::warn("nic {}: {} refused: pid {} uid {} gid {} may not use ptag {} cookie {:#x} ({} refusals on this "
                 "connection)",
                 nic_addr_, what, peer.pid, peer.uid, peer.gid, c.ptag, c.cookie, peer.refusals);
  return rc::kPermissionError;
}

// Issue (the daemon chooses what is 0), grant (a credential of a job issued elsewhere) or
// revoke. Non-root callers act only for themselves: their own uid, and their own gid.
int Credentials::cred(Peer& peer, const ctl::Header& h, const ctl::Cred& req, ctl::CredReply& r) {
  Op op = static_cast<Op>(h.op);
  const bool with_gid = (req.flags & ctl::kCredGid) != 0;
  if (peer.uid != 0 && (req.uid != peer.uid || (with_gid && req.gid != peer.gid))) {
    ++ctr_.credential_refused;
    spdlog::warn("nic {}: credential request (op {}) by pid {} uid {} for uid {} refused: only root acts for others",
                 nic_addr_, h.op, peer.pid, peer.uid, req.uid);
    return rc::kPermissionError;
  }
  Credential c{req.ptag, req.cookie};
  if (op == Op::kCredRevoke) {
    auto it = credentials_.find(c);
    if (it == credentials_.end() || (peer.uid != 0 && it->second.uid != peer.uid)) return rc::kNoMatch;
    // A DRC credential goes with its job credential: a drc_ entry left behind would answer
    // a re-acquire without installing the credential, and its release would erase the
    // credential of whoever was issued it next.
    drc_.erase(it->second.drc_id);
    credentials_.erase(it);
    spdlog::info("nic {}: credential ptag {} revoked by uid {}", nic_addr_, req.ptag, peer.uid);
    return rc::kSuccess;
  }
  if (op == Op::kCredIssue) {
    auto fresh = fresh_credential(credentials_, req.ptag, req.cookie);
    if (!fresh) return rc::kErrorResource;
    c = *fresh;
  }
  if (c.ptag == 0 || c.ptag > 255) return rc::kInvalidParam;
  CredOwner owner{static_cast<uid_t>(req.uid), static_cast<gid_t>(req.gid), with_gid};
  if (auto it = credentials_.find(c); it != credentials_.end() && it->second.uid != owner.uid) {
    // Someone else's: granting it to yourself is exactly the attack this check stops.
    ++ctr_.credential_refused;
    spdlog::warn("nic {}: credential ptag {} held by uid {} cannot be {} to uid {} (requested by pid {} uid {})",
                 nic_addr_, c.ptag, it->second.uid, op == Op::kCredIssue ? "issued" : "granted", req.uid,
                 peer.pid, peer.uid);
    return rc::kPermissionError;
  }
  if (auto it = credentials_.find(c); it != credentials_.end()) owner.drc_id = it->second.drc_id;
  credentials_[c] = owner;
  ++ctr_.credentials_issued;
  r.ptag = c.ptag;
  r.cookie = c.cookie;
  spdlog::info("nic {}: credential ptag {} cookie {:#x} {} for uid {}{}", nic_addr_, c.ptag, c.cookie,
               op == Op::kCredIssue ? "issued" : "granted", req.uid,
               with_gid ? fmt::format(" and gid {}", req.gid) : std::string());
  return rc::kSuccess;
}

namespace {

int attach_cdm(Peer& peer, const ctl::Attach& req, ctl::AttachReply& rep, PassFds& pass_fds, const NicInfo& nic,
               Credentials& creds, CdmTable& cdms, Quotas& quotas, BteEngine& bte, StatsPage& stats, Counters& ctr) {
  auto refuse = [&](int code, const char* why) {
    ++ctr.attach_refused;
    spdlog::warn("nic {}: attach of inst {} ptag {} by pid {} uid {} refused: {}", nic.nic_addr, req.inst_id,
                 req.ptag, peer.pid, peer.uid, why);
    return code;
  };
  if (peer.attach_id != 0) return refuse(rc::kInvalidState, "connection already attached");
  if (req.abi_version != kAbiVersion) return refuse(rc::kInvalidState, "ABI version mismatch");
  if (static_cast<pid_t>(req.pid) != peer.pid) return refuse(rc::kPermissionError, "pid does not match peer credentials");
  if (req.ptag == 0 || req.ptag > 255) return refuse(rc::kInvalidParam, "invalid ptag");
  Credential c{req.ptag, req.cookie};
  if (!creds.known(c) && nic.allow_any_credential) creds.admit(c, peer.uid);
  if (!creds.may_use(peer, c)) {
    ++ctr.attach_refused;
    return creds.refuse(peer, "attach", c);
  }
  if (cdms.find(c, req.inst_id)) return refuse(rc::kInvalidParam, "inst_id already in use in this domain");
  if (!quotas.may_take(peer, Resource::kCdms, peer.pid, c)) return refuse(rc::kErrorResource, "CDM limit reached");
  const uint32_t domain = cdms.free_domain();
  if (domain == 0) return refuse(rc::kErrorResource, "no memory domain left (4095 CDMs attached to this NIC)");
  std::unique_ptr<CdmRegion> region;
  try {
    // The process's MDD table of this credential: its other CDMs' (process_mdd.h), or new.
    const std::vector<CdmRegion*> sib = cdms.family(peer.pid, c);
    auto mdd = sib.empty() ? std::make_shared<ProcessMdd>(peer.pid) : sib.front()->mdd_ptr();
    region = std::make_unique<CdmRegion>(nic.nic_addr, nic.device_type, req, peer.pid, cdms.next_attach_id(),
                                         nic.region_size, domain, std::move(mdd));
  } catch (const std::exception& e) {
    return refuse(rc::kErrorNomem, e.what());
  }
  rep.nic_addr = nic.nic_addr;
  rep.device_type = nic.device_type;
  rep.attach_id = region->attach_id();
  rep.region_size = region->region_size();
  rep.ro_size = kRoSize;
  rep.mem_domain = domain;
  pass_fds = {region->ro_memfd(), region->mdd_memfd(), region->heap_memfd()};
  peer.attach_id = region->attach_id();
  spdlog::info("nic {}: pid {} attached inst {} ptag {} (attach {}, memory domain {})", nic.nic_addr, peer.pid,
               req.inst_id, req.ptag, peer.attach_id, domain);
  bte.region_attached(region->ro_memfd(), region->mdd_memfd(), region->heap_memfd(), region->region_size(), peer.pid);
  // The page is readable by every local user: it names the job's uid and ptag, not its cookie.
  stats.cdm_attached(peer.attach_id, peer.pid, peer.uid, req.inst_id, req.ptag, 0);
  cdms.add(std::move(region), peer.pid, c, req.inst_id);
  ++ctr.attaches;
  return rc::kSuccess;
}

}  // namespace

void control::attach(Request& q, const NicInfo& nic, Credentials& creds, CdmTable& cdms, Quotas& quotas, BteEngine& bte,
                     StatsPage& stats, Counters& ctr) {
  ctl::Attach req;
  if (!parse(q, req)) return bad(q, ctr);
  auto& rep = init_reply<ctl::AttachReply>(q.reply, q.h);
  rep.r.rc = attach_cdm(q.peer, req, rep, q.pass_fds, nic, creds, cdms, quotas, bte, stats, ctr);
}

}  // namespace nicemu::daemon
