#include "nicemu/daemon/node.h"
#include "nicemu/daemon/cdm/process_mdd.h"
#include "nicemu/daemon/control/request.h"
#include "nicemu/daemon/transport/udp_fabric.h"

#include <unistd.h>

#include <cstring>
#include <memory>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "nicemu/abi/gni_values.h"
#include "nicemu/fault/fault_spec.h"
#include "nicemu/xmem/cross_copy.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

Node::Node(NodeConfig cfg)
    : cfg_(std::move(cfg)),
      dgrams_(
          cfg_.nic_addr, port_.sender(),
          [this](uint64_t id) -> CdmRegion* {
            auto it = cdms_.find(id);
            return it == cdms_.end() ? nullptr : it->second.get();
          },
          [this](const Credential& c, uint32_t inst) { return find_cdm(c, inst); }),
      remote_out_(port_.remote_sender(), [this](uint32_t node) { return port_.reach(node); }),
      remote_in_(cfg_.nic_addr, bte_.regions(), port_.remote_sender()),
      msgq_relay_(
          cfg_.nic_addr, port_.remote_sender(), [this](uint32_t node) { return port_.peer_up(node); },
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
                [this](uint32_t node) { return port_.remote(node); }, port_.remote_sender(),
                [this](uint32_t node) { return port_.peer_up(node); }}),
      ce_(cfg_.nic_addr, CeEnv{port_.sender(), [this](uint64_t id) -> CdmRegion* {
                                 auto it = cdms_.find(id);
                                 return it != cdms_.end() && it->second->alive() ? it->second.get() : nullptr;
                               }}) {
  // Messages from other hosts' daemons go from the port to the service of their type.
  using enum Op;
  port_.route({kRmaReply}, remote_out_);
  port_.route({kRmaRequest}, remote_in_);
  port_.route({kSmsgOpen, kSmsgData, kSmsgAck, kSmsgClose}, smsg_);
  port_.route({kMsgqDeliver, kMsgqCredit, kMsgqResult}, msgq_relay_);
  port_.route({kDgramIncoming, kDgramMatched, kDgramRetract}, dgrams_);
  port_.route({kCeContribute, kCeResult, kCeProbe, kCeProbeReply, kCeLeafGone}, ce_);
  port_.route({kDrcSync}, drc_sync_);
  // Cookies come from the kernel's CSPRNG (libsodium): a user must not be able to predict
  // the credential of another user's next job.
  if (sodium_init() < 0) throw std::runtime_error("libsodium initialisation failed");
  xmem::on_refused([] {
    spdlog::error("cross-memory attach refused (EPERM): the daemon must run as the clients' user or root, and "
                  "kernel.yama.ptrace_scope / seccomp must allow process_vm_readv/writev");
  });
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
  load_credentials();
}

std::array<uint64_t, 2> Node::usage(Resource r, pid_t pid, const Credential& c) const {
  std::array<uint64_t, 2> u{0, 0};
  // A process's registrations are in one MDD table for all its CDMs of one domain
  // (process_mdd.h): count the room granted to it (on_reg_budget) once per (process, domain).
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
        m = cdm->mdd().granted;
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

void Node::set_fabric(UdpFabric* f) {
  port_.set_transport(f);
  if (!f) return smsg_.stop();
  smsg_.start(f->io());
}

// The control requests, by type: the handlers live in control/, one file per area. A type
// without a handler (daemon-to-daemon messages, which come only over the fabric) is refused.
const Node::Table& Node::table() {
  static const Table t = [] {
    Table t{};
    auto on = [&t](std::initializer_list<Op> ops, Handler f) {
      for (Op op : ops) t.at(static_cast<uint16_t>(op)) = f;
    };
    using enum Op;
    on({kHello}, &Node::on_hello);
    on({kAttach}, &Node::on_attach);
    on({kCredIssue, kCredGrant, kCredRevoke}, &Node::on_cred);
    on({kDrc}, &Node::on_drc);
    on({kShutdown}, &Node::on_shutdown);
    on({kMemRegister}, &Node::with_cdm<ctl::MemRegister, ctl::MemRegisterReply, &Node::on_mem_register>);
    on({kMemRegisterSegments}, &Node::on_mem_register_segments);
    on({kMemDeregister}, &Node::with_cdm<ctl::MemDeregister, PlainReply, &Node::on_mem_deregister>);
    on({kRegBudget}, &Node::on_reg_budget);
    on({kCqCreate}, &Node::with_cdm<ctl::CqCreate, ctl::CqCreateReply, &Node::on_cq_create>);
    on({kCqDestroy}, &Node::with_cdm<ctl::CqDestroy, PlainReply, &Node::on_cq_destroy>);
    on({kPeerLookup}, &Node::on_peer_lookup);
    on({kMboxOpen}, &Node::on_mbox_open);
    on({kBteOpen}, &Node::with_cdm<ctl::BteOpen, ctl::BteOpenReply, &Node::on_bte_open>);
    on({kBiConfigSet}, &Node::on_bi_config_set);
    on({kBiConfigGet}, &Node::on_bi_config_get);
    on({kFaultSet, kFaultGet}, &Node::handle_fault);
    on({kStatus}, &Node::on_status);
    // From this host's other daemons too (datagram matching): handle_datagram checks who.
    on({kDgramOpen}, &Node::with_cdm<ctl::DgramOpen, ctl::DgramOpenReply, &Node::on_dgram_open>);
    on({kDgramCancel}, &Node::with_cdm<ctl::DgramCancel, PlainReply, &Node::on_dgram_cancel>);
    on({kDgramSubmit, kDgramKick, kDgramIncoming, kDgramMatched, kDgramRetract}, &Node::handle_datagram);
    on({kMsgqJoin, kMsgqLeave, kMsgqConnOpen, kMsgqConnect, kMsgqConnRelease, kMsgqLookup, kMsgqRemoteSend},
       &Node::handle_msgq);
    on({kRemotePost}, &Node::on_remote_post);
    // kSmsgRelaySend only as a record of the relay ring: one path keeps sends in order.
    on({kSmsgRelayOpen}, &Node::with_cdm<ctl::SmsgRelayOpen, ctl::SmsgRelayOpenReply, &Node::on_smsg_relay_open>);
    on({kSmsgRelayDoorbell, kSmsgRelayReleased}, &Node::on_smsg_relay_note);
    on({kCeCreate, kCeConfigure, kCeDestroy, kCePost, kCeContribute, kCeResult, kCeProbe, kCeProbeReply, kCeMember,
        kCeLeafGone, kCeOpen, kCeRing},
       &Node::handle_ce);
    return t;
  }();
  return t;
}

void Node::bad(Request& q) {
  ++ctr_.malformed_messages;
  init_reply<PlainReply>(q.reply, q.h).r.rc = rc::kInvalidParam;
}

void Node::handle(Peer& peer, const char* msg, size_t len, std::vector<char>& reply, PassFds& pass_fds) {
  pass_fds.fill(-1);
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
  Request q{peer, h, msg, len, reply, pass_fds};
  Handler f = h.op < table().size() ? table()[h.op] : nullptr;
  if (!f) return bad(q);
  (this->*f)(q);
}

void Node::connection_closed(Peer& peer) {
  auto it = cdms_.find(peer.attach_id);
  if (it == cdms_.end()) return;
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

}  // namespace nicemu::daemon
