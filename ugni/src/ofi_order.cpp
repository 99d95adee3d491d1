// Order between the ofi fabric's paths to a peer (ofi_order.h says what and why).
#include "ofi_order.h"

#include <vector>

namespace nicemu::ugni {

namespace {
// Whether the provider keeps a post on `later` behind an earlier one on `earlier` by itself.
bool ordered(const OfiOrderCaps& c, OfiPath earlier, OfiPath later) {
  if (earlier == OfiPath::kSmsg || later == OfiPath::kSmsg) return earlier == later;
  if (earlier == OfiPath::kMsg || later == OfiPath::kMsg) return earlier == later && c.sas;
  if (later == OfiPath::kWrite) return earlier == OfiPath::kWrite ? c.waw : c.war;
  return earlier == OfiPath::kWrite ? c.raw : c.rar;
}
}  // namespace

OfiOrder::OfiOrder(const OfiOrderCaps& caps, const OfiOrderHooks& hooks, uint32_t max_held)
    : caps_(caps), hooks_(hooks), max_held_(max_held) {}

OfiOrder::~OfiOrder() {
  // The owner dropped what was held (fail) before; whatever is left is only freed.
  for (Slot& s : slots_)
    for (Node* x = s.head; x;) {
      Node* next = x->next;
      delete x;
      x = next;
    }
}

bool OfiOrder::must_wait(const Slot& s, OfiPath path, ordering::Class cls) const {
  // Relaxed posts in flight hold back only strict ones (either one relaxed: may pass).
  const int kinds = cls == ordering::kStrict ? 2 : 1;
  for (int q = 0; q < kOfiPaths; ++q) {
    if (ordered(caps_, static_cast<OfiPath>(q), path)) continue;
    for (int r = 0; r < kinds; ++r)
      if (s.n[q][r].load(std::memory_order_seq_cst) > 0) return true;
  }
  return false;
}

void OfiOrder::unlink_node(Slot& s, Node* prev, Node* x) {
  (prev ? prev->next : s.head) = x->next;
  if (s.tail == x) s.tail = prev;
  s.queued.fetch_sub(1, std::memory_order_seq_cst);
  held_total_.fetch_sub(1, std::memory_order_relaxed);
  if (x->cls == ordering::kStrict) --s.strict_held;
  if (x->capped) --held_capped_;
}

OfiAdmit OfiOrder::hold(uint64_t peer, OfiPath path, ordering::Class cls, void* item, bool capped, OfiOrderTicket& t) {
  const uint32_t i = static_cast<uint32_t>(peer % kSlots);
  Slot& s = slots_[i];
  {
    std::lock_guard<std::mutex> lk(mu_);
    // A relaxed post may pass every held post but a strict one.
    if (cls == ordering::kRelaxed && s.strict_held == 0) {
      count(s, peer, path, true, t);
      return OfiAdmit::kGo;
    }
    if (capped && held_capped_ >= max_held_) return OfiAdmit::kFull;
    Node* x = new Node;
    x->item = item;
    x->peer = peer;
    x->path = path;
    x->cls = cls;
    x->capped = capped;
    (s.tail ? s.tail->next : s.head) = x;
    s.tail = x;
    // Counted as held before the counts are read again (drain): a leave that saw no post
    // held then found its count already given back here (both seq_cst).
    s.queued.fetch_add(1, std::memory_order_seq_cst);
    held_total_.fetch_add(1, std::memory_order_relaxed);
    if (cls == ordering::kStrict) ++s.strict_held;
    if (capped) ++held_capped_;
  }
  drain(i);  // what it waited for may have gone meanwhile
  return OfiAdmit::kHeld;
}

// Issues the FIFO's heads while they may go, one thread at a time: a thread that finds
// another draining leaves it to that one, which looks at the head again after each issue
// (an issue that fails at once gives its count back through leave, into here: not recursed).
void OfiOrder::drain(uint32_t i) {
  Slot& s = slots_[i];
  std::unique_lock<std::mutex> lk(mu_);
  if (s.draining) return;
  s.draining = true;
  while (Node* x = s.head) {
    const bool relaxed = x->cls == ordering::kRelaxed;
    if (!relaxed && must_wait(s, x->path, x->cls)) break;
    OfiOrderTicket t;
    count(s, x->peer, x->path, relaxed, t);
    x->issuing = true;  // stays first (nothing goes before the head); fail leaves it
    lk.unlock();
    const OfiIssue r = hooks_.issue(hooks_.owner, x->item, t);
    lk.lock();
    x->issuing = false;
    if (r == OfiIssue::kRetry) {
      s.n[t.path][t.relaxed].fetch_sub(1, std::memory_order_seq_cst);
      if (!s.parked) {
        s.parked = true;
        parked_.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    }
    unlink_node(s, nullptr, x);
    delete x;
  }
  s.draining = false;
}

void OfiOrder::pump() {
  std::vector<uint32_t> again;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (uint32_t i = 0; i < kSlots; ++i)
      if (slots_[i].parked) {
        slots_[i].parked = false;
        parked_.fetch_sub(1, std::memory_order_relaxed);
        again.push_back(i);
      }
  }
  for (uint32_t i : again) drain(i);
}

uint32_t OfiOrder::fail(uint64_t peer, uint64_t status) {
  std::vector<void*> items;
  std::vector<uint32_t> touched;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const uint32_t from = peer == kAllPeers ? 0 : static_cast<uint32_t>(peer % kSlots);
    const uint32_t to = peer == kAllPeers ? kSlots : from + 1;
    for (uint32_t i = from; i < to; ++i) {
      Slot& s = slots_[i];
      Node* prev = nullptr;
      const size_t before = items.size();
      for (Node* x = s.head; x;) {
        Node* next = x->next;
        if (!x->issuing && (peer == kAllPeers || x->peer == peer)) {
          unlink_node(s, prev, x);
          items.push_back(x->item);
          delete x;
        } else {
          prev = x;
        }
        x = next;
      }
      if (items.size() != before && s.head) touched.push_back(i);
    }
  }
  for (void* item : items) hooks_.drop(hooks_.owner, item, status);
  for (uint32_t i : touched) drain(i);  // another peer's posts behind them in a shared slot
  return static_cast<uint32_t>(items.size());
}

uint32_t OfiOrder::held() const {
  uint32_t k = 0;
  for (const Slot& s : slots_) k += static_cast<uint32_t>(s.queued.load(std::memory_order_acquire));
  return k;
}

}  // namespace nicemu::ugni
