// Posts for NIC addresses of other hosts (nicemu/abi/remote_ops.h). The library cannot
// reach a process on another machine, so an FMA PUT/GET, AMO, RDMA or CQ write bound for
// one goes to our daemon as a one-way RemotePost on the attach connection; the daemon
// carries it over the fabric to the target's daemon and posts our events into the CQ when
// the answer is in (errors included). FMA PUT payloads up to kInlineMax travel inside the
// message, so the caller may reuse its buffer when the post returns, as with the FMA window
// of the hardware; longer ones are read from the caller's buffer when sent (which it must
// leave alone until the local completion, as for RDMA). Members of a chain (ct_requester.cpp)
// go the same way, marked so the daemon posts one event for the chain.
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "fault_engine.h"
#include "fma_requester.h"
#include "internal.h"
#include "ofi_port.h"
#include "nicemu/abi/remote_ops.h"
#include "nicemu/ctl/ctl_client.h"

namespace nicemu::ugni {

namespace cqe = nicemu::abi::cqe;
namespace rop = nicemu::abi::remote;

bool Nic::on_other_host(uint32_t addr) {
  if (addr == nic_addr) return false;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  std::lock_guard<std::mutex> lk(peers_mu);
  auto& [other, until] = other_host_cache[addr];
  if (now < until) return other;
  // No daemon socket for it here: another host's node (or none at all, which its daemon's
  // fabric map decides). Believed for 1 s, so a daemon started later is found.
  other = ::access(nicemu::ctl::socket_path(rundir, addr).c_str(), F_OK) != 0;
  until = now + 1000000000ull;
  return other;
}

bool Ep::other_host() {
  int8_t r = host_route.load(std::memory_order_relaxed);
  if (r < 0) {
    r = nic->on_other_host(remote_addr) ? 1 : 0;
    host_route.store(r, std::memory_order_relaxed);
  }
  return r == 1;
}

bool first_route_through_daemon(Ep* ep, const gni_mem_handle_t& remote) {
  if (ep->other_host()) return true;
  uint64_t st = cqe::kOk;
  const Region* t = target_of(ep, remote, st);  // cached: the post's own look-up
  return t && t->xmem_refused;
}

bool send_remote_post(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine, int32_t tid,
                      const RemoteChainMember* chain) {
  Nic* n = ep->nic;
  rop::RemotePost p{};
  p.kind = kind;
  p.engine = engine;
  p.cq_mode = local_events(d);
  if (d->cq_mode & GNI_CQMODE_REMOTE_EVENT) p.flags |= rop::kFlagRemoteEvent;
  p.src_cq = cq ? cq->slot : abi::kNoCq;
  p.tid = tid < 0 ? abi::kBteNoTid : static_cast<uint32_t>(tid);
  p.local_event = chain ? chain->local_event : ep->local_event;
  p.remote_event = ep->remote_event;
  // A target of this host that we may not reach ourselves (Region::xmem_refused): our
  // daemon executes it here instead of carrying it to another host.
  if (!ep->other_host()) {
    p.flags |= rop::kFlagSameHost;
    count(n->counters, ctr::cdm::xmem_fallback_posts);
  }
  if (chain) {
    p.chain_id = chain->id;
    p.chain_members = chain->members;
    p.chain_index = chain->index;
    p.chain_fail_index = chain->fail_index;
    p.chain_fail_status = chain->fail_status;
  }
  copy_transfer_to_daemon(p, ep, d);
  int type;
  std::memcpy(&type, &d->type, sizeof type);
  switch (kind) {
    case rop::kPut:
      if (type == GNI_POST_FMA_PUT_W_SYNCFLAG) {
        p.flags |= rop::kFlagSyncFlag;
        p.operand1 = d->sync_flag_value;
        p.sync_flag_addr = d->sync_flag_addr;
      }
      if (engine == rop::kFma && d->length <= rop::kInlineMax) p.inline_length = static_cast<uint32_t>(d->length);
      break;
    case rop::kAmo:
      std::memcpy(&p.amo_cmd, &d->amo_cmd, sizeof p.amo_cmd);
      p.operand1 = d->first_operand;
      p.operand2 = d->second_operand;
      break;
    case rop::kCqWrite:
      p.operand1 = d->cqwrite_value;
      p.length = 0;
      break;
    default:
      break;
  }
  thread_local std::vector<char> buf;
  buf.resize(sizeof p + p.inline_length);
  p.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, static_cast<uint16_t>(abi::ctl::Op::kRemotePost), 0,
                         static_cast<uint32_t>(buf.size())};
  std::memcpy(buf.data(), &p, sizeof p);
  if (p.inline_length) std::memcpy(buf.data() + sizeof p, reinterpret_cast<const void*>(d->local_addr), p.inline_length);
  if (n->nic_down.load(std::memory_order_relaxed) || !n->conn.send(buf.data(), buf.size())) return false;
  n->remote_posts_sent.fetch_add(1, std::memory_order_release);  // after the send: the daemon has it to take
  return true;
}

gni_return_t post_remote(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine,
                         int32_t tid) {
  Nic* n = ep->nic;
  // Fault injection acts alike on both fabrics (docs/ofi-fabric.md): transaction rules fail
  // posts here, and while packet rules or link windows may touch the peer the post takes the
  // daemons' path, where those act. Off, this is one relaxed load.
  bool to_daemons = false;
  if (n->fault_page->active.load(std::memory_order_relaxed)) [[unlikely]]
    if (fault_post_remote(ep, cq, d, kind, engine, tid, to_daemons)) return GNI_RC_SUCCESS;
  // NIC down as the daemons' path sees it, also while nothing told this process yet: the
  // daemon marked our region at shutdown, or the kernel did when it died (its lease).
  if (n->ofi && n->self->state() == abi::kRegionNicDown) [[unlikely]]
    n->nic_down.store(true, std::memory_order_relaxed);
  // The ofi fabric moves a PUT or GET rank to rank (ofi_port.h); the rest goes to the daemon.
  if (!to_daemons) switch (ofi_post(ep, cq, d, kind, engine, tid)) {
      case OfiTaken::kYes:
        return GNI_RC_SUCCESS;
      case OfiTaken::kFull:  // as when the CDM is out of transaction ids: nothing posted
        release_tid(n, tid);
        return GNI_RC_ERROR_RESOURCE;
      case OfiTaken::kNo:
        break;
    }
  // Remembered first: once sent, its events may come (and its tid be reused) at any time.
  ep->nic->to_daemon(tid, cq, ep->local_event, engine == rop::kBte);
  if (send_remote_post(ep, cq, d, kind, engine, tid, nullptr)) return GNI_RC_SUCCESS;
  ep->nic->to_daemon(tid, cq, ep->local_event, engine == rop::kBte, false);
  // Our daemon is gone: nobody will carry it. Complete it here as every post after NIC down.
  if (engine == rop::kBte)
    rdma_local_events(cq, d->cq_mode, ep->local_event, tid, cqe::kErrNicDown);
  else
    complete_fma(cq, d, ep->local_event, cqe::kErrNicDown, tid);
  return GNI_RC_SUCCESS;
}

}  // namespace nicemu::ugni
