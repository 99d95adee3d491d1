// Order between the ofi fabric's two paths to a peer (ofi_order.h says what and why).
#include "ofi_order.h"

#include <thread>

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

bool OfiOrder::must_wait(const Slot& s, OfiPath path, ordering::Class cls) const {
  // Relaxed posts in flight hold back only strict ones (either one relaxed: may pass).
  const int kinds = cls == ordering::kStrict ? 2 : 1;
  for (int q = 0; q < kOfiPaths; ++q) {
    if (ordered(caps_, static_cast<OfiPath>(q), path)) continue;
    for (int r = 0; r < kinds; ++r)
      if (s.n[q][r].load(std::memory_order_acquire) > 0) return true;
  }
  return false;
}

OfiOrderTicket OfiOrder::enter(Nic* n, uint64_t peer, OfiPath path, ordering::Class cls, void (*drive)(Nic*)) {
  OfiOrderTicket t;
  t.slot = static_cast<uint16_t>(peer % kSlots);
  t.path = static_cast<uint8_t>(path);
  t.relaxed = cls == ordering::kRelaxed;
  t.held = true;
  Slot& s = slots_[t.slot];
  // A relaxed post passes everything: counted only (strict ones wait for it), never waits.
  if (!t.relaxed) {
    // Waits as a post waiting for room in the provider does: it drives the provider (the
    // completions and replies it waits for come from there), yielding between looks.
    while (must_wait(s, path, cls)) {
      drive(n);
      std::this_thread::yield();
    }
  }
  s.n[t.path][t.relaxed].fetch_add(1, std::memory_order_acq_rel);
  return t;
}

void OfiOrder::leave(const OfiOrderTicket& t) {
  if (t.held) slots_[t.slot].n[t.path][t.relaxed].fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace nicemu::ugni
