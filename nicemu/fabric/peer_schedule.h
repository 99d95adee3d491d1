// Which of a transport's peers need attention at its next flush, so that a flush costs what
// the peers with work cost, not what all peers cost (a daemon of a 128-host cluster talks to
// 127 peers and flushes after every receive batch and every timer).
//
// Peers are named by dense slots (0, 1, 2, ... in the order the caller makes them). A peer
// is *marked* when something happened to it that a flush must act on (a message queued,
// a packet received, a packet refused by the kernel); it is *due* once its deadline (the
// earliest time its channel has something to do without any event: a pacing release, a
// record's timer, the liveness horizon, a probe) has come. take() hands over the marked
// ones, the due ones among them (take_due first), each once, in the order they became
// marked; the caller flushes them and sets each one's next deadline again.
//
// Deadlines are an indexed binary min-heap (a position per slot), so setting one is
// O(log peers) and the earliest is read in O(1). No allocation once every slot was seen.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace nicemu::fabric {

class PeerSchedule {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;

  // Slot `id` has work: it is in the next take().
  void mark(uint32_t id) {
    grow(id);
    if (marked_[id]) return;
    marked_[id] = 1;
    work_.push_back(id);
  }
  bool marked(uint32_t id) const { return id < marked_.size() && marked_[id]; }
  // Marks every slot whose deadline is at or before `now` (and forgets its deadline: the
  // flush sets the next one).
  void take_due(uint64_t now) {
    while (!heap_.empty() && heap_.front().first <= now) {
      const uint32_t id = heap_.front().second;
      remove_at(0);
      mark(id);
    }
  }
  // The marked slots, in the order they were marked, into `out` (cleared first); none is
  // marked afterwards. `out` is swapped with the internal list, so neither allocates
  // once both have grown.
  void take(std::vector<uint32_t>& out) {
    out.clear();
    out.swap(work_);
    for (uint32_t id : out) marked_[id] = 0;
  }
  // When slot `id` next has something to do without an event (kNever: nothing).
  void set_deadline(uint32_t id, uint64_t at) {
    grow(id);
    uint32_t& i = pos_[id];
    if (at == kNever) {
      if (i != kNone) remove_at(i);
      return;
    }
    if (i == kNone) {
      i = static_cast<uint32_t>(heap_.size());
      heap_.emplace_back(at, id);
      up(i);
      return;
    }
    const uint64_t old = heap_[i].first;
    heap_[i].first = at;
    if (at < old)
      up(i);
    else
      down(i);
  }
  uint64_t deadline(uint32_t id) const {
    return id < pos_.size() && pos_[id] != kNone ? heap_[pos_[id]].first : kNever;
  }
  // The earliest deadline of any slot (kNever: none).
  uint64_t next_deadline() const { return heap_.empty() ? kNever : heap_.front().first; }
  size_t scheduled() const { return heap_.size(); }  // slots with a deadline
  size_t pending() const { return work_.size(); }     // slots marked

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  void grow(uint32_t id) {
    if (id < pos_.size()) return;
    pos_.resize(id + 1, kNone);
    marked_.resize(id + 1, 0);
  }
  void place(uint32_t i, std::pair<uint64_t, uint32_t> e) {
    heap_[i] = e;
    pos_[e.second] = i;
  }
  void up(uint32_t i) {
    const auto e = heap_[i];
    while (i > 0) {
      const uint32_t parent = (i - 1) / 2;
      if (heap_[parent].first <= e.first) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
  }
  void down(uint32_t i) {
    const auto e = heap_[i];
    const uint32_t n = static_cast<uint32_t>(heap_.size());
    for (;;) {
      uint32_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && heap_[c + 1].first < heap_[c].first) ++c;
      if (heap_[c].first >= e.first) break;
      place(i, heap_[c]);
      i = c;
    }
    place(i, e);
  }
  void remove_at(uint32_t i) {
    pos_[heap_[i].second] = kNone;
    const auto last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    const uint64_t old = heap_[i].first;
    place(i, last);
    if (last.first < old)
      up(i);
    else
      down(i);
  }

  std::vector<std::pair<uint64_t, uint32_t>> heap_;  // (deadline, slot)
  std::vector<uint32_t> pos_;                        // slot -> index in heap_ (kNone: none)
  std::vector<uint8_t> marked_;                      // slot -> in work_
  std::vector<uint32_t> work_;                       // marked slots, in order
};

}  // namespace nicemu::fabric
