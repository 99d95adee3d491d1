// A ring of the shared-memory ABI in plain memory, for the ring tests: its control block,
// `cap` slots (a power of two) and the view producers and consumers use. Slots names the
// view's pointer to the slot array (BteRingView::slots, CqRingView::entries, ...).
#pragma once
#include <cstdint>
#include <vector>

template <typename Ctl, typename Slot, typename View, auto Slots>
struct RingFixture {
  explicit RingFixture(uint32_t cap) : slots(cap) {
    view.ctl = &ctl;
    view.*Slots = slots.data();
    view.mask = cap - 1;
  }
  Ctl ctl{};
  std::vector<Slot> slots;
  View view;
};
