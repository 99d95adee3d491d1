#include "nicemu/daemon/node.h"
#include "nicemu/daemon/transport/udp_fabric.h"

#include <unistd.h>

#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>
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
          cfg_.nic_addr, port_.sender(), [this](uint64_t id) { return cdms_.get(id); },
          [this](const Credential& c, uint32_t inst) { return cdms_.find(c, inst); }),
      remote_out_(port_.remote_sender(), [this](uint32_t node) { return port_.reach(node); }),
      remote_in_(cfg_.nic_addr, bte_.regions(), port_.remote_sender()),
      ofi_(cfg_.nic_addr, bte_.regions(), port_.remote_sender()),
      msgq_relay_(
          cfg_.nic_addr, port_.remote_sender(), [this](uint32_t node) { return port_.peer_up(node); },
          [this](const Credential& c) { return msgqs_.find(c); },
          [this](const std::function<void(MsgqSegment&)>& f) { msgqs_.for_each(f); },
          [this](uint64_t attach_id, uint32_t cq, uint64_t entry) {
            if (CdmRegion* r = cdms_.live(attach_id)) r->push_cqes(cq, &entry, 1);
          }),
      smsg_(cfg_.nic_addr, stats_,
            SmsgRelayEnv{
                [this](uint64_t id) { return cdms_.get(id); },
                [this](const Credential& c, uint32_t domain) { return cdms_.find_by_domain(c, domain); },
                [this](CdmRegion& t) {
                  Peer remote{};  // a mailbox opened for a sender of another host counts as the receiver's
                  remote.uid = static_cast<uid_t>(-1);
                  return quotas_.may_take(remote, Resource::kMailboxes, t.pid(), t.credential());
                },
                [this](uint32_t node) { return port_.remote(node); }, port_.remote_sender(),
                [this](uint32_t node) { return port_.peer_up(node); },
                [this](uint64_t attach_id, uint32_t node) { return remote_out_.unsent(attach_id, node); },
                [this] { return port_.overloaded(); }}),
      ce_(cfg_.nic_addr, CeEnv{port_.sender(), [this](uint64_t id) { return cdms_.live(id); }}) {
  // Messages from other hosts' daemons go from the port to the service of their type.
  using enum Op;
  port_.route({kRmaReply}, remote_out_);
  // A CDM's relayed SMSG messages wait behind its RMA pieces still to be sent (docs/ordering.md).
  remote_out_.on_all_sent([this](uint32_t node) { smsg_.rma_sent(node); });
  port_.route({kRmaRequest}, remote_in_);
  port_.route({kOfiAsk, kOfiAnswer}, ofi_);
  ofi_.set_msgq_members([this](uint32_t ptag, uint32_t cookie) {
    std::vector<uint64_t> ids;
    if (MsgqSegment* s = msgqs_.find(Credential{ptag, cookie})) {
      const auto& v = s->view();
      for (uint32_t i = 0; i < v.attrs.nloc_insts; ++i) {
        uint32_t inst, gen;
        if (v.read_member(i, inst, gen)) ids.push_back(v.member(i)->attach_id);
      }
    }
    return ids;
  });
  port_.route({kSmsgOpen, kSmsgData, kSmsgAck, kSmsgClose}, smsg_);
  port_.route({kMsgqDeliver, kMsgqCredit, kMsgqResult}, msgq_relay_);
  port_.route({kDgramIncoming, kDgramMatched, kDgramRetract}, dgrams_);
  port_.route({kCeContribute, kCeResult, kCeProbe, kCeProbeReply, kCeLeafGone}, ce_);
  port_.route({kDrcState, kDrcAck, kDrcTableAsk, kDrcTableEnd}, creds_);
  // Cookies come from the kernel's CSPRNG (libsodium): a user must not be able to predict
  // the credential of another user's next job.
  if (sodium_init() < 0) throw std::runtime_error("libsodium initialisation failed");
  xmem::on_refused([] {
    spdlog::error("cross-memory attach refused (EPERM/EACCES/ENOSYS): RDMA, and FMA and AMOs of clients that "
                  "cannot reach their peers themselves, complete with MEM_ACCESS errors; the daemon needs root or "
                  "CAP_SYS_PTRACE for clients of other users, and a seccomp profile that allows process_vm_readv/writev "
                  "(counted in xmem_refused; docs/decisions.md)");
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
  fault_.publish(fc, seed_given, "start");
  dgrams_.set_fault_config(&fault_.config());
  creds_.load();
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
    namespace c = control;
    on({kHello}, [](Node& n, Request& q) { c::hello(q, n.nic_); });
    on({kAttach}, [](Node& n, Request& q) {
      c::attach(q, n.nic_, n.creds_, n.cdms_, n.quotas_, n.bte_, n.stats_, n.ctr_);
    });
    on({kCredIssue, kCredGrant, kCredRevoke}, [](Node& n, Request& q) { c::cred(q, n.creds_, n.ctr_); });
    on({kDrc}, [](Node& n, Request& q) { c::drc(q, n.creds_, n.ctr_); });
    on({kDrcState, kDrcAck, kDrcTableAsk, kDrcTableEnd}, [](Node& n, Request& q) { c::drc_peer(q, n.creds_, n.ctr_); });
    on({kShutdown}, [](Node& n, Request& q) { c::shutdown(q, n.shutdown_requested_); });
    on({kMemRegister}, [](Node& n, Request& q) {
      c::mem_register(q, n.nic_, n.cdms_, n.bte_.regions().vmdh(), n.ctr_);
    });
    on({kMemRegisterSegments}, [](Node& n, Request& q) {
      c::mem_register_segments(q, n.nic_, n.cdms_, n.bte_.regions().vmdh(), n.ctr_);
    });
    on({kMemDeregister}, [](Node& n, Request& q) { c::mem_deregister(q, n.cdms_, n.bte_.regions().vmdh(), n.ctr_); });
    on({kRegBudget}, [](Node& n, Request& q) { c::reg_budget(q, n.cdms_, n.quotas_, n.ctr_); });
    on({kCqCreate}, [](Node& n, Request& q) { c::cq_create(q, n.cdms_, n.quotas_, n.ctr_); });
    on({kCqDestroy}, [](Node& n, Request& q) { c::cq_destroy(q, n.cdms_, n.ctr_); });
    on({kPeerLookup}, [](Node& n, Request& q) { c::peer_lookup(q, n.nic_, n.creds_, n.cdms_, n.ctr_); });
    on({kMboxOpen}, [](Node& n, Request& q) { c::mbox_open(q, n.creds_, n.cdms_, n.quotas_, n.ctr_); });
    on({kBteOpen}, [](Node& n, Request& q) { c::bte_open(q, n.cdms_, n.bte_, n.ctr_); });
    on({kBiConfigSet}, [](Node& n, Request& q) { c::bi_config_set(q, n.bi_, n.ctr_); });
    on({kBiConfigGet}, [](Node& n, Request& q) { c::bi_config_get(q, n.bi_, n.ctr_); });
    on({kFaultSet, kFaultGet}, [](Node& n, Request& q) { c::fault(q, n.fault_, n.ctr_); });
    on({kStatus}, [](Node& n, Request& q) {
      c::status(q, [&n](const Peer& viewer) { return n.status(&viewer); }, n.ctr_);
    });
    // From this host's other daemons too (datagram matching): control::datagram checks who.
    on({kDgramOpen}, [](Node& n, Request& q) { c::dgram_open(q, n.cdms_, n.quotas_, n.ctr_); });
    on({kDgramCancel}, [](Node& n, Request& q) { c::dgram_cancel(q, n.cdms_, n.dgrams_, n.ctr_); });
    on({kDgramSubmit, kDgramKick, kDgramIncoming, kDgramMatched, kDgramRetract},
       [](Node& n, Request& q) { c::datagram(q, n.cdms_, n.dgrams_, n.quotas_, n.ctr_); });
    on({kMsgqJoin, kMsgqLeave, kMsgqConnOpen, kMsgqConnect, kMsgqConnRelease, kMsgqLookup, kMsgqRemoteSend},
       [](Node& n, Request& q) { c::msgq(q, n.nic_, n.creds_, n.cdms_, n.msgqs_, n.port_, n.msgq_relay_, n.ctr_); });
    on({kRemotePost}, [](Node& n, Request& q) { c::remote_post(q, n.cdms_, n.bte_, n.remote_out_, n.smsg_, n.ctr_); });
    on({kOfiPublish, kOfiLookup}, [](Node& n, Request& q) { c::ofi(q, n.cdms_, n.port_, n.ofi_, n.ctr_); });
    // kSmsgRelaySend only as a record of the relay ring: one path keeps sends in order.
    on({kSmsgRelayOpen}, [](Node& n, Request& q) { c::smsg_relay_open(q, n.cdms_, n.smsg_, n.ctr_); });
    on({kSmsgRelayDoorbell, kSmsgRelayReleased},
       [](Node& n, Request& q) { c::smsg_relay_note(q, n.cdms_, n.smsg_, n.ctr_); });
    on({kCeCreate, kCeConfigure, kCeDestroy, kCePost, kCeContribute, kCeResult, kCeProbe, kCeProbeReply, kCeMember,
        kCeLeafGone, kCeOpen, kCeRing},
       [](Node& n, Request& q) { c::ce(q, n.nic_, n.cdms_, n.ce_, n.ctr_); });
    return t;
  }();
  return t;
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
  if (!f) return bad(q, ctr_);
  f(*this, q);
}

bool Node::must_wait(const char* msg, size_t len) const {
  if (creds_.converged() || len < sizeof(ctl::Header)) return false;
  ctl::Header h;
  std::memcpy(&h, msg, sizeof h);
  switch (static_cast<Op>(h.op)) {
    case Op::kAttach:
    case Op::kDrc:
    case Op::kCredIssue:
    case Op::kCredGrant:
    case Op::kCredRevoke: return true;
    default: return false;
  }
}

void Node::connection_closed(Peer& peer) {
  CdmRegion* cdm = cdms_.get(peer.attach_id);
  if (!cdm) return;
  dgrams_.cdm_gone(peer.attach_id);
  smsg_.cdm_gone(peer.attach_id);
  ofi_.cdm_gone(peer.attach_id);
  msgqs_.leave(*cdm);
  cdm->kill(kRegionDead);
  bte_.region_gone(peer.attach_id);
  spdlog::info("nic {}: inst {} of pid {} is gone; its registrations, CQs and mailboxes are reclaimed",
               cfg_.nic_addr, cdm->inst_id(), peer.pid);
  ++ctr_.detaches;
  stats_.cdm_detached(peer.attach_id, cdm->counter_block());
  bte_.regions().vmdh().unbind_domain(cdm->mem_domain());  // its vMDH indices are free again
  cdms_.remove(peer.attach_id);
  ce_.cdm_gone(peer.attach_id);
  peer.attach_id = 0;
}

void Node::shutdown() {
  smsg_.stop();
  ce_.stop();
  for (auto& [id, r] : cdms_.all()) {
    r->kill(kRegionNicDown);
    bte_.region_gone(id);
    stats_.cdm_detached(id, r->counter_block());
  }
  cdms_.clear();
  msgqs_.kill_all();
  bte_.stop();
}

void to_json(nlohmann::json& j, const Counter& c) { j = c.value(); }

bool Node::reload_fault(const std::string& spec, std::string& error) { return fault_.reload(spec, error); }

nlohmann::json Node::status(const Peer* viewer) const {
  using nlohmann::json;
  json cdms = json::array();
  for (const auto& [id, r] : cdms_.all()) {
    cdms.push_back({{"attach_id", id},
                    {"pid", r->pid()},
                    {"inst_id", r->inst_id()},
                    {"ptag", r->credential().ptag},
                    {"cookie", creds_.shown_cookie(viewer, r->credential())},
                    {"alive", r->alive()},
                    {"registrations", r->live_registrations()},
                    {"cqs", r->live_cqs()},
                    {"mailboxes", r->mailboxes()},
                    {"heap_bytes", r->heap_in_use()}});
  }
  auto up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return json{{"nic_addr", cfg_.nic_addr},
              {"device_type", cfg_.device_type == rc::kDeviceAries ? "aries" : "gemini"},
              {"pid", getpid()},
              {"socket", cfg_.socket_path},
              {"counter_page", stats_.path()},
              {"uptime_s", up},
              {"credentials", creds_.status(viewer)},
              {"drc_converged", creds_.converged()},
              {"cdms", cdms},
              {"bte", bte_.status()},
              {"remote_ops", {{"initiator", remote_out_.status()}, {"target", remote_in_.status()}}},
              // Where the kernel refuses cross-memory attach (docs/decisions.md): the peers
              // clients could not reach and their posts sent here (CDM counters, totals of
              // the counter page), the posts run here for them, the daemon's own refusals.
              {"xmem_fallback",
               {{"peers", stats_.total(abi::counters::cdm::xmem_fallback_peers)},
                {"posts", stats_.total(abi::counters::cdm::xmem_fallback_posts)},
                {"daemon_ops", bte_.proxied()},
                {"daemon_refused", xmem::refusals()}}},
              {"collective_engine", ce_.status()},
              {"msgq_relay", msgq_relay_.status()},
              {"msgq", msgqs_.status()},
              {"fault", fault_.status()},
              {"fabric", port_.transport() ? port_.transport()->status() : nlohmann::json(nullptr)},
              {"smsg_relay", smsg_.status()},
              // The ofi fabric (docs/fabric.md): the addresses this daemon hands out, and the
              // posts its CDMs did rank to rank and the peers' requests they served (CDM
              // counters, totals of the counter page).
              {"ofi",
               {{"enabled", cfg_.fabric_data == ctl::kFabricDataOfi},
                {"provider", cfg_.fabric_data == ctl::kFabricDataOfi ? cfg_.ofi_provider : ""},
                {"directory", ofi_.status()},
                {"ops", stats_.total(abi::counters::cdm::ofi_ops)},
                {"reads_inline", stats_.total(abi::counters::cdm::ofi_reads_inline)},
                {"reads_thread", stats_.total(abi::counters::cdm::ofi_reads_thread)},
                {"kicks", stats_.total(abi::counters::cdm::ofi_kicks)},
                {"keys_asked", stats_.total(abi::counters::cdm::ofi_keys_asked)},
                {"keys_answered", stats_.total(abi::counters::cdm::ofi_keys_answered)},
                {"keys_cached", stats_.total(abi::counters::cdm::ofi_keys_cached)},
                {"local_missing", stats_.total(abi::counters::cdm::ofi_local_missing)},
                {"bytes", stats_.total(abi::counters::cdm::ofi_bytes)},
                {"errors", stats_.total(abi::counters::cdm::ofi_errors)},
                {"served", stats_.total(abi::counters::cdm::ofi_served)},
                {"dropped", stats_.total(abi::counters::cdm::ofi_dropped)}}},
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
                {"datagrams_lost", dgrams_.lost_count()},
                {"datagrams_fault_injected", dgrams_.injected_count()},
                {"msgq_joins", ctr_.msgq_joins},
                {"msgq_join_refused", ctr_.msgq_join_refused},
                {"msgq_lookups", ctr_.msgq_lookups},
                {"credential_refused", ctr_.credential_refused},
                {"resource_refused", ctr_.resource_refused},
                {"accept_deferred", ctr_.accept_deferred}}}};
}

void Node::refresh_counters() {
  // Also the periodic tick for MSGQ messages from other hosts (held for ring room, or
  // waiting for the fabric) and the credits of their ring slots.
  if (msgq_relay_.busy()) msgq_relay_.progress();
  for (auto& [id, r] : cdms_.all()) stats_.refresh(id, r->counter_block());
  // Counted by the BTE engine's threads and the cross-memory copy; published here.
  stats_.node(abi::counters::node::xmem_proxy_ops).set(bte_.proxied());
  stats_.node(abi::counters::node::xmem_refused).set(xmem::refusals());
  stats_.refreshed();
}

}  // namespace nicemu::daemon
