#include "nicemu/daemon/cdm/msgq_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <nlohmann/json.hpp>

#include "nicemu/abi/futex.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/msgq_ring.h"
#include "nicemu/abi/region_map.h"

namespace nicemu::daemon {

using namespace nicemu::abi::msgq;
namespace rc = nicemu::abi::gni;

namespace {
// Writer side of the read-only tables' protocol (msgq_layout.h): gen moves on take, the
// fields are written while the entry is not live, state is published last.
template <typename Entry, typename Fill>
void take_entry(Entry* e, Fill&& fill) {
  e->gen.store(e->gen.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  fill(*e);
  e->state.store(kEntryLive, std::memory_order_release);
}
template <typename Entry>
void free_entry(Entry* e) {
  e->state.store(kEntryFree, std::memory_order_release);
}
}  // namespace

MsgqSegment::MsgqSegment(uint32_t nic_addr, Credential cred, const Attrs& attrs, uint64_t segment_id)
    : id_(segment_id), cred_(cred) {
  if (!attrs_valid(attrs)) throw std::invalid_argument("invalid MSGQ attributes");
  view_.attrs = attrs;
  view_.lay = segment_layout(attrs);
  // Two memfds, as for a CDM region (region_map.h): the tables sealed against writers once
  // the daemon has mapped them, the rings read-write.
  std::string name = "nicemu-msgq-" + std::to_string(nic_addr) + "-" + std::to_string(cred.ptag);
  const uint64_t size = view_.lay.total_size, ro = view_.lay.ro_size;
  auto fail = [&](const char* what) {
    int e = errno;
    if (ro_fd_ >= 0) close(ro_fd_);
    if (rw_fd_ >= 0) close(rw_fd_);
    throw std::runtime_error(std::string(what) + " of the MSGQ segment of ptag " + std::to_string(cred.ptag) + ": " +
                             strerror(e));
  };
  ro_fd_ = memfd_create((name + "-ro").c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  rw_fd_ = memfd_create((name + "-rw").c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (ro_fd_ < 0 || rw_fd_ < 0) fail("memfd_create");
  if (ftruncate(ro_fd_, static_cast<off_t>(ro)) != 0 || ftruncate(rw_fd_, static_cast<off_t>(size - ro)) != 0)
    fail("sizing");
  view_.base = abi::map_split(ro_fd_, rw_fd_, ro, size, PROT_READ | PROT_WRITE);
  if (!view_.base) fail("mapping");
  if (fcntl(ro_fd_, F_ADD_SEALS, abi::kRoSeals) != 0 || fcntl(rw_fd_, F_ADD_SEALS, abi::kHeapSeals) != 0) {
    munmap(view_.base, size);
    view_.base = nullptr;
    fail("sealing");
  }
  auto* h = new (view_.base) SegmentHeader{};
  h->magic = kSegmentMagic;
  h->version = kVersion;
  h->header_size = sizeof(SegmentHeader);
  h->nic_addr = nic_addr;
  h->ptag = cred.ptag;
  h->cookie = cred.cookie;
  h->segment_id = segment_id;
  h->attrs = attrs;
  h->total_size = size;
  h->ro_size = view_.lay.ro_size;
  // The fresh memfd is zero: every table entry free, every futex 0. Rings are set up when a
  // connection takes them.
  h->state.store(kSegmentAlive, std::memory_order_release);
}

MsgqSegment::~MsgqSegment() {
  if (view_.base) munmap(view_.base, view_.lay.total_size);
  if (ro_fd_ >= 0) close(ro_fd_);
  if (rw_fd_ >= 0) close(rw_fd_);
}

int MsgqSegment::find_member(uint64_t attach_id) const {
  for (uint32_t i = 0; i < view_.attrs.nloc_insts; ++i) {
    const Member* m = view_.member(i);
    if (m->state.load(std::memory_order_relaxed) == kEntryLive && m->attach_id == attach_id) return int(i);
  }
  return -1;
}

uint32_t MsgqSegment::live_members() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < view_.attrs.nloc_insts; ++i)
    if (view_.member(i)->state.load(std::memory_order_relaxed) == kEntryLive) ++n;
  return n;
}

int MsgqSegment::join(uint64_t attach_id, pid_t pid, uint32_t inst_id, uint32_t& member, uint32_t& gen) {
  if (view_.header()->state.load() != kSegmentAlive) return rc::kInvalidState;
  if (find_member(attach_id) >= 0) return rc::kInvalidState;  // GNI_MsgqInit twice on one NIC handle
  // The slot that is free the longest (lowest gen) would be nicer; the first free one is
  // enough, since its generation changes on every take.
  for (uint32_t i = 0; i < view_.attrs.nloc_insts; ++i) {
    Member* m = view_.member(i);
    if (m->state.load(std::memory_order_relaxed) == kEntryLive) continue;
    take_entry(m, [&](Member& e) {
      e.inst_id = inst_id;
      e.pid = static_cast<uint32_t>(pid);
      e.attach_id = attach_id;
    });
    MemberRw* rw = view_.member_rw(i);
    rw->delivered.store(0, std::memory_order_relaxed);
    rw->malformed.store(0, std::memory_order_relaxed);
    member = i;
    gen = m->gen.load(std::memory_order_relaxed);
    return rc::kSuccess;
  }
  return rc::kInvalidState;  // more instances than nloc_insts
}

int MsgqSegment::leave(uint64_t attach_id) {
  int i = find_member(attach_id);
  if (i < 0) return rc::kInvalidState;
  free_entry(view_.member(uint32_t(i)));
  // A thread of the member may still sleep in GNI_MsgqProgress (another thread released).
  MemberRw* rw = view_.member_rw(uint32_t(i));
  rw->futex.fetch_add(1, std::memory_order_release);
  abi::futex_wake_all(&rw->futex);
  return rc::kSuccess;
}

int MsgqSegment::conn_open(uint32_t remote_pe, uint32_t& conn, uint32_t& gen) {
  if (view_.header()->state.load() != kSegmentAlive) return rc::kInvalidState;
  int free_slot = -1;
  for (uint32_t i = 0; i < view_.attrs.num_msgq_eps; ++i) {
    RxConn* c = view_.rx(i);
    if (c->state.load(std::memory_order_relaxed) == kEntryLive) {
      if (c->remote_pe == remote_pe) {
        conn = i;
        gen = c->gen.load(std::memory_order_relaxed);
        return rc::kSuccess;  // every local instance gets the same ring
      }
    } else if (free_slot < 0) {
      free_slot = int(i);
    }
  }
  if (free_slot < 0) return rc::kErrorResource;  // num_msgq_eps connections already
  uint32_t i = uint32_t(free_slot);
  // A sender of the connection that used this ring before may still hold a mapping of it;
  // what it writes now is refused by the receivers (source node check).
  RingView::at(view_.ring(i), view_.attrs.smsg_q_sz, view_.lay.slot_size).init();
  take_entry(view_.rx(i), [&](RxConn& e) { e.remote_pe = remote_pe; });
  conn = i;
  gen = view_.rx(i)->gen.load(std::memory_order_relaxed);
  return rc::kSuccess;
}

int MsgqSegment::connect(uint32_t remote_pe, uint32_t remote_insts, uint32_t& conn, uint32_t& gen) {
  if (view_.header()->state.load() != kSegmentAlive) return rc::kInvalidState;
  int free_slot = -1;
  for (uint32_t i = 0; i < view_.attrs.num_msgq_eps; ++i) {
    TxConn* c = view_.tx(i);
    if (c->state.load(std::memory_order_relaxed) == kEntryLive) {
      if (c->remote_pe == remote_pe) {
        c->remote_insts = remote_insts;  // informational; a reconnect refreshes it
        conn = i;
        gen = c->gen.load(std::memory_order_relaxed);
        return rc::kSuccess;
      }
    } else if (free_slot < 0) {
      free_slot = int(i);
    }
  }
  if (free_slot < 0) return rc::kInvalidState;  // num_msgq_eps connections already
  uint32_t i = uint32_t(free_slot);
  take_entry(view_.tx(i), [&](TxConn& e) {
    e.remote_pe = remote_pe;
    e.remote_insts = remote_insts;
  });
  // A new connection starts with every credit (what an earlier one left is void).
  TxCredit* cr = view_.tx_credit(i);
  cr->returned.store(cr->sent.load(std::memory_order_acquire), std::memory_order_release);
  conn = i;
  gen = view_.tx(i)->gen.load(std::memory_order_relaxed);
  return rc::kSuccess;
}

int MsgqSegment::conn_release(uint32_t remote_pe) {
  bool found = false;
  for (uint32_t i = 0; i < view_.attrs.num_msgq_eps; ++i) {
    RxConn* r = view_.rx(i);
    if (r->state.load(std::memory_order_relaxed) == kEntryLive && r->remote_pe == remote_pe) {
      free_entry(r);
      found = true;
    }
    TxConn* t = view_.tx(i);
    if (t->state.load(std::memory_order_relaxed) == kEntryLive && t->remote_pe == remote_pe) {
      free_entry(t);
      found = true;
    }
  }
  return found ? rc::kSuccess : rc::kNoMatch;
}

void MsgqSegment::kill(SegmentState why) {
  SegmentHeader* h = view_.header();
  if (h->state.load() != kSegmentAlive) return;
  h->state.store(why, std::memory_order_seq_cst);
  for (uint32_t i = 0; i < view_.attrs.nloc_insts; ++i) {
    free_entry(view_.member(i));
    MemberRw* rw = view_.member_rw(i);
    rw->futex.fetch_add(1, std::memory_order_release);
    abi::futex_wake_all(&rw->futex);
  }
}

nlohmann::json MsgqSegment::status() const {
  uint32_t rx = 0, tx = 0;
  uint64_t delivered = 0, malformed = 0, voided = 0;
  for (uint32_t i = 0; i < view_.attrs.num_msgq_eps; ++i) {
    if (view_.rx(i)->state.load(std::memory_order_relaxed) == kEntryLive) {
      ++rx;
      voided += reinterpret_cast<const RingCtl*>(view_.ring(i))->voided.load(std::memory_order_relaxed);
    }
    if (view_.tx(i)->state.load(std::memory_order_relaxed) == kEntryLive) ++tx;
  }
  // Counters in the read-write section are written by clients: informational only.
  for (uint32_t i = 0; i < view_.attrs.nloc_insts; ++i) {
    delivered += view_.member_rw(i)->delivered.load(std::memory_order_relaxed);
    malformed += view_.member_rw(i)->malformed.load(std::memory_order_relaxed);
  }
  return nlohmann::json{{"segment_id", id_},
                        {"ptag", cred_.ptag},
                        {"cookie", cred_.cookie},
                        {"bytes", view_.lay.total_size},
                        {"members", live_members()},
                        {"rx_connections", rx},
                        {"tx_connections", tx},
                        {"max_msg_sz", view_.attrs.max_msg_sz},
                        {"smsg_q_sz", view_.attrs.smsg_q_sz},
                        {"delivered", delivered},
                        {"malformed", malformed},
                        {"voided", voided}};
}

}  // namespace nicemu::daemon

namespace nicemu::daemon {

TxCredit* MsgqSegment::tx_credit(uint32_t pe) const {
  for (uint32_t i = 0; i < view_.attrs.num_msgq_eps; ++i) {
    uint32_t rpe, g;
    if (view_.read_tx(i, rpe, g) && rpe == pe) return view_.tx_credit(i);
  }
  return nullptr;
}

std::optional<uint64_t> MsgqSegment::ring_head(uint32_t ring, uint32_t gen) const {
  uint32_t rpe, g;
  if (view_.header()->state.load() != kSegmentAlive || !view_.read_rx(ring, rpe, g) || g != gen) return std::nullopt;
  RingView r = RingView::at(view_.ring(ring), view_.attrs.smsg_q_sz, view_.lay.slot_size);
  r.recycle([this](const EntryHeader& x) { return view_.destination_live(x); }, claimer_unknown);
  return r.ctl->head.load(std::memory_order_acquire);
}

int MsgqSegment::deliver_remote(uint32_t src_pe, uint32_t src_inst, uint32_t dst_inst, uint8_t tag, const void* hdr,
                                uint32_t hdr_len, const void* msg, uint32_t msg_len, RingPos* at) {
  if (view_.header()->state.load() != kSegmentAlive) return rc::kInvalidState;
  if (uint64_t{hdr_len} + msg_len > view_.attrs.max_msg_sz) return rc::kInvalidState;
  int ring = -1;
  uint32_t ring_gen = 0;
  for (uint32_t i = 0; i < view_.attrs.num_msgq_eps && ring < 0; ++i) {
    uint32_t rpe, g;
    if (view_.read_rx(i, rpe, g) && rpe == src_pe) {
      ring = int(i);
      ring_gen = g;
    }
  }
  int member = -1;
  uint32_t gen = 0;
  for (uint32_t i = 0; i < view_.attrs.nloc_insts && member < 0; ++i) {
    uint32_t id, g;
    if (view_.read_member(i, id, g) && id == dst_inst) {
      member = int(i);
      gen = g;
    }
  }
  if (ring < 0 || member < 0) return rc::kInvalidState;
  RingView r = RingView::at(view_.ring(uint32_t(ring)), view_.attrs.smsg_q_sz, view_.lay.slot_size);
  EntryHeader e{};
  e.dst_inst = dst_inst;
  e.dst_gen = gen;
  e.src_inst = src_inst;
  e.src_pe = src_pe;
  e.dst_member = static_cast<uint16_t>(member);
  e.tag = tag;
  const auto pid = static_cast<uint32_t>(getpid());
  uint64_t pos = 0;
  auto res = r.push(e, hdr, hdr_len, msg, msg_len, pid, &pos);
  if (res == RingView::Push::kFull) {
    // Room held by taken entries or departed receivers is reclaimed first, as senders do.
    r.recycle([this](const EntryHeader& x) { return view_.destination_live(x); }, claimer_unknown);
    res = r.push(e, hdr, hdr_len, msg, msg_len, pid, &pos);
  }
  if (res == RingView::Push::kFull) return rc::kNotDone;
  if (res == RingView::Push::kCorrupt) return rc::kInvalidState;
  if (at) *at = RingPos{uint32_t(ring), ring_gen, pos};
  MemberRw* rw = view_.member_rw(uint32_t(member));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (rw->waiters.load(std::memory_order_relaxed) != 0) {
    rw->futex.fetch_add(1, std::memory_order_release);
    abi::futex_wake_all(&rw->futex);
  }
  return rc::kSuccess;
}

}  // namespace nicemu::daemon
