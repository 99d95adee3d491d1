// The ordering model (docs/ordering.md) on the ofi fabric. A CDM reaches a peer on two
// paths: RMA (fi_write / fi_read, delivery complete) and messages (AMOs, CQ writes, GETs'
// remote events, SMSG frames), which the target's port executes when it reads its CQ. Each
// path keeps its own order, not the order between them: an AMO's message may wait in the
// target's CQ while a later PUT's data lands. So per (port, peer) this counts what is in
// flight on each path until it took effect (an RMA's delivery-complete completion, a
// message's reply, an SMSG frame's completion), and a post that may not pass what is in
// flight is held: appended to the peer's FIFO, the post call returns at once, and the
// completion that gives back what it waited for issues it (leave -> the hooks' issue), on
// whichever thread delivers that completion. A post never waits in the call: a peer that
// stopped holds the posts behind its own, not the thread that posts them.
//
// The initiator does not see the target registration's PI flags (they live in the target's
// table), so a post in the default class is ordered as a strict one would be against the
// other path and where the provider does not order its RMA (a default post may pass less,
// never more). Relaxed posts (fault configuration `ordering=relaxed`) are never held unless
// a strict post is held before them, and only strict posts wait for them. Within the RMA
// path the provider's order bits (msg_order) keep the order; where one is missing the post
// waits for the earlier operations of that kind. Within the message path one connection
// delivers in send order (FI_ORDER_SAS) and the target executes in its CQ's order. SMSG
// messages are a path of their own (a message may wait in a batch of its channel while the
// port's other messages go); messages of one channel keep their order by sequence number.
//
// Cost where nothing is held: enter is a load of the peer's held count, the loads of the
// counts it may not pass and one atomic add; leave one atomic subtract and one load.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>

#include "ordering_model.h"

namespace nicemu::ugni {

enum class OfiPath : uint8_t { kWrite, kRead, kMsg, kSmsg };
constexpr int kOfiPaths = 4;

// What the provider orders within its endpoint: a bit of tx_attr->msg_order whose
// max_order_*_size covers any post (max_msg_size).
struct OfiOrderCaps {
  bool raw = false, war = false, waw = false, rar = false, sas = false;
};

// A post counted in flight: taken by enter (or given to the issue hook), given back once
// with leave when it took effect. `counted` false: nothing to give back.
struct OfiOrderTicket {
  uint16_t slot = 0;
  uint8_t path = 0;
  uint8_t relaxed = 0;
  bool counted = false;
};

enum class OfiIssue : uint8_t {
  kDone,   // issued, or completed with an error by the hook itself: the order forgets it
  kRetry,  // the provider had no room: nothing issued, it stays first (pump tries again)
};
enum class OfiAdmit : uint8_t {
  kGo,    // counted in the ticket: the caller issues it now
  kHeld,  // the order has it (it may even have been issued already, by this call)
  kFull,  // not taken: the port holds as many posts as it may (the caller's "no resource")
};

// What the port does with a held post. Called without the order's lock, from the thread
// that gave back what the post waited for (or that held it, or pump's): `issue` must not
// wait for the provider (kRetry instead). `drop`: the post completes with `status` unissued
// (NIC down, peer gone), or status 0: silently (the port closes).
struct OfiOrderHooks {
  OfiIssue (*issue)(void* owner, void* item, const OfiOrderTicket& t) = nullptr;
  void (*drop)(void* owner, void* item, uint64_t status) = nullptr;
  void* owner = nullptr;
};

class OfiOrder {
 public:
  static constexpr uint64_t kAllPeers = ~0ull;
  OfiOrder(const OfiOrderCaps& caps, const OfiOrderHooks& hooks, uint32_t max_held);
  ~OfiOrder();
  OfiOrder(const OfiOrder&) = delete;
  OfiOrder& operator=(const OfiOrder&) = delete;

  // The fast path, before a post on `path` to `peer` (its AV address) is issued: true if it
  // may go now (counted in `t`); false: nothing counted, the caller calls hold.
  bool enter(uint64_t peer, OfiPath path, ordering::Class cls, OfiOrderTicket& t) {
    Slot& s = slots_[peer % kSlots];
    const bool relaxed = cls == ordering::kRelaxed;
    if (s.queued.load(std::memory_order_acquire) != 0) return false;
    if (!relaxed && must_wait(s, path, cls)) return false;
    count(s, peer, path, relaxed, t);
    return true;
  }
  // The slow path: `item` (the owner's, 2-aligned pointer or tagged) joins the peer's FIFO
  // and goes as soon as what is before it allows, possibly within this call (issue hook).
  // `capped`: it counts towards max_held (kFull when that many are held).
  OfiAdmit hold(uint64_t peer, OfiPath path, ordering::Class cls, void* item, bool capped, OfiOrderTicket& t);
  // A post took effect (or failed): later posts to its peer may go; the heads of its FIFO
  // that may now go are issued from here.
  void leave(const OfiOrderTicket& t, int32_t k = 1) {
    if (!t.counted) return;
    Slot& s = slots_[t.slot];
    s.n[t.path][t.relaxed].fetch_sub(k, std::memory_order_seq_cst);
    if (s.queued.load(std::memory_order_seq_cst) != 0) drain(t.slot);
  }
  // Tries again the FIFOs whose head the provider refused (the thread driving the provider,
  // at each look).
  bool any_parked() const { return parked_.load(std::memory_order_relaxed) != 0; }
  void pump();
  // Drops the held posts to `peer` (kAllPeers: every one) with `status` (drop hook), in FIFO
  // order; a post being issued at that moment is not held any more. How many.
  uint32_t fail(uint64_t peer, uint64_t status);
  uint32_t held() const;
  // Anything held at all (one load): a thread about to sleep drives the provider itself
  // instead (ofi_wait), since the completion it waits for issues held posts.
  bool any_held() const { return held_total_.load(std::memory_order_relaxed) != 0; }
  const OfiOrderCaps& caps() const { return caps_; }

 private:
  // Peers share slots by AV address modulo kSlots: a collision only orders more (a post
  // waits for, or is held behind, another peer's).
  static constexpr uint32_t kSlots = 256;
  struct Node {
    Node* next = nullptr;
    void* item = nullptr;
    uint64_t peer = 0;
    OfiPath path = OfiPath::kWrite;
    ordering::Class cls = ordering::kDefault;
    bool capped = false;
    bool issuing = false;
  };
  struct Slot {
    std::atomic<int32_t> n[kOfiPaths][2] = {};  // [path][relaxed] in flight
    std::atomic<int32_t> queued{0};             // held, including one being issued
    // Under mu_:
    Node* head = nullptr;
    Node* tail = nullptr;
    uint32_t strict_held = 0;
    bool draining = false;  // a thread issues this FIFO's heads: one at a time, in order
    bool parked = false;    // its head was refused by the provider: pump tries again
  };
  bool must_wait(const Slot& s, OfiPath path, ordering::Class cls) const;
  void count(Slot& s, uint64_t peer, OfiPath path, bool relaxed, OfiOrderTicket& t) {
    t.slot = static_cast<uint16_t>(peer % kSlots);
    t.path = static_cast<uint8_t>(path);
    t.relaxed = relaxed;
    t.counted = true;
    s.n[t.path][t.relaxed].fetch_add(1, std::memory_order_seq_cst);
  }
  void drain(uint32_t slot);
  void unlink_node(Slot& s, Node* prev, Node* x);  // under mu_

  OfiOrderCaps caps_;
  OfiOrderHooks hooks_;
  uint32_t max_held_;
  mutable std::mutex mu_;
  uint32_t held_capped_ = 0;  // under mu_
  std::atomic<uint32_t> parked_{0};
  std::atomic<uint32_t> held_total_{0};  // the slots' queued, summed
  Slot slots_[kSlots];
};

// The port's order (nullptr without a port): SMSG over ofi counts and holds its messages there.
OfiOrder* ofi_order(struct Nic* n);

}  // namespace nicemu::ugni
