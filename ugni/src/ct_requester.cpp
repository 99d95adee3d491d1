// Chained transactions (fact sheet §12.4, §12.5): GNI_CtPostFma and GNI_CtPostCqWrite.
// The post descriptor is the chain's first element, on the EP the call names; it alone
// gives the type, delivery mode, event mode and post id. Its `next_descr` links
// gni_ct_*_post_descriptor_t elements of the same type, each naming its own EP (of the
// same NIC). The whole chain is checked before anything runs, so a bad element posts
// nothing; then every element runs as its own FMA transaction, and the chain completes
// with one local event on the first EP's CQ, which GNI_GetCompleted maps to the first
// descriptor. Its status is that of the first element that failed (all are attempted, as
// independent transactions on the hardware are). REMOTE_EVENT gives each target whose
// element succeeded its remote event, as a plain post to it would.
//
// Members whose target is on another host go to our daemon, one RemotePost each, marked
// with the chain's id (abi/remote_ops.h); the library runs the same-host members first and
// tells the daemon the first of them that failed, and the daemon posts the chain's event
// when its last member is answered. Members whose same-host target we may not reach by
// cross-memory attach go to the daemon the same way (its BTE engine runs them). With the
// ofi fabric, a chain whose other-host members may all go rank to rank goes so instead
// (ofi_port.h, ofi_chain_*), with the same one event; a chain of CQ writes likewise, its
// other-host members as kCqWrite messages.
#include <algorithm>
#include <cstring>
#include <vector>

#include "fma_requester.h"
#include "nicemu/abi/remote_ops.h"
#include "ofi_port.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace cqe = nicemu::abi::cqe;

namespace {

// A chain longer than this is taken for a cycle in the links.
constexpr size_t kMaxChain = size_t{1} << 16;
// Total bytes of one chain (§12.4): 1 GiB, 1 MiB when the CDM shares FMA descriptors.
constexpr uint64_t kMaxChainBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxChainBytesShared = uint64_t{1} << 20;

// Copies element `p` (of the type the first descriptor names) into an FmaOp; false if its
// EP is not a bound EP of `nic`.
template <typename Ct>
bool element(const void* p, int type, Nic* nic, FmaOp& op, const void*& next) {
  Ct e;
  std::memcpy(&e, p, sizeof e);  // the caller's memory: copy, then check
  next = e.next_descr;
  Ep* ep = as_ep(e.ep_hndl);
  if (!ep || !ep->bound || ep->nic != nic) return false;
  op = FmaOp{};
  op.type = type;
  op.ep = ep;
  op.length = e.length;
  op.remote_addr = e.remote_addr;
  op.remote_mem_hndl = e.remote_mem_hndl;
  op.local_addr = e.local_addr;
  if constexpr (requires { e.local_mem_hndl; }) op.local_mem_hndl = e.local_mem_hndl;
  if constexpr (requires { e.amo_cmd; }) {
    op.amo_cmd = amo_command(e.amo_cmd);
    op.first_operand = e.first_operand;
    op.second_operand = e.second_operand;
  }
  return true;
}

// The members of a chain that crosses hosts: `remote(i)` says whether member i's target is
// on another host; `run_local(i)` runs a same-host member and returns its status;
// `post(i, chain)` sends a member to the daemon (false: the daemon is gone). `d` is the
// first descriptor, `cq` where the chain's event goes.
template <typename Remote, typename RunLocal, typename PostRemote>
void run_split_chain(Ep* ep, Cq* cq, gni_post_descriptor_t* d, int32_t tid, size_t n, Remote remote,
                     RunLocal run_local, PostRemote post) {
  RemoteChainMember chain{};
  chain.id = ep->nic->next_chain_id.fetch_add(1, std::memory_order_relaxed);
  chain.fail_index = abi::remote::kNoChainFailure;
  chain.local_event = ep->local_event;
  for (size_t i = 0; i < n; ++i) {
    if (remote(i)) {
      ++chain.members;
      continue;
    }
    const uint64_t st = run_local(i);
    if (st != cqe::kOk && chain.fail_index == abi::remote::kNoChainFailure) {
      chain.fail_index = static_cast<uint32_t>(i);
      chain.fail_status = static_cast<uint32_t>(st);
    }
  }
  // The chain's one event comes from our daemon (or from us, if it dies meanwhile).
  ep->nic->to_daemon(tid, cq, ep->local_event, false);
  for (size_t i = 0; i < n; ++i) {
    if (!remote(i)) continue;
    chain.index = static_cast<uint32_t>(i);
    // Our daemon is gone: it posts nothing for the members it had, so the chain completes
    // here, once.
    if (!post(i, chain)) {
      ep->nic->to_daemon(tid, cq, ep->local_event, false, false);
      return complete_fma(cq, d, ep->local_event, cqe::kErrNicDown, tid);
    }
  }
}

// The same chain rank to rank over ofi if every member for the daemons would go so (all or
// none: one path completes a chain): the same-host members first, then each other-host
// member as its own ofi post into one OfiChain, whose one event (on `cq`) comes when the
// last is done. `member(i)` is member i as a plain descriptor of the chain's kind. False:
// nothing ran, the caller takes the daemons' path.
template <typename Remote, typename RunLocal, typename Member, typename EpOf>
bool run_ofi_chain(Ep* ep, Cq* cq, gni_post_descriptor_t* d, int32_t tid, size_t n, Remote remote,
                   RunLocal run_local, Member member, EpOf ep_of, uint16_t kind) {
  if (!ep->nic->ofi) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!remote(i)) continue;
    const gni_post_descriptor_t m = member(i);
    if (!ofi_chain_takes(ep_of(i), &m, kind)) return false;
  }
  uint32_t fail_index = abi::remote::kNoChainFailure;
  uint64_t fail_status = cqe::kOk;
  for (size_t i = 0; i < n; ++i) {
    if (remote(i)) continue;
    const uint64_t st = run_local(i);
    if (st != cqe::kOk && fail_index == abi::remote::kNoChainFailure) {
      fail_index = static_cast<uint32_t>(i);
      fail_status = st;
    }
  }
  OfiChain* chain = ofi_chain_open(ep->nic, cq, d, ep->local_event, tid);
  for (size_t i = 0; i < n; ++i) {
    if (!remote(i)) continue;
    const gni_post_descriptor_t m = member(i);
    ofi_chain_post(chain, ep_of(i), &m, kind, static_cast<uint32_t>(i));
  }
  ofi_chain_close(chain, fail_index, fail_status);
  return true;
}

}  // namespace

extern "C" {

gni_return_t GNI_CtPostFma(gni_ep_handle_t ep_hndl, gni_post_descriptor_t* d) {
  Ep* ep = posting_ep(ep_hndl, d);
  if (!ep) return GNI_RC_INVALID_PARAM;
  const int type = post_type(d);
  if (type != GNI_POST_FMA_PUT && type != GNI_POST_FMA_GET && type != GNI_POST_AMO) return GNI_RC_INVALID_PARAM;
  if (d->dlvr_mode & GNI_DLVMODE_ORDERED_TAIL) return GNI_RC_INVALID_PARAM;
  if (gni_return_t rc = check_events(ep, ep->src_cq, d); rc != GNI_RC_SUCCESS) return rc;

  std::vector<FmaOp> ops;
  ops.push_back(fma_op_of(ep, d));
  const void* next = d->next_descr;
  while (next) {
    if (ops.size() >= kMaxChain) return GNI_RC_INVALID_PARAM;
    FmaOp op;
    bool ok = type == GNI_POST_FMA_PUT   ? element<gni_ct_put_post_descriptor_t>(next, type, ep->nic, op, next)
              : type == GNI_POST_FMA_GET ? element<gni_ct_get_post_descriptor_t>(next, type, ep->nic, op, next)
                                         : element<gni_ct_amo_post_descriptor_t>(next, type, ep->nic, op, next);
    if (!ok) return GNI_RC_INVALID_PARAM;
    ops.push_back(op);
  }
  const uint64_t limit = (ep->nic->cdm->modes & GNI_CDM_MODE_FMA_SHARED) ? kMaxChainBytesShared : kMaxChainBytes;
  uint64_t total = 0;
  for (const FmaOp& op : ops) {
    if (gni_return_t rc = check_fma(op); rc != GNI_RC_SUCCESS) return rc;
    if (op.length > limit - total) return GNI_RC_SIZE_ERROR;
    total += op.length;
  }

  int32_t tid;
  if (!start_post(ep->nic, d, tid)) return GNI_RC_ERROR_RESOURCE;
  stat_add(ep->nic, GNI_STAT_FMA_LAUNCH_COUNT, static_cast<uint32_t>(ops.size()));
  // Members for our daemon: those of other hosts, and those of this host we may not reach by
  // cross-memory attach (its BTE engine runs them and posts the chain's event). A chain that
  // has both sends only the first kind: one daemon service completes a chain, so a member
  // we cannot reach then fails here (MEM_ACCESS), a limit docs/decisions.md states.
  const bool crosses_hosts = std::any_of(ops.begin(), ops.end(), [](const FmaOp& op) { return op.ep->other_host(); });
  auto remote = [&](size_t i) {
    return crosses_hosts ? posts_through_daemon(ops[i].ep) : fma_through_daemon(ops[i].ep, ops[i].remote_mem_hndl);
  };
  if (crosses_hosts || std::any_of(ops.begin(), ops.end(),
                                   [](const FmaOp& op) { return fma_through_daemon(op.ep, op.remote_mem_hndl); })) {
    namespace rop = nicemu::abi::remote;
    const uint16_t kind = type == GNI_POST_FMA_GET ? rop::kGet : type == GNI_POST_AMO ? rop::kAmo : rop::kPut;
    // A member as a plain descriptor of the chain's type and event mode.
    auto member = [&](size_t i) {
      const FmaOp& op = ops[i];
      gni_post_descriptor_t m{};
      m.type = d->type;
      m.cq_mode = d->cq_mode;
      m.dlvr_mode = d->dlvr_mode;
      m.local_addr = op.local_addr;
      m.local_mem_hndl = op.local_mem_hndl;
      m.remote_addr = op.remote_addr;
      m.remote_mem_hndl = op.remote_mem_hndl;
      m.length = op.length;
      std::memcpy(&m.amo_cmd, &op.amo_cmd, sizeof m.amo_cmd);
      m.first_operand = op.first_operand;
      m.second_operand = op.second_operand;
      return m;
    };
    auto run_local = [&](size_t i) {
      uint32_t dst_cq = abi::kNoCq;
      const uint64_t st = execute_fma(ops[i], &dst_cq);
      if (st == cqe::kOk && (d->cq_mode & GNI_CQMODE_REMOTE_EVENT)) push_fma_remote_event(ops[i], dst_cq);
      return st;
    };
    if (crosses_hosts && run_ofi_chain(ep, ep->src_cq, d, tid, ops.size(), remote, run_local, member,
                                       [&](size_t i) { return ops[i].ep; }, kind))
      return GNI_RC_SUCCESS;
    run_split_chain(ep, ep->src_cq, d, tid, ops.size(), remote, run_local,
                    [&](size_t i, const RemoteChainMember& chain) {
                      const gni_post_descriptor_t m = member(i);
                      return send_remote_post(ops[i].ep, ep->src_cq, &m, kind, rop::kFma, tid, &chain);
                    });
    return GNI_RC_SUCCESS;
  }
  uint64_t chain_status = cqe::kOk;
  for (const FmaOp& op : ops) {
    uint32_t dst_cq = abi::kNoCq;
    const uint64_t st = execute_fma(op, &dst_cq);
    if (st == cqe::kOk && (d->cq_mode & GNI_CQMODE_REMOTE_EVENT)) push_fma_remote_event(op, dst_cq);
    if (chain_status == cqe::kOk) chain_status = st;
  }
  complete_fma(ep->src_cq, d, ep->local_event, chain_status, tid);
  return GNI_RC_SUCCESS;
}

// The same for CQ writes: elements are gni_ct_cqw_post_descriptor_t. The local event goes
// where GNI_PostCqWrite would put it (src_cq_hndl if given, else the first EP's CQ).
gni_return_t GNI_CtPostCqWrite(gni_ep_handle_t ep_hndl, gni_post_descriptor_t* d) {
  Ep* ep;
  Cq* cq;
  if (gni_return_t rc = check_cq_write(ep_hndl, d, ep, cq); rc != GNI_RC_SUCCESS) return rc;

  struct Write {
    Ep* ep;
    gni_mem_handle_t hndl;
    uint64_t value;
  };
  std::vector<Write> writes{{ep, d->remote_mem_hndl, d->cqwrite_value}};
  for (const void* next = d->next_descr; next;) {
    if (writes.size() >= kMaxChain) return GNI_RC_INVALID_PARAM;
    gni_ct_cqw_post_descriptor_t e;
    std::memcpy(&e, next, sizeof e);
    Ep* w = as_ep(e.ep_hndl);
    if (!w || !w->bound || w->nic != ep->nic) return GNI_RC_INVALID_PARAM;
    writes.push_back({w, e.remote_mem_hndl, e.cqwrite_value});
    next = e.next_descr;
  }

  int32_t tid;
  if (!start_post(ep->nic, d, tid)) return GNI_RC_ERROR_RESOURCE;
  stat_add(ep->nic, GNI_STAT_FMA_LAUNCH_COUNT, static_cast<uint32_t>(writes.size()));
  auto remote = [&](size_t i) { return posts_through_daemon(writes[i].ep); };
  if (std::any_of(writes.begin(), writes.end(), [](const Write& w) { return posts_through_daemon(w.ep); })) {
    auto run_local = [&](size_t i) { return execute_cq_write(writes[i].ep, writes[i].hndl, writes[i].value); };
    // A member as the descriptor GNI_PostCqWrite would take.
    auto member = [&](size_t i) {
      gni_post_descriptor_t m{};
      m.type = GNI_POST_CQWRITE;
      m.cq_mode = d->cq_mode;
      m.remote_mem_hndl = writes[i].hndl;
      m.cqwrite_value = writes[i].value;
      return m;
    };
    // Rank to rank as kCqWrite messages when every other-host member can go so (the same-host
    // ones we may not reach keep the whole chain on the daemons' path: the port takes none).
    if (std::any_of(writes.begin(), writes.end(), [](const Write& w) { return w.ep->other_host(); }) &&
        run_ofi_chain(ep, cq, d, tid, writes.size(), remote, run_local, member,
                      [&](size_t i) { return writes[i].ep; }, abi::remote::kCqWrite))
      return GNI_RC_SUCCESS;
    run_split_chain(ep, cq, d, tid, writes.size(), remote, run_local, [&](size_t i, const RemoteChainMember& chain) {
      const gni_post_descriptor_t m = member(i);
      return send_remote_post(writes[i].ep, cq, &m, abi::remote::kCqWrite, abi::remote::kFma, tid, &chain);
    });
    return GNI_RC_SUCCESS;
  }
  uint64_t chain_status = cqe::kOk;
  for (const Write& w : writes) {
    const uint64_t st = execute_cq_write(w.ep, w.hndl, w.value);
    if (chain_status == cqe::kOk) chain_status = st;
  }
  complete_fma(cq, d, ep->local_event, chain_status, tid);
  return GNI_RC_SUCCESS;
}

}  // extern "C"
