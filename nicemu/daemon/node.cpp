#include "nicemu/daemon/node.h"
#include "nicemu/daemon/cdm/process_mdd.h"
#include "nicemu/daemon/transport/udp_fabric.h"

#include <unistd.h>

#include <cstring>
#include <memory>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "nicemu/abi/ce_ops.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/fault/fault_spec.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;
using ctl::Op;

namespace {
template <typename Rep>
Rep& init_reply(std::vector<char>& buf, const ctl::Header& req) {
  buf.assign(sizeof(Rep), 0);
  auto* r = reinterpret_cast<Rep*>(buf.data());
  r->r.h = ctl::Header{ctl::kMagic, ctl::kVersion, req.op, req.seq, static_cast<uint32_t>(sizeof(Rep))};
  return *r;
}
struct PlainReply {
  ctl::Reply r;
};

}  // namespace

Node::Node(NodeConfig cfg)
    : cfg_(std::move(cfg)),
      links_(cfg_.rundir),
      dgrams_(
          cfg_.nic_addr,
          [this](uint32_t node, const void* m, size_t n) {
            // A daemon of this host is reached by its socket; one elsewhere by the fabric.
            bool ok = fabric_ && fabric_->has(node) && !links_.local(node) ? fabric_->send(node, m, n)
                                                                           : links_.send(node, m, n);
            count_link(node, n, ok);
            return ok;
          },
          [this](uint64_t id) -> CdmRegion* {
            auto it = cdms_.find(id);
            return it == cdms_.end() ? nullptr : it->second.get();
          },
          [this](const Credential& c, uint32_t inst) { return find_cdm(c, inst); }),
      remote_out_([this](uint32_t node, const void* m, size_t n) { return fabric_ && fabric_->send(node, m, n); },
                  [this](uint32_t node) { return fabric_reach(node); }),
      remote_in_(cfg_.nic_addr, bte_.regions(),
                 [this](uint32_t node, const void* m, size_t n) { return fabric_ && fabric_->send(node, m, n); }),
      msgq_relay_(
          cfg_.nic_addr, [this](uint32_t node, const void* m, size_t n) { return fabric_ && fabric_->send(node, m, n); },
          [this](uint32_t node) { return fabric_ && fabric_->peer_up(node); },
          [this](const Credential& c) -> MsgqSegment* {
            auto it = msgqs_.find(c);
            return it == msgqs_.end() ? nullptr : it->second.get();
          },
          [this](const std::function<void(MsgqSegment&)>& f) {
            for (auto& [cred, seg] : msgqs_) f(*seg);
          },
          [this](uint64_t attach_id, uint32_t cq, uint64_t entry) {
            if (auto it = cdms_.find(attach_id); it != cdms_.end() && it->second->alive())
              it->second->push_cqes(cq, &entry, 1);
          }),
      smsg_(cfg_.nic_addr, stats_,
            SmsgRelayEnv{
                [this](uint64_t id) -> CdmRegion* {
                  auto it = cdms_.find(id);
                  return it == cdms_.end() ? nullptr : it->second.get();
                },
                [this](const Credential& c, uint32_t domain) { return find_cdm_by_domain(c, domain); },
                [this](CdmRegion& t) {
                  Peer remote{};  // a mailbox opened for a sender of another host counts as the receiver's
                  remote.uid = static_cast<uid_t>(-1);
                  return may_take(remote, Resource::kMailboxes, t.pid(), t.credential());
                },
                [this](uint32_t node) { return fabric_ && fabric_->has(node) && !links_.local(node); },
                [this](uint32_t node, const void* m, size_t n) {
                  bool ok = fabric_ && fabric_->send(node, m, n);
                  if (ok) count_link(node, n, true);
                  return ok;
                },
                [this](uint32_t node) { return fabric_ && fabric_->peer_up(node); }}),
      ce_(cfg_.nic_addr, CeEnv{[this](uint32_t node, const void* m, size_t n) { return send_to_node(node, m, n); },
                               [this](uint64_t id) -> CdmRegion* {
                                 auto it = cdms_.find(id);
                                 return it != cdms_.end() && it->second->alive() ? it->second.get() : nullptr;
                               }}) {
  // Cookies come from the kernel's CSPRNG (libsodium): a user must not be able to predict
  // the credential of another user's next job.
  if (sodium_init() < 0) throw std::runtime_error("libsodium initialisation failed");
  namespace nc = abi::counters::node;
  ctr_ = Counters{stats_.node(nc::connections),         stats_.node(nc::attaches),
                  stats_.node(nc::attach_refused),      stats_.node(nc::detaches),
                  stats_.node(nc::registrations),       stats_.node(nc::deregistrations),
                  stats_.node(nc::cq_creates),          stats_.node(nc::cq_destroys),
                  stats_.node(nc::peer_lookups),        stats_.node(nc::peer_lookup_failures),
                  stats_.node(nc::mbox_opens),          stats_.node(nc::malformed_messages),
                  stats_.node(nc::credentials_issued),  stats_.node(nc::datagrams_posted),
                  stats_.node(nc::datagrams_cancelled), stats_.node(nc::msgq_joins),
                  stats_.node(nc::msgq_join_refused),   stats_.node(nc::msgq_lookups),
                  stats_.node(nc::credential_refused),  stats_.node(nc::resource_refused),
                  stats_.node(nc::accept_deferred)};
  abi::fault::Config fc = nicemu::fault::default_config();
  std::string err;
  bool seed_given = false;
  if (!cfg_.fault_spec.empty() && !nicemu::fault::parse_spec(cfg_.fault_spec, fc, err, &seed_given))
    throw std::runtime_error("--fault: " + err);
  publish_fault(fc, seed_given, "start");
}

void Node::publish_fault(abi::fault::Config c, bool seed_given, const char* why) {
  // Every run has a seed in the log, so a failing run can be replayed with seed=N.
  if (!seed_given && c.seed == 0) c.seed = (uint64_t{randombytes_random()} << 32) | randombytes_random();
  fault_.publish(c);
  stats_.node(abi::counters::node::fault_config_changes).add(1);
  if (c.enabled || std::string_view(why) != "start")
    spdlog::info("fault injection ({}): {}", why, nicemu::fault::to_spec(c));
}

bool Node::reload_fault(const std::string& spec, std::string& error) {
  abi::fault::Config c = nicemu::fault::default_config();
  bool seed_given = false;
  if (!nicemu::fault::parse_spec(spec, c, error, &seed_given)) return false;
  publish_fault(c, seed_given, "reload");
  return true;
}

void Node::handle_fault(Peer& peer, const ctl::Header& h, const char* msg, size_t len, std::vector<char>& reply) {
  auto answer = [&](int rc, const std::string& error) {
    auto& r = init_reply<ctl::FaultReply>(reply, h);
    r.r.rc = rc;
    const abi::fault::Config& now = fault_.config();
    r.seed = now.seed;
    std::string text = nicemu::fault::to_spec(now);
    r.spec_length = static_cast<uint32_t>(std::min<size_t>(text.size(), sizeof r.spec));
    std::memcpy(r.spec, text.data(), r.spec_length);
    r.error_length = static_cast<uint32_t>(std::min<size_t>(error.size(), sizeof r.error));
    std::memcpy(r.error, error.data(), r.error_length);
  };
  if (static_cast<Op>(h.op) == Op::kFaultGet) {
    ctl::FaultGet req;
    if (!parse(msg, len, req)) return ++ctr_.malformed_messages, answer(rc::kInvalidParam, "malformed request");
    return answer(rc::kSuccess, "");
  }
  ctl::FaultSet req;
  if (!parse(msg, len, req) || req.spec_length > sizeof req.spec || req.replace > 1) {
    ++ctr_.malformed_messages;
    return answer(rc::kInvalidParam, "malformed request");
  }
  // Faults disturb every client of the node: only its owner (or root) may change them.
  if (peer.uid != 0 && peer.uid != getuid()) return answer(rc::kPermissionError, "not the daemon's user");
  abi::fault::Config c = req.replace ? nicemu::fault::default_config() : fault_.config();
  std::string err;
  bool seed_given = false;
  if (!nicemu::fault::parse_spec(std::string_view(req.spec, req.spec_length), c, err, &seed_given))
    return answer(rc::kInvalidParam, err);
  if (!seed_given && req.replace) c.seed = 0;  // a fresh configuration gets a fresh seed
  publish_fault(c, seed_given, "nicemuctl");
  answer(rc::kSuccess, "");
}

void Node::count_link(uint32_t node, size_t bytes, bool ok) {
  namespace nc = abi::counters::link;
  if (!ok) return stats_.link(node, nc::send_failures).add(1);
  stats_.link(node, nc::messages_sent).add(1);
  stats_.link(node, nc::bytes_sent).add(bytes);
}

void Node::refresh_counters() {
  // Also the periodic tick for MSGQ messages from other hosts (held for ring room, or
  // waiting for the fabric) and the credits of their ring slots.
  if (msgq_relay_.busy()) msgq_relay_.progress();
  for (auto& [id, r] : cdms_) stats_.refresh(id, r->counter_block());
  stats_.refreshed();
}

template <typename Req>
bool Node::parse(const char* msg, size_t len, Req& out) {
  if (len != sizeof(Req)) return false;
  std::memcpy(&out, msg, sizeof(Req));  // copy out of the socket buffer before validating
  return out.h.length == sizeof(Req);
}

bool Node::may_use(const Peer& peer, const Credential& c) const {
  auto it = credentials_.find(c);
  if (it == credentials_.end()) return false;
  const CredOwner& o = it->second;
  return peer.uid == 0 || o.uid == peer.uid || (o.has_gid && o.gid == peer.gid);
}

std::array<uint64_t, 2> Node::usage(Resource r, pid_t pid, const Credential& c) const {
  std::array<uint64_t, 2> u{0, 0};
  // A process's registrations are alike in all its CDMs of one domain (process_mdd.h):
  // count them once per (process, domain), as the largest table among its CDMs there.
  std::map<std::pair<pid_t, Credential>, uint64_t> regs;
  // The CDMs of the credential, then those of the process under other credentials.
  std::vector<uint64_t> ids = cdm_index_.of_credential(c);
  for (uint64_t id : cdm_index_.of_process(pid))
    if (auto it = cdms_.find(id); it != cdms_.end() && !(it->second->credential() == c)) ids.push_back(id);
  for (uint64_t id : ids) {
    auto it = cdms_.find(id);
    if (it == cdms_.end()) continue;
    const CdmRegion* cdm = it->second.get();
    const bool mine = cdm->pid() == pid, ours = cdm->credential() == c;
    uint64_t n = 0;
    switch (r) {
      case Resource::kCdms: n = 1; break;
      case Resource::kRegistrations: {
        uint64_t& m = regs[{cdm->pid(), cdm->credential()}];
        m = std::max<uint64_t>(m, cdm->live_registrations());
        continue;
      }
      case Resource::kCqs: n = cdm->live_cqs(); break;
      case Resource::kMailboxes: n = cdm->mailboxes(); break;
      case Resource::kDatagrams: n = dgrams_.posts_of(id); break;
    }
    if (mine) u[0] += n;
    if (ours) u[1] += n;
  }
  for (const auto& [key, n] : regs) {
    if (key.first == pid) u[0] += n;
    if (key.second == c) u[1] += n;
  }
  return u;
}

bool Node::may_take(Peer& peer, Resource r, pid_t pid, const Credential& c) {
  const size_t i = static_cast<size_t>(r);
  auto [by_process, by_credential] = usage(r, pid, c);
  const bool process_full = by_process >= cfg_.limits.per_process[i];
  if (!process_full && by_credential < cfg_.limits.per_credential[i]) return true;
  ++ctr_.resource_refused;
  ++peer.refusals;
  if (peer.refusals <= 8 || peer.refusals % 1000 == 0)
    spdlog::warn("nic {}: {} limit reached for pid {} (ptag {}): {} {} of max {}", cfg_.nic_addr, kResourceNames[i],
                 pid, c.ptag, process_full ? "process holds" : "credential holds",
                 process_full ? by_process : by_credential,
                 process_full ? cfg_.limits.per_process[i] : cfg_.limits.per_credential[i]);
  return false;
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

CdmRegion* Node::owned_cdm(const Peer& peer) {
  auto it = cdms_.find(peer.attach_id);
  return it == cdms_.end() ? nullptr : it->second.get();
}

std::vector<CdmRegion*> Node::family(pid_t pid, const Credential& c) {
  std::vector<CdmRegion*> out;
  for (uint64_t id : cdm_index_.of_process(pid))
    if (auto it = cdms_.find(id); it != cdms_.end()) {
      CdmRegion* r = it->second.get();
      if (r->credential() == c && r->alive()) out.push_back(r);
    }
  return out;
}

CdmRegion* Node::find_cdm(const Credential& c, uint32_t inst_id) {
  for (uint64_t id : cdm_index_.with_inst(c, inst_id))
    if (auto it = cdms_.find(id); it != cdms_.end() && it->second->alive()) return it->second.get();
  return nullptr;
}

CdmRegion* Node::find_cdm_by_domain(const Credential& c, uint32_t domain) {
  if (domain & mdh::kVmdhRoute) {
    auto d = bte_.regions().vmdh().domain(c.ptag, c.cookie, domain & ~mdh::kVmdhRoute);
    if (!d) return nullptr;
    domain = *d;
  }
  if (domain == 0 || domain >= domains_.size() || domains_[domain] == 0) return nullptr;
  auto it = cdms_.find(domains_[domain]);
  if (it == cdms_.end() || !(it->second->credential() == c) || !it->second->alive()) return nullptr;
  return it->second.get();
}

// A registration of `cdm` (and its siblings, process_mdd.h). With GNI_MEM_USE_VMDH it takes
// an index of the node's vMDH block of its protection domain: `vmdh_index`, or the first
// free one below `mdd_block` for (uint32_t)-1. An index is in use while the CDM it is bound
// to still holds a registration under it (bindings are checked, never trusted).
int Node::register_memory(CdmRegion& cdm, RegSpec& spec, uint32_t vmdh_index, uint32_t mdd_block,
                          ctl::MemRegisterReply& rep) {
  const Credential c = cdm.credential();
  VmdhTable& table = bte_.regions().vmdh();
  auto in_use = [&](uint32_t index) {
    auto d = table.domain(c.ptag, c.cookie, index);
    CdmRegion* holder = d ? find_cdm_by_domain(c, *d) : nullptr;
    return holder && holder->vmdh_slot(index).has_value();
  };
  spec.reserved = spec.flags & gni::kMemReserveRegion;
  if (spec.flags & gni::kMemUseVmdh) {
    if (mdd_block == 0 || mdd_block > mdh::kVmdhIndices) return rc::kInvalidParam;  // no GNI_SetMddResources
    uint32_t index = vmdh_index;
    if (index == UINT32_MAX) {
      for (index = 0; index < mdd_block && in_use(index); ++index) {
      }
      if (index == mdd_block) return rc::kErrorResource;
    } else if (index >= mdd_block) {
      return rc::kInvalidParam;
    } else if (in_use(index)) {
      spdlog::debug("nic {}: vMDH index {} of ptag {} is in use (registration by pid {})", cfg_.nic_addr, index,
                    c.ptag, cdm.pid());
      return rc::kErrorResource;
    }
    spec.vmdh = index + 1;
  }
  int r = mdd_register(cdm, family(cdm.pid(), c), spec, rep);
  if (r == rc::kSuccess && spec.vmdh) table.bind(c.ptag, c.cookie, spec.vmdh - 1, cdm.mem_domain());
  return r;
}

void Node::handle(Peer& peer, const char* msg, size_t len, std::vector<char>& reply, PassFds& pass_fds) {
  pass_fds = {-1, -1};
  reply.clear();
  ctl::Header h;
  if (len < sizeof(h)) {
    ++ctr_.malformed_messages;
    return;
  }
  std::memcpy(&h, msg, sizeof(h));
  if (h.magic == ctl::kMagic && h.version != ctl::kVersion &&
      (h.op == static_cast<uint16_t>(Op::kHello) || h.op == static_cast<uint16_t>(Op::kAttach))) {
    // A client of another nicemu version: the first calls every client makes get an answer
    // in this daemon's version, so the client can say what is wrong instead of waiting.
    ++ctr_.malformed_messages;
    spdlog::warn("nic {}: pid {} speaks control protocol {}, this daemon {}: refused; install matching nicemu "
                 "versions",
                 cfg_.nic_addr, peer.pid, h.version, ctl::kVersion);
    init_reply<PlainReply>(reply, h).r.rc = rc::kInvalidState;
    return;
  }
  if (h.magic != ctl::kMagic || h.version != ctl::kVersion || h.length != len) {
    ++ctr_.malformed_messages;
    spdlog::warn("nic {}: malformed control message from pid {} (op {}, {} bytes) dropped", cfg_.nic_addr,
                 peer.pid, h.op, len);
    return;
  }
  auto bad = [&] {
    ++ctr_.malformed_messages;
    init_reply<PlainReply>(reply, h).r.rc = rc::kInvalidParam;
  };

  switch (static_cast<Op>(h.op)) {
    case Op::kHello: {
      auto& r = init_reply<ctl::HelloReply>(reply, h);
      r.nic_addr = cfg_.nic_addr;
      r.device_type = cfg_.device_type;
      r.daemon_pid = static_cast<uint32_t>(getpid());
      r.abi_version = kAbiVersion;
      r.r.rc = rc::kSuccess;
      return;
    }
    case Op::kAttach: {
      ctl::Attach req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::AttachReply>(reply, h);
      r.r.rc = attach(peer, req, r, pass_fds);
      return;
    }
    case Op::kMemRegister: {
      ctl::MemRegister req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::MemRegisterReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      RegSpec spec{req.address, req.length, req.flags, req.dst_cq, {}};
      if (!cdm)
        r.r.rc = rc::kInvalidState;
      else if (req.flags & gni::kMemUpdateRegion)
        r.r.rc = mdd_update(*cdm, family(cdm->pid(), cdm->credential()), req, r);
      else if (!may_take(peer, Resource::kRegistrations, cdm->pid(), cdm->credential()))
        r.r.rc = rc::kErrorResource;
      else
        r.r.rc = register_memory(*cdm, spec, req.vmdh_index, req.mdd_block, r);
      if (r.r.rc == rc::kSuccess && !(req.flags & gni::kMemUpdateRegion)) ++ctr_.registrations;
      return;
    }
    case Op::kMemRegisterSegments: {
      // Variable length: the fixed part, then exactly `count` segments.
      constexpr size_t fixed = offsetof(ctl::MemRegisterSegments, segments);
      auto req = std::make_unique<ctl::MemRegisterSegments>();
      if (len < fixed || len > sizeof(*req)) return bad();
      std::memcpy(req.get(), msg, len);
      if (req->count > ctl::kMaxMemSegments || len != fixed + size_t{req->count} * sizeof(ctl::MemSegment))
        return bad();
      auto& r = init_reply<ctl::MemRegisterReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      RegSpec spec{0, 0, req->flags, req->dst_cq, {req->segments, req->segments + req->count}};
      for (const ctl::MemSegment& g : spec.segments) spec.length += g.length;  // overflow: check_register
      if (!cdm)
        r.r.rc = rc::kInvalidState;
      else if (!may_take(peer, Resource::kRegistrations, cdm->pid(), cdm->credential()))
        r.r.rc = rc::kErrorResource;
      else
        r.r.rc = register_memory(*cdm, spec, req->vmdh_index, req->mdd_block, r);
      if (r.r.rc == rc::kSuccess) ++ctr_.registrations;
      return;
    }
    case Op::kBiConfigSet: {
      ctl::BiConfigSet req;
      if (!parse(msg, len, req)) return bad();
      init_reply<PlainReply>(reply, h).r.rc = bi_.set(req.bw, req.aot_bw, req.modes);
      return;
    }
    case Op::kFaultSet:
    case Op::kFaultGet:
      return handle_fault(peer, h, msg, len, reply);
    case Op::kBiConfigGet: {
      ctl::BiConfigGet req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::BiConfigReply>(reply, h);
      bi_.get(r);
      r.r.rc = rc::kSuccess;
      return;
    }
    case Op::kMemDeregister: {
      ctl::MemDeregister req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<PlainReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      uint32_t vmdh = 0, origin_domain = 0;  // a vMDH binding goes with the registration
      if (auto f = mdh::decode(req.qword1, req.qword2); cdm && f) {
        vmdh = cdm->reg_entry(f->slot).vmdh;
        origin_domain = cdm->reg_entry(f->slot).domain;
      }
      r.r.rc = cdm ? mdd_deregister(*cdm, family(cdm->pid(), cdm->credential()), req) : rc::kInvalidState;
      if (r.r.rc == rc::kSuccess && vmdh)
        bte_.regions().vmdh().unbind(cdm->credential().ptag, cdm->credential().cookie, vmdh - 1, origin_domain);
      if (r.r.rc == rc::kSuccess) ++ctr_.deregistrations;
      return;
    }
    case Op::kCqCreate: {
      ctl::CqCreate req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::CqCreateReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      if (!cdm)
        r.r.rc = rc::kInvalidState;
      else if (!may_take(peer, Resource::kCqs, cdm->pid(), cdm->credential()))
        r.r.rc = rc::kErrorResource;
      else
        r.r.rc = cdm->cq_create(req, r);
      if (r.r.rc == rc::kSuccess) ++ctr_.cq_creates;
      return;
    }
    case Op::kCqDestroy: {
      ctl::CqDestroy req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<PlainReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      r.r.rc = cdm ? cdm->cq_destroy(req) : rc::kInvalidState;
      if (r.r.rc == rc::kSuccess) ++ctr_.cq_destroys;
      return;
    }
    case Op::kPeerLookup: {
      ctl::PeerLookup req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::PeerLookupReply>(reply, h);
      ++ctr_.peer_lookups;
      Credential c{req.ptag, req.cookie};
      CdmRegion* t = nullptr;
      if (req.nic_addr != cfg_.nic_addr) {
        r.r.rc = rc::kNoMatch;
      } else if (!may_use(peer, c)) {
        r.r.rc = refuse_credential(peer, "peer lookup", c);
      } else if (!(t = find_cdm_by_domain(c, req.mem_domain))) {
        r.r.rc = rc::kNoMatch;
      } else {
        r.r.rc = rc::kSuccess;
        r.pid = static_cast<uint32_t>(t->pid());
        r.mem_domain = t->mem_domain();
        r.attach_id = t->attach_id();
        r.region_size = t->region_size();
        r.ro_size = kRoSize;
        pass_fds = {t->ro_memfd(), t->heap_memfd()};
      }
      if (r.r.rc != rc::kSuccess) {
        ++ctr_.peer_lookup_failures;
        spdlog::debug("nic {}: peer lookup of memory domain {} (ptag {}) by pid {} failed: rc {}", cfg_.nic_addr,
                      req.mem_domain, req.ptag, peer.pid, r.r.rc);
      }
      return;
    }
    case Op::kMboxOpen: {
      ctl::MboxOpen req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::MboxOpenReply>(reply, h);
      Credential c{req.ptag, req.cookie};
      CdmRegion* t = nullptr;
      if (!may_use(peer, c))
        r.r.rc = refuse_credential(peer, "mailbox open", c);
      else if (!(t = find_cdm_by_domain(c, mdh::route_of(req.qword1, req.qword2))))
        r.r.rc = rc::kNoMatch;
      else if ((r.r.rc = t->mbox_open(req, r, false)) == rc::kErrorResource)  // not open yet
        r.r.rc = may_take(peer, Resource::kMailboxes, t->pid(), c) ? t->mbox_open(req, r) : rc::kErrorResource;
      if (r.r.rc == rc::kSuccess) ++ctr_.mbox_opens;
      return;
    }
    case Op::kSmsgRelayOpen: {
      ctl::SmsgRelayOpen req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::SmsgRelayOpenReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      r.r.rc = cdm ? smsg_.open(*cdm, req, r) : rc::kInvalidState;
      return;
    }
    case Op::kSmsgRelayDoorbell:
    case Op::kSmsgRelayReleased: {  // one-way notes: no reply
      ctl::SmsgRelayNote req;
      CdmRegion* cdm = owned_cdm(peer);
      if (!parse(msg, len, req) || !cdm) return bad();
      if (static_cast<Op>(h.op) == Op::kSmsgRelayDoorbell)
        smsg_.doorbell(*cdm);
      else
        smsg_.released(*cdm);
      return;
    }
    case Op::kSmsgRelaySend:  // only as a record of the relay ring: one path keeps sends in order
    case Op::kSmsgOpen:
    case Op::kSmsgData:
    case Op::kSmsgAck:
    case Op::kSmsgClose:
      return bad();  // daemon-to-daemon over the fabric only
    case Op::kCredIssue:
    case Op::kCredGrant:
    case Op::kCredRevoke: {
      ctl::Cred req;
      if (!parse(msg, len, req) || (req.flags & ~ctl::kCredGid) != 0) return bad();
      auto& r = init_reply<ctl::CredReply>(reply, h);
      r.r.rc = handle_cred(peer, h, req, r);
      return;
    }
    case Op::kStatus: {
      ctl::Status req;
      if (!parse(msg, len, req)) return bad();
      if (req.offset == 0) peer.status_snapshot = status(&peer).dump();
      const std::string& js = peer.status_snapshot;
      if (req.offset > js.size() || (req.offset != 0 && req.offset == js.size())) return bad();
      size_t n = std::min<size_t>(ctl::kStatusPage, js.size() - req.offset);
      reply.assign(sizeof(ctl::StatusReply) + n, 0);
      ctl::StatusReply r{};
      r.r.h = ctl::Header{ctl::kMagic, ctl::kVersion, h.op, h.seq, static_cast<uint32_t>(reply.size())};
      r.r.rc = rc::kSuccess;
      r.json_length = static_cast<uint32_t>(n);
      r.total_length = static_cast<uint32_t>(js.size());
      std::memcpy(reply.data(), &r, sizeof(r));
      std::memcpy(reply.data() + sizeof(r), js.data() + req.offset, n);
      if (req.offset + n == js.size()) std::string().swap(peer.status_snapshot);
      return;
    }
    case Op::kDgramOpen:
    case Op::kDgramSubmit:
    case Op::kDgramKick:
    case Op::kDgramCancel:
    case Op::kDgramIncoming:
    case Op::kDgramMatched:
    case Op::kDgramRetract:
      return handle_datagram(peer, h, msg, len, reply);
    case Op::kMsgqJoin:
    case Op::kMsgqLeave:
    case Op::kMsgqConnOpen:
    case Op::kMsgqConnect:
    case Op::kMsgqConnRelease:
    case Op::kMsgqLookup:
    case Op::kMsgqRemoteSend:
      return handle_msgq(peer, h, msg, len, reply, pass_fds);
    case Op::kMsgqDeliver:  // daemon-to-daemon, only over the fabric
    case Op::kMsgqCredit:
    case Op::kMsgqResult:
      break;
    case Op::kRemotePost:
      return remote_post(peer, msg, len);
    case Op::kCeCreate:
    case Op::kCeConfigure:
    case Op::kCeDestroy:
    case Op::kCePost:
    case Op::kCeContribute:
    case Op::kCeResult:
    case Op::kCeProbe:
    case Op::kCeProbeReply:
    case Op::kCeMember:
    case Op::kCeLeafGone:
      return handle_ce(peer, h, msg, len, reply);
    case Op::kRmaRequest:  // daemon-to-daemon, only over the fabric
    case Op::kRmaReply:
      break;
    case Op::kBteOpen: {
      ctl::BteOpen req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::BteOpenReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      uint64_t off = 0;
      r.r.rc = cdm ? cdm->bte_ring(off) : rc::kInvalidState;
      if (r.r.rc == rc::kSuccess) r.r.rc = bte_.open_ring(cdm->attach_id(), off, kBteRingCapacity, pass_fds[0]);
      if (r.r.rc == rc::kSuccess) {
        r.ctl_offset = off;
        r.capacity = kBteRingCapacity;
      }
      return;
    }
    case Op::kShutdown: {
      auto& r = init_reply<PlainReply>(reply, h);
      if (peer.uid != 0 && peer.uid != geteuid()) {
        r.r.rc = rc::kPermissionError;
        return;
      }
      r.r.rc = rc::kSuccess;
      shutdown_requested_ = true;
      return;
    }
  }
  bad();
}

void Node::handle_datagram(Peer& peer, const ctl::Header& h, const char* msg, size_t len, std::vector<char>& reply) {
  auto bad = [&] {
    ++ctr_.malformed_messages;
    // Only requests that expect a reply get one (the others are one-way).
    if (h.op == static_cast<uint16_t>(Op::kDgramCancel) || h.op == static_cast<uint16_t>(Op::kDgramOpen))
      init_reply<PlainReply>(reply, h).r.rc = rc::kInvalidParam;
  };
  // Messages between daemons: from a daemon of this host (root or the daemon's own user).
  const bool from_daemon = peer.uid == 0 || peer.uid == geteuid();
  switch (static_cast<Op>(h.op)) {
    case Op::kDgramOpen: {
      ctl::DgramOpen req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::DgramOpenReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      uint64_t off = 0;
      r.r.rc = cdm ? cdm->dgram_ring(off) : rc::kInvalidState;
      if (r.r.rc == rc::kSuccess) {
        r.ctl_offset = off;
        r.capacity = kDgramRingCapacity;
        // The library refuses a post over the per-process limit itself (posts are one-way).
        r.post_limit = static_cast<uint32_t>(
            std::min<uint64_t>(cfg_.limits.per_process[size_t(Resource::kDatagrams)], UINT32_MAX));
      }
      return;
    }
    case Op::kDgramSubmit: {  // one-way: refusals go to the ring as TERMINATED
      ctl::DgramSubmit req;
      if (!parse(msg, len, req)) return bad();
      CdmRegion* cdm = owned_cdm(peer);
      if (!cdm) return;
      dgrams_.kick(*cdm);  // anything held back goes first
      // A client past its limit (the library checks the per-process one) or its credential's
      // sees the post TERMINATED.
      if (!may_take(peer, Resource::kDatagrams, cdm->pid(), cdm->credential()))
        dgrams_.refuse(*cdm, req, rc::kErrorResource);
      else if (dgrams_.post(*cdm, req) == rc::kSuccess)
        ++ctr_.datagrams_posted;
      return;
    }
    case Op::kDgramKick: {
      ctl::DgramKick req;
      if (!parse(msg, len, req)) return bad();
      if (CdmRegion* cdm = owned_cdm(peer)) dgrams_.kick(*cdm);
      return;
    }
    case Op::kDgramCancel: {
      ctl::DgramCancel req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<PlainReply>(reply, h);
      CdmRegion* cdm = owned_cdm(peer);
      r.r.rc = cdm ? dgrams_.cancel(*cdm, req) : rc::kInvalidState;
      if (r.r.rc == rc::kSuccess) ++ctr_.datagrams_cancelled;
      return;
    }
    case Op::kDgramIncoming: {
      ctl::DgramIncoming m;
      if (!parse(msg, len, m) || !from_daemon) return bad();
      return dgrams_.incoming(m);
    }
    case Op::kDgramMatched: {
      ctl::DgramMatched m;
      if (!parse(msg, len, m) || !from_daemon) return bad();
      return dgrams_.matched(m);
    }
    case Op::kDgramRetract: {
      ctl::DgramRetract m;
      if (!parse(msg, len, m) || !from_daemon) return bad();
      return dgrams_.retract(m);
    }
    default:
      return bad();
  }
}

void Node::set_fabric(UdpFabric* f) {
  fabric_ = f;
  if (!f) return smsg_.stop();
  smsg_.start(f->io());
  f->on_peer_lost([this](uint32_t nic) {
    remote_out_.peer_lost(nic);
    remote_in_.peer_lost(nic);
    smsg_.peer_lost(nic);
    msgq_relay_.peer_lost(nic);
  });
  f->on_progress([this] {
    if (msgq_relay_.busy()) {
      msgq_relay_.progress();
      // Receivers free ring slots without telling anybody: look again shortly.
      if (msgq_relay_.busy()) fabric_->progress_in(msgq_relay_.poll_us());
    }
    if (remote_in_.backlog()) remote_in_.retry();
    if (remote_out_.waiting()) remote_out_.pump();
    smsg_.progress();
  });
}

bool Node::send_to_node(uint32_t node, const void* m, size_t n) {
  // A daemon of this host is reached by its socket; one elsewhere by the fabric.
  bool ok = fabric_ && fabric_->has(node) && !links_.local(node) ? fabric_->send(node, m, n) : links_.send(node, m, n);
  count_link(node, n, ok);
  return ok;
}

void Node::handle_ce(Peer& peer, const ctl::Header& h, const char* msg, size_t len, std::vector<char>& reply) {
  namespace ace = abi::ce;
  const Op op = static_cast<Op>(h.op);
  const bool wants_reply = op == Op::kCeCreate || op == Op::kCeConfigure || op == Op::kCeDestroy;
  auto bad = [&] {
    ++ctr_.malformed_messages;
    if (wants_reply) init_reply<PlainReply>(reply, h).r.rc = rc::kInvalidParam;
  };
  CdmRegion* cdm = owned_cdm(peer);
  // The collective engine is an Aries block; a Gemini NIC has none.
  const bool aries = cfg_.device_type == gni::kDeviceAries;
  switch (op) {
    case Op::kCeCreate: {
      ace::CeCreate req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ace::CeCreateReply>(reply, h);
      r.r.rc = !aries ? rc::kIllegalOp : cdm ? ce_.create(*cdm, r.ce_id) : rc::kInvalidState;
      return;
    }
    case Op::kCeConfigure: {
      ace::CeConfigure req;
      if (!parse(msg, len, req)) return bad();
      init_reply<PlainReply>(reply, h).r.rc = !aries ? rc::kIllegalOp : cdm ? ce_.configure(*cdm, req) : rc::kInvalidState;
      return;
    }
    case Op::kCeDestroy: {
      ace::CeDestroy req;
      if (!parse(msg, len, req)) return bad();
      init_reply<PlainReply>(reply, h).r.rc = !aries ? rc::kIllegalOp : cdm ? ce_.destroy(*cdm, req.ce_id) : rc::kInvalidState;
      return;
    }
    case Op::kCePost: {  // one-way: refusals become error results
      ace::CePost req;
      if (!parse(msg, len, req) || !cdm || !aries) return bad();
      return ce_.post(*cdm, req);
    }
    case Op::kCeMember: {  // one-way
      ace::CeMember req;
      if (!parse(msg, len, req) || !cdm || !aries) return bad();
      return ce_.member(*cdm, req);
    }
    default: {
      // Between the daemons of this host (root or the daemon's own user); the message names
      // its sender, which a local daemon is trusted to give truthfully.
      if (peer.uid != 0 && peer.uid != geteuid()) return bad();
      uint32_t origin = 0;
      if (len < sizeof(ctl::Header) + sizeof origin) return bad();
      std::memcpy(&origin, msg + sizeof(ctl::Header), sizeof origin);
      if (const char* why = ce_.message(origin, h, msg, len)) {
        ++ctr_.malformed_messages;
        spdlog::warn("nic {}: CE message from pid {} dropped: {}", cfg_.nic_addr, peer.pid, why);
      }
      return;
    }
  }
}

uint64_t Node::fabric_reach(uint32_t node) {
  if (!fabric_ || !fabric_->has(node) || links_.local(node)) return abi::cqe::kErrNoPeer;
  return fabric_->peer_up(node) ? abi::cqe::kOk : abi::cqe::kErrTransient;
}

// A post of one of our CDMs for a node of another host (one-way: its outcome is CQ events).
void Node::remote_post(Peer& peer, const char* msg, size_t len) {
  abi::remote::RemotePost p;
  CdmRegion* cdm = owned_cdm(peer);
  if (!cdm || len < sizeof p) {
    ++ctr_.malformed_messages;
    return;
  }
  std::memcpy(&p, msg, sizeof p);
  if (p.inline_length != len - sizeof p || p.inline_length > abi::remote::kInlineMax) {
    ++ctr_.malformed_messages;
    return;
  }
  auto region = bte_.regions().local(cdm->attach_id());
  if (!region) {
    ++ctr_.malformed_messages;
    return;
  }
  remote_out_.post(region, p, reinterpret_cast<const uint8_t*>(msg) + sizeof p);
}

void Node::fabric_message(uint32_t from, const uint8_t* msg, size_t len) {
  ctl::Header h;
  auto drop = [&](const char* why) {
    ++ctr_.malformed_messages;
    spdlog::warn("nic {}: message from NIC address {} over the fabric dropped: {}", cfg_.nic_addr, from, why);
  };
  if (len < sizeof h) return drop("shorter than a header");
  std::memcpy(&h, msg, sizeof h);
  if (h.magic != ctl::kMagic || h.version != ctl::kVersion || h.length != len) return drop("bad header");
  const char* m = reinterpret_cast<const char*>(msg);
  switch (static_cast<Op>(h.op)) {
    case Op::kDgramIncoming: {
      ctl::DgramIncoming in;
      if (!parse(m, len, in)) return drop("bad DgramIncoming");
      if (in.origin_node != from) return drop("DgramIncoming about another node");
      return dgrams_.incoming(in);
    }
    case Op::kDgramMatched: {
      ctl::DgramMatched mt;
      if (!parse(m, len, mt)) return drop("bad DgramMatched");
      if (mt.peer_node != from) return drop("DgramMatched about another node");
      return dgrams_.matched(mt);
    }
    case Op::kDgramRetract: {
      ctl::DgramRetract r;
      if (!parse(m, len, r)) return drop("bad DgramRetract");
      if (r.origin_node != from) return drop("DgramRetract about another node");
      return dgrams_.retract(r);
    }
    case Op::kSmsgOpen:
    case Op::kSmsgData:
    case Op::kSmsgAck:
    case Op::kSmsgClose:
      if (const char* why = smsg_.fabric_message(from, h, m, len)) return drop(why);
      return;
    case Op::kRmaRequest:
      if (!remote_in_.request(from, msg, len)) return drop("bad RmaRequest");
      return;
    case Op::kRmaReply:
      if (!remote_out_.reply(from, msg, len)) return drop("bad RmaReply");
      return;
    case Op::kMsgqDeliver:  // the progress hook after this receive batch reports credits
      if (!msgq_relay_.deliver(from, msg, len)) return drop("bad MsgqDeliver");
      return;
    case Op::kMsgqCredit:
      if (!msgq_relay_.credit(from, msg, len)) return drop("bad MsgqCredit");
      return;
    case Op::kMsgqResult:
      if (!msgq_relay_.result(from, msg, len)) return drop("bad MsgqResult");
      return;
    case Op::kCeContribute:
    case Op::kCeResult:
    case Op::kCeProbe:
    case Op::kCeProbeReply:
    case Op::kCeLeafGone:
      if (const char* why = ce_.message(from, h, m, len)) return drop(why);
      return;
    default:
      return drop("not a daemon-to-daemon message");
  }
}

void Node::handle_msgq(Peer& peer, const ctl::Header& h, const char* msg, size_t len, std::vector<char>& reply,
                       PassFds& pass_fds) {
  auto bad = [&] {
    ++ctr_.malformed_messages;
    init_reply<PlainReply>(reply, h).r.rc = rc::kInvalidParam;
  };
  // Every request but a lookup comes on an attach connection, for the CDM's own domain.
  CdmRegion* cdm = owned_cdm(peer);
  MsgqSegment* seg = nullptr;
  if (cdm)
    if (auto it = msgqs_.find(cdm->credential()); it != msgqs_.end()) seg = it->second.get();
  const bool member = seg && seg->is_member(cdm->attach_id());
  switch (static_cast<Op>(h.op)) {
    case Op::kMsgqJoin: {
      ctl::MsgqJoin req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::MsgqJoinReply>(reply, h);
      auto refuse = [&](int code, const char* why) {
        ++ctr_.msgq_join_refused;
        spdlog::warn("nic {}: MSGQ join of inst {} (pid {}) refused: {}", cfg_.nic_addr, cdm ? cdm->inst_id() : 0,
                     peer.pid, why);
        r.r.rc = code;
      };
      if (!cdm) return refuse(rc::kInvalidState, "not attached");
      if (!msgq::attrs_valid(req.attrs)) return refuse(rc::kInvalidParam, "invalid attributes");
      if (seg && !(seg->attrs() == req.attrs))
        return refuse(rc::kInvalidState, "attributes differ from those of the node's queue");
      if (!seg) {
        try {
          auto created = std::make_unique<MsgqSegment>(cfg_.nic_addr, cdm->credential(), req.attrs, next_msgq_++);
          seg = created.get();
          msgqs_[cdm->credential()] = std::move(created);
        } catch (const std::exception& e) {
          return refuse(rc::kErrorNomem, e.what());
        }
      }
      r.r.rc = seg->join(cdm->attach_id(), cdm->pid(), cdm->inst_id(), r.member, r.member_gen);
      if (r.r.rc != rc::kSuccess) {
        refuse(r.r.rc, "already joined, or nloc_insts instances joined already");
        if (seg->live_members() == 0) msgqs_.erase(cdm->credential());
        return;
      }
      ++ctr_.msgq_joins;
      r.segment_id = seg->id();
      r.size = seg->size();
      pass_fds = {seg->ro_memfd(), seg->rw_memfd()};
      return;
    }
    case Op::kMsgqLeave: {
      ctl::MsgqLeave req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<PlainReply>(reply, h);
      if (!member) {
        r.r.rc = rc::kInvalidState;
        return;
      }
      msgq_leave(*cdm);
      r.r.rc = rc::kSuccess;
      return;
    }
    case Op::kMsgqRemoteSend: {  // one-way: a refusal is counted, the sender not told
      abi::remote::MsgqRemoteSend req;
      if (len != sizeof req || !member) {
        ++ctr_.malformed_messages;
        return;
      }
      std::memcpy(&req, msg, sizeof req);
      if (!fabric_ || fabric_reach(req.dst_pe) == abi::cqe::kErrNoPeer || !msgq_relay_.forward(*cdm, *seg, req))
        ++ctr_.malformed_messages;
      return;
    }
    case Op::kMsgqConnOpen:
    case Op::kMsgqConnect:
    case Op::kMsgqConnRelease: {
      ctl::MsgqConn req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::MsgqConnReply>(reply, h);
      if (!member) {
        r.r.rc = rc::kInvalidState;
        return;
      }
      Op op = static_cast<Op>(h.op);
      if (op == Op::kMsgqConnOpen)
        r.r.rc = seg->conn_open(req.remote_pe, r.conn, r.gen);
      else if (op == Op::kMsgqConnect)
        r.r.rc = seg->connect(req.remote_pe, req.remote_insts, r.conn, r.gen);
      else
        r.r.rc = seg->conn_release(req.remote_pe);
      return;
    }
    case Op::kMsgqLookup: {
      ctl::MsgqLookup req;
      if (!parse(msg, len, req)) return bad();
      auto& r = init_reply<ctl::MsgqLookupReply>(reply, h);
      ++ctr_.msgq_lookups;
      Credential c{req.ptag, req.cookie};
      auto it = msgqs_.find(c);
      if (req.nic_addr != cfg_.nic_addr) {
        r.r.rc = rc::kNoMatch;
      } else if (!may_use(peer, c)) {
        r.r.rc = refuse_credential(peer, "MSGQ lookup", c);
      } else if (it == msgqs_.end()) {
        r.r.rc = rc::kNoMatch;
      } else {
        r.r.rc = rc::kSuccess;
        r.segment_id = it->second->id();
        r.size = it->second->size();
        pass_fds = {it->second->ro_memfd(), it->second->rw_memfd()};
      }
      return;
    }
    default:
      return bad();
  }
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

void Node::msgq_leave(const CdmRegion& cdm) {
  auto it = msgqs_.find(cdm.credential());
  if (it == msgqs_.end() || it->second->leave(cdm.attach_id()) != rc::kSuccess) return;
  if (it->second->live_members() == 0) {
    // Remote senders keep their mappings: they see the segment dead and stop.
    it->second->kill(msgq::kSegmentDead);
    spdlog::info("nic {}: MSGQ segment of ptag {} reclaimed (last member gone)", cfg_.nic_addr,
                 it->first.ptag);
    msgqs_.erase(it);
  }
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

void Node::connection_closed(Peer& peer) {
  auto it = cdms_.find(peer.attach_id);
  if (it == cdms_.end()) return;
  const std::vector<uint32_t> own_slots = mdd_own_slots(*it->second);
  dgrams_.cdm_gone(peer.attach_id);
  smsg_.cdm_gone(peer.attach_id);
  msgq_leave(*it->second);
  it->second->kill(kRegionDead);
  bte_.region_gone(peer.attach_id);
  spdlog::info("nic {}: inst {} of pid {} is gone; its registrations, CQs and mailboxes are reclaimed",
               cfg_.nic_addr, it->second->inst_id(), peer.pid);
  ++ctr_.detaches;
  pid_t pid = it->second->pid();
  Credential cred = it->second->credential();
  stats_.cdm_detached(peer.attach_id, it->second->counter_block());
  leases_.remove(it->second->header());
  domains_[it->second->mem_domain()] = 0;
  bte_.regions().vmdh().unbind_domain(it->second->mem_domain());  // its vMDH indices are free again
  cdm_index_.remove(peer.attach_id, pid, cred, it->second->inst_id());
  cdms_.erase(it);
  mdd_drop_origin(peer.attach_id, own_slots, family(pid, cred));
  ce_.cdm_gone(peer.attach_id);
  peer.attach_id = 0;
}

void Node::shutdown() {
  smsg_.stop();
  ce_.stop();
  for (auto& [id, r] : cdms_) {
    r->kill(kRegionNicDown);
    bte_.region_gone(id);
    stats_.cdm_detached(id, r->counter_block());
    leases_.remove(r->header());
  }
  cdms_.clear();
  cdm_index_.clear();
  domains_.fill(0);
  for (auto& [c, seg] : msgqs_) seg->kill(msgq::kSegmentNicDown);
  msgqs_.clear();
  bte_.stop();
}

nlohmann::json Node::status(const Peer* viewer) const {
  using nlohmann::json;
  // Another user's cookie is not shown: it would not let the viewer in (the uid check
  // does not depend on secrecy), but it is the job's business, as on a Cray.
  auto shown_cookie = [&](const Credential& c) -> json {
    if (!viewer || may_use(*viewer, c)) return c.cookie;
    return nullptr;
  };
  json cdms = json::array();
  for (const auto& [id, r] : cdms_) {
    cdms.push_back({{"attach_id", id},
                    {"pid", r->pid()},
                    {"inst_id", r->inst_id()},
                    {"ptag", r->credential().ptag},
                    {"cookie", shown_cookie(r->credential())},
                    {"alive", r->alive()},
                    {"registrations", r->live_registrations()},
                    {"cqs", r->live_cqs()},
                    {"mailboxes", r->mailboxes()},
                    {"heap_bytes", r->heap_in_use()}});
  }
  json msgqs = json::array();
  for (const auto& [c, seg] : msgqs_) msgqs.push_back(seg->status());
  json creds = json::array();
  for (const auto& [c, o] : credentials_) {
    json e{{"ptag", c.ptag}, {"cookie", shown_cookie(c)}, {"uid", o.uid}};
    if (o.has_gid) e["gid"] = o.gid;
    creds.push_back(e);
  }
  auto up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return json{{"nic_addr", cfg_.nic_addr},
              {"device_type", cfg_.device_type == rc::kDeviceAries ? "aries" : "gemini"},
              {"pid", getpid()},
              {"socket", cfg_.socket_path},
              {"counter_page", stats_.path()},
              {"uptime_s", up},
              {"credentials", creds},
              {"cdms", cdms},
              {"bte", bte_.status()},
              {"remote_ops", {{"initiator", remote_out_.status()}, {"target", remote_in_.status()}}},
              {"collective_engine", ce_.status()},
              {"msgq_relay", msgq_relay_.status()},
              {"msgq", msgqs},
              {"fault", {{"enabled", fault_.config().enabled != 0},
                         {"seed", fault_.config().seed},
                         {"spec", nicemu::fault::to_spec(fault_.config())},
                         {"page", fault_.path()}}},
              {"fabric", fabric_ ? fabric_->status() : nlohmann::json(nullptr)},
              {"smsg_relay", smsg_.status()},
              {"counters",
               {{"connections", ctr_.connections},
                {"attaches", ctr_.attaches},
                {"attach_refused", ctr_.attach_refused},
                {"detaches", ctr_.detaches},
                {"registrations", ctr_.registrations},
                {"deregistrations", ctr_.deregistrations},
                {"cq_creates", ctr_.cq_creates},
                {"cq_destroys", ctr_.cq_destroys},
                {"peer_lookups", ctr_.peer_lookups},
                {"peer_lookup_failures", ctr_.peer_lookup_failures},
                {"mbox_opens", ctr_.mbox_opens},
                {"malformed_messages", ctr_.malformed_messages},
                {"credentials_issued", ctr_.credentials_issued},
                {"datagrams_posted", ctr_.datagrams_posted},
                {"datagrams_cancelled", ctr_.datagrams_cancelled},
                {"datagrams_pending", dgrams_.pending_posts()},
                {"datagrams_incoming", dgrams_.incoming_count()},
                {"datagrams_backlog", dgrams_.backlog_count()},
                {"msgq_joins", ctr_.msgq_joins},
                {"msgq_join_refused", ctr_.msgq_join_refused},
                {"msgq_lookups", ctr_.msgq_lookups},
                {"credential_refused", ctr_.credential_refused},
                {"resource_refused", ctr_.resource_refused},
                {"accept_deferred", ctr_.accept_deferred}}}};
}

}  // namespace nicemu::daemon
