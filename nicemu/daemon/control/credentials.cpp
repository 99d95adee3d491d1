// Control requests about who may use the NIC: job credentials (issue, grant, revoke), DRC
// credentials (libdrc: acquire, grant, revoke, access, release), the attach of a CDM, the
// daemon's own hello and shutdown.
#include "nicemu/daemon/control/credentials.h"

#include <unistd.h>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
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
  if (!parse(q, req) || (req.flags & ~ctl::kDrcFlex) != 0) return bad(q, ctr);
  creds.drc_request(q.peer, q.h, req, q.reply);
}

void control::drc_peer(Request& q, Credentials& creds, Counters& ctr) {
  // From a daemon of this host only (root or the daemon's own user), as datagram matching.
  if (q.peer.uid != 0 && q.peer.uid != geteuid()) return bad(q, ctr);
  if (q.len < sizeof(ctl::Header) + sizeof(uint32_t)) return bad(q, ctr);
  uint32_t origin;  // every DRC daemon message names its sender
  const auto* m = reinterpret_cast<const uint8_t*>(q.msg);
  size_t at = offsetof(ctl::DrcTableAsk, origin);
  static_assert(offsetof(ctl::DrcTableEnd, origin) == offsetof(ctl::DrcTableAsk, origin));
  if (q.h.op == static_cast<uint16_t>(Op::kDrcState)) at = offsetof(ctl::DrcState, origin);
  if (q.h.op == static_cast<uint16_t>(Op::kDrcAck)) at = offsetof(ctl::DrcAck, origin);
  if (q.len < at + sizeof origin) return bad(q, ctr);
  std::memcpy(&origin, m + at, sizeof origin);
  if (const char* why = creds.receive(origin, q.h, m, q.len)) {
    ++ctr.malformed_messages;
    spdlog::warn("DRC message from a daemon of this host (pid {}) dropped: {}", q.peer.pid, why);
  }
}

namespace {

// How long a change waits for the other daemons' answers, and a daemon at start for their
// tables: a daemon that has not answered by then is treated as down (it converges when it
// returns), so a stopped or partitioned host delays DRC calls by this much, never more.
constexpr std::chrono::milliseconds kDrcAckWait{2000};
constexpr std::chrono::milliseconds kDrcTableWait{1000};
// Daemons of other hosts a starting daemon asks for the table. One converged answer
// suffices (every change reaches every daemon, or the channel's return resyncs it), so a
// few spread at random do; asking all of a 256-host map opened 255 channels per daemon at
// start, most to daemons not up yet, each then declared down after the retry budget.
constexpr size_t kDrcAskRemote = 8;

const char* action_name(uint32_t a) {
  static constexpr const char* kNames[] = {"?", "acquire", "grant", "revoke", "access", "release", "lookup"};
  return kNames[a < 7 ? a : 0];
}

}  // namespace

Credentials::DrcSnap Credentials::snap(uint32_t id) const {
  DrcSnap s;
  s.id = id;
  if (auto it = drc_.find(id); it != drc_.end()) {
    s.rev = it->second.rev;
    s.live = true;
    s.cred = it->second.cred;
    s.uid = credentials_.at(it->second.cred).uid;
    s.flex = it->second.flex;
    s.grants = it->second.grants;
  } else if (auto r = released_.find(id); r != released_.end()) {
    s.rev = r->second;
  }
  return s;
}

int Credentials::take(const DrcSnap& s) {
  const DrcSnap have = snap(s.id);
  // The same revision of another credential: two daemons drew the same id for different
  // credentials (or made concurrent changes): refused, so the change is undone.
  if (s.rev == have.rev && s.live && have.live && (s.cred != have.cred || s.uid != have.uid))
    return rc::kPermissionError;
  if (s.rev <= have.rev) return rc::kSuccess;  // this state or a newer one is here already
  if (s.live)
    if (auto it = credentials_.find(s.cred); it != credentials_.end() && it->second.drc_id != s.id)
      return rc::kPermissionError;  // its ptag and cookie are another credential's here
  if (have.live) {
    credentials_.erase(have.cred);
    drc_.erase(s.id);
  }
  if (s.live) {
    credentials_[s.cred] = CredOwner{s.uid, 0, false, s.id};
    drc_[s.id] = DrcCredential{s.cred, s.flex, s.grants, s.rev};
    released_.erase(s.id);
  } else {
    released_[s.id] = s.rev;
    // Bounded: past kDrcReleasedKept the lowest ids are forgotten (a daemon away that long
    // keeps such a credential until its owner releases it again).
    while (released_.size() > kDrcReleasedKept) released_.erase(released_.begin());
  }
  return rc::kSuccess;
}

std::vector<uint32_t> Credentials::peers() {
  std::vector<uint32_t> out = port_.local_nodes();
  for (uint32_t n : port_.remote_nodes())
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

bool Credentials::send_state(uint32_t node, const DrcSnap& s, uint64_t txn) {
  std::vector<uint8_t> buf(sizeof(ctl::DrcState) + s.grants.size() * 8);
  ctl::DrcState m{};
  m.h = ctl::make_header<ctl::DrcState>(Op::kDrcState, 0);
  m.h.length = static_cast<uint32_t>(buf.size());
  m.txn = txn;
  m.rev = s.rev;
  m.origin = nic_addr_;
  m.id = s.id;
  m.ptag = s.cred.ptag;
  m.cookie = s.cred.cookie;
  m.uid = static_cast<uint32_t>(s.uid);
  m.flags = (s.flex ? ctl::kDrcFlex : 0) | (s.live ? ctl::kDrcLive : 0);
  m.ngrants = static_cast<uint32_t>(s.grants.size());
  std::memcpy(buf.data(), &m, sizeof m);
  for (size_t i = 0; i < s.grants.size(); ++i) {
    const uint32_t g[2] = {s.grants[i].first, s.grants[i].second};
    std::memcpy(buf.data() + sizeof m + i * 8, g, 8);
  }
  return port_.send(node, buf.data(), buf.size());
}

void Credentials::arm_timer(std::chrono::milliseconds after, std::function<void()> f) {
  if (!timer_) return;  // no loop (a node driven by hand): answers alone end the wait
  timer_->expires_after(after);
  timer_->async_wait([f = std::move(f)](const asio::error_code& e) {
    if (!e) f();
  });
}

void Credentials::drc_request(Peer& peer, const ctl::Header& h, const ctl::Drc& req, std::vector<char>& reply) {
  const auto action = static_cast<ctl::DrcAction>(req.action);
  if (action == ctl::DrcAction::kAccess || action == ctl::DrcAction::kLookup) {
    auto& r = init_reply<ctl::DrcReply>(reply, h);
    r.refused_by = ctl::kDrcNoNode;
    r.r.rc = drc(peer, req, r);
    return;
  }
  reply.clear();
  queue_.push_back(Pending{peer, h, req, &reply});
  if (!txn_) start_next();
  // Whatever did not finish inside this call answers through reply_later.
  for (auto& p : queue_) p.inline_reply = nullptr;
  if (txn_) txn_->p.inline_reply = nullptr;
}

void Credentials::start_next() {
  while (!txn_ && !queue_.empty()) {
    Txn t;
    t.p = std::move(queue_.front());
    queue_.pop_front();
    t.id = next_txn_++;
    t.rep.refused_by = ctl::kDrcNoNode;
    // The state to restore if another daemon refuses. An acquire that chose its id had
    // none (drc() draws ids neither held nor remembered as released).
    t.before = snap(t.p.req.id);
    t.rep.r.rc = drc(t.p.peer, t.p.req, t.rep);
    txn_ = std::move(t);
    if (txn_->rep.r.rc != rc::kSuccess) {
      finish();
      continue;
    }
    const uint32_t id = static_cast<ctl::DrcAction>(txn_->p.req.action) == ctl::DrcAction::kAcquire
                            ? txn_->rep.id
                            : txn_->p.req.id;
    if (id != txn_->before.id) {
      txn_->before = DrcSnap{};
      txn_->before.id = id;
    }
    txn_->after = snap(id);
    if (txn_->after.rev == txn_->before.rev) {
      finish();  // nothing changed (an acquire of what the caller holds already)
      continue;
    }
    save();
    for (uint32_t node : peers()) {
      if (send_state(node, txn_->after, txn_->id))
        txn_->waiting.insert(node);
      else
        spdlog::warn("nic {}: DRC credential {} {}: the daemon of NIC address {} is not reachable; it takes the "
                     "change from the others' tables when it returns",
                     nic_addr_, id, action_name(txn_->p.req.action), node);
    }
    if (txn_->waiting.empty()) {
      finish();
      continue;
    }
    const uint64_t tid = txn_->id;
    arm_timer(kDrcAckWait, [this, tid] {
      if (!txn_ || txn_->id != tid) return;
      std::string who;
      for (uint32_t n : txn_->waiting) who += (who.empty() ? "" : ", ") + std::to_string(n);
      spdlog::warn("nic {}: DRC credential {} {}: no answer from NIC address(es) {} within {} ms; treated as down "
                   "(they converge when they return)",
                   nic_addr_, txn_->after.id, action_name(txn_->p.req.action), who, kDrcAckWait.count());
      txn_->waiting.clear();
      finish();
    });
    return;
  }
}

void Credentials::ack(uint32_t from, uint64_t txn, int code) {
  if (!txn_ || txn_->id != txn || !txn_->waiting.erase(from)) {
    if (code != rc::kSuccess)
      spdlog::warn("nic {}: late refusal (rc {}) of a DRC change from NIC address {}: its table differs until the "
                   "credential changes again",
                   nic_addr_, code, from);
    return;
  }
  if (code != rc::kSuccess && txn_->refused_by == ctl::kDrcNoNode) {
    txn_->refused_by = from;
    txn_->refused_rc = code;
    txn_->waiting.clear();  // undone now: the others get the restored state after the change
  }
  if (txn_->waiting.empty()) finish();
}

void Credentials::peer_lost(uint32_t node) {
  // Changes sent to it meanwhile may be lost with the channel: it gets the whole table
  // when the channel is up again (progress).
  resync_.insert(node);
  asked_.erase(node);
  if (!converged_ && asked_.empty()) converge_done("every daemon asked answered or is lost");
  if (txn_ && txn_->waiting.erase(node) && txn_->waiting.empty()) finish();
}

void Credentials::progress() {
  for (auto it = resync_.begin(); it != resync_.end();) {
    if (!port_.peer_up(*it)) {
      ++it;
      continue;
    }
    spdlog::info("nic {}: the channel to NIC address {} is up again: sending it the DRC table", nic_addr_, *it);
    answer_table(*it);
    it = resync_.erase(it);
  }
}

void Credentials::finish() {
  Txn t = std::move(*txn_);
  txn_.reset();
  if (timer_) timer_->cancel();
  if (t.refused_by != ctl::kDrcNoNode) {
    // Undo: the state from before, at a revision above the change, here and everywhere but
    // at the daemon that refused (which never took it).
    DrcSnap restore = t.before;
    restore.id = t.after.id;
    restore.rev = t.after.rev + 1;
    take(restore);
    save();
    for (uint32_t node : peers())
      if (node != t.refused_by) send_state(node, restore, 0);
    spdlog::warn("nic {}: DRC credential {} {} by uid {} refused by the daemon of NIC address {} (rc {}): undone on "
                 "every daemon",
                 nic_addr_, t.after.id, action_name(t.p.req.action), t.p.peer.uid, t.refused_by, t.refused_rc);
    t.rep = ctl::DrcReply{};
    t.rep.r.rc = t.refused_rc;
    t.rep.refused_by = t.refused_by;
  }
  std::vector<char> out;
  auto& r = init_reply<ctl::DrcReply>(out, t.p.h);
  const int32_t code = t.rep.r.rc;
  r = t.rep;
  r.r.h = ctl::Header{ctl::kMagic, ctl::kVersion, t.p.h.op, t.p.h.seq, static_cast<uint32_t>(sizeof(ctl::DrcReply))};
  r.r.rc = code;
  if (t.p.inline_reply)
    *t.p.inline_reply = std::move(out);
  else if (t.p.peer.reply_later)
    t.p.peer.reply_later(std::move(out));
  start_next();
}

void Credentials::answer_table(uint32_t node) {
  uint32_t count = 0;
  for (const auto& [id, d] : drc_) {
    if (!send_state(node, snap(id), 0)) return;  // the asker waits out its time and goes on without us
    ++count;
  }
  for (const auto& [id, rev] : released_) {
    if (!send_state(node, snap(id), 0)) return;
    ++count;
  }
  ctl::DrcTableEnd e{};
  e.h = ctl::make_header<ctl::DrcTableEnd>(Op::kDrcTableEnd, 0);
  e.origin = nic_addr_;
  e.count = count;
  e.synced = converged_ ? 1 : 0;
  port_.send(node, &e, sizeof e);
}

const char* Credentials::receive(uint32_t from, const ctl::Header& h, const uint8_t* msg, size_t len) {
  switch (static_cast<Op>(h.op)) {
    case Op::kDrcState: {
      ctl::DrcState m;
      if (len < sizeof m) return "DRC state too short";
      std::memcpy(&m, msg, sizeof m);
      if (m.origin != from) return "DRC state naming another sender";
      if (m.ngrants > ctl::kDrcMaxGrants || len != sizeof m + size_t{m.ngrants} * 8)
        return "DRC state of the wrong size";
      const bool live = (m.flags & ctl::kDrcLive) != 0;
      if (m.id == 0 || m.rev == 0 || (live && (m.ptag == 0 || m.ptag > 255 || m.cookie == 0)))
        return "DRC state without its credential";
      DrcSnap s;
      s.id = m.id;
      s.rev = m.rev;
      s.live = live;
      s.cred = Credential{m.ptag, m.cookie};
      s.uid = static_cast<uid_t>(m.uid);
      s.flex = (m.flags & ctl::kDrcFlex) != 0;
      for (uint32_t i = 0; i < m.ngrants; ++i) {
        uint32_t g[2];
        std::memcpy(g, msg + sizeof m + i * 8, 8);
        if (g[0] < static_cast<uint32_t>(ctl::DrcGrant::kUid) || g[0] > static_cast<uint32_t>(ctl::DrcGrant::kWlm))
          return "DRC state with an unknown grant kind";
        s.grants.emplace_back(g[0], g[1]);
      }
      const uint64_t had = snap(m.id).rev;
      const int code = take(s);
      if (code == rc::kSuccess && m.rev > had) {
        save();
        spdlog::info("nic {}: DRC credential {} {} (revision {}, from NIC address {})", nic_addr_, m.id,
                     live ? "updated" : "released", m.rev, from);
      } else if (code != rc::kSuccess) {
        ++ctr_.credential_refused;
        spdlog::warn("nic {}: DRC credential {} (ptag {} cookie {:#x}) from NIC address {} refused: another "
                     "credential holds that ptag and cookie here",
                     nic_addr_, m.id, m.ptag, m.cookie, from);
      }
      if (m.txn != 0) {
        ctl::DrcAck a{};
        a.h = ctl::make_header<ctl::DrcAck>(Op::kDrcAck, 0);
        a.txn = m.txn;
        a.origin = nic_addr_;
        a.rc = code;
        port_.send(from, &a, sizeof a);
      }
      return nullptr;
    }
    case Op::kDrcAck: {
      ctl::DrcAck m;
      if (len != sizeof m) return "DRC ack of the wrong size";
      std::memcpy(&m, msg, sizeof m);
      if (m.origin != from) return "DRC ack naming another sender";
      ack(from, m.txn, m.rc);
      return nullptr;
    }
    case Op::kDrcTableAsk: {
      ctl::DrcTableAsk m;
      if (len != sizeof m) return "DRC table request of the wrong size";
      std::memcpy(&m, msg, sizeof m);
      if (m.origin != from) return "DRC table request naming another sender";
      answer_table(from);
      return nullptr;
    }
    case Op::kDrcTableEnd: {
      ctl::DrcTableEnd m;
      if (len != sizeof m) return "DRC table end of the wrong size";
      std::memcpy(&m, msg, sizeof m);
      if (m.origin != from) return "DRC table end naming another sender";
      if (converged_ || !asked_.erase(from)) return nullptr;
      spdlog::info("nic {}: DRC table of NIC address {}: {} credential(s){}", nic_addr_, from, m.count,
                   m.synced ? "" : " (it was converging itself)");
      if (m.synced) converge_done("a converged daemon answered");
      else if (asked_.empty()) converge_done("every daemon asked answered");
      return nullptr;
    }
    default:
      return "not a DRC message";
  }
}

void Credentials::converge(asio::io_context& io) {
  timer_ = std::make_unique<asio::steady_timer>(io);
  ctl::DrcTableAsk m{};
  m.h = ctl::make_header<ctl::DrcTableAsk>(Op::kDrcTableAsk, 0);
  m.origin = nic_addr_;
  converged_ = false;
  // Same-host daemons all (a socket each, no channel); of other hosts' daemons a random few.
  std::vector<uint32_t> ask = port_.local_nodes();
  std::vector<uint32_t> remote;
  for (uint32_t n : port_.remote_nodes())
    if (std::find(ask.begin(), ask.end(), n) == ask.end()) remote.push_back(n);
  for (size_t i = 0; i < remote.size() && i < kDrcAskRemote; ++i) {
    std::swap(remote[i], remote[i + randombytes_uniform(static_cast<uint32_t>(remote.size() - i))]);
    ask.push_back(remote[i]);
  }
  for (uint32_t node : ask)
    if (port_.send(node, &m, sizeof m)) asked_.insert(node);
  if (asked_.empty()) return converge_done("no other daemon to ask");
  spdlog::info("nic {}: asking {} daemon(s) for the DRC table before admitting anyone", nic_addr_, asked_.size());
  arm_timer(kDrcTableWait, [this] {
    if (!converged_) converge_done("the wait for answers ended");
  });
}

void Credentials::converge_done(const char* how) {
  if (converged_) return;
  converged_ = true;
  asked_.clear();
  if (timer_ && !txn_) timer_->cancel();
  spdlog::info("nic {}: DRC table converged ({}): {} credential(s), {} released", nic_addr_, how, drc_.size(),
               released_.size());
  auto callbacks = std::move(on_converged_);
  on_converged_.clear();
  for (auto& f : callbacks) f();
}

void Credentials::when_converged(std::function<void()> f) {
  if (converged_) return f();
  on_converged_.push_back(std::move(f));
}

void Credentials::load() {
  if (cred_path_.empty()) return;
  std::string text, why;
  switch (credential_file::read(cred_path_, text, why)) {
    case credential_file::ReadResult::kAbsent: return;
    case credential_file::ReadResult::kRejected: break;
    case credential_file::ReadResult::kOk:
      why = credential_file::decode(text, nic_addr_, credentials_, drc_, released_);
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
  if (!credentials_.empty() || !released_.empty())
    text = credential_file::encode(nic_addr_, credentials_, drc_, released_);
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
      for (int tries = 0; tries < 1000 && (id == 0 || drc_.contains(id) || released_.contains(id)); ++tries)
        id = 1 + randombytes_uniform(0x7FFFFFFF);
      if (!c || id == 0 || drc_.contains(id) || released_.contains(id)) return rc::kErrorResource;
      d.cred = *c;
    } else {
      if (req.id == 0 || req.ptag == 0 || req.ptag > 255 || req.cookie == 0) return rc::kInvalidParam;
      d.cred = Credential{req.ptag, req.cookie};
      if (auto it = drc_.find(req.id); it != drc_.end()) {
        // Acquiring with the values of a credential the caller holds already changes nothing.
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
    // An id acquired again after a release: one revision above the release.
    if (auto rel = released_.find(id); rel != released_.end()) {
      d.rev = rel->second + 1;
      released_.erase(rel);
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
    released_[req.id] = d.rev + 1;
    drc_.erase(it);
    while (released_.size() > kDrcReleasedKept) released_.erase(released_.begin());
    return rc::kSuccess;
  }
  if (action != DrcAction::kGrant && action != DrcAction::kRevoke) return rc::kInvalidParam;
  if (req.kind < static_cast<uint32_t>(ctl::DrcGrant::kUid) || req.kind > static_cast<uint32_t>(ctl::DrcGrant::kWlm))
    return rc::kInvalidParam;
  std::pair<uint32_t, uint32_t> g{req.kind, req.value};
  auto at = std::find(d.grants.begin(), d.grants.end(), g);
  if (action == DrcAction::kGrant) {
    if (at != d.grants.end()) return rc::kInvalidState;
    if (d.grants.size() >= ctl::kDrcMaxGrants) return rc::kErrorResource;
    d.grants.push_back(g);
  } else {
    if (at == d.grants.end()) return rc::kNoMatch;
    d.grants.erase(at);
  }
  ++d.rev;
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
  auto held = credentials_.find(c);
  if (held != credentials_.end()) owner.drc_id = held->second.drc_id;
  r.created = held == credentials_.end() ? 1 : 0;
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
  rep.fabric_data = nic.fabric_data;
  if (nic.fabric_data == ctl::kFabricDataOfi)
    std::snprintf(rep.ofi_provider, sizeof rep.ofi_provider, "%s", nic.ofi_provider.c_str());
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
