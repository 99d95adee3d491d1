// An active-message progress engine over uGNI SMSG, shaped like the ones real clients run
// (UCX's uct/ugni smsg interface, Open MPI's btl/ugni), so gni_bench can time and profile
// a whole round as users see it, not only the message:
//  - two CQs: local completions (one per SMSG send, reaped by msg_id into a send
//    descriptor that is then free again) and remote events (the mailboxes' CQ);
//  - a remote event names its endpoint by the event data set with GNI_EpSetEventData;
//    the engine then takes every message waiting there (GNI_SmsgGetNextWTag until
//    NOT_DONE), dispatches each by tag to a handler and releases it;
//  - handlers may send (a reply), so a send can run out of credits inside progress: the
//    caller sees NOT_DONE and progresses again, as a UCX or Open MPI caller does;
//  - an SMSG event with no message is credits coming back (the hardware's credit message).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "gni_pub.h"

namespace nicemu::bench {

class AmEngine {
 public:
  using Handler = void (*)(AmEngine&, uint32_t ep_index, const void* payload, void* arg);

  AmEngine(gni_cq_handle_t local_cq, gni_cq_handle_t remote_cq, uint32_t max_inflight)
      : local_cq_(local_cq), remote_cq_(remote_cq), descs_(max_inflight) {
    free_.reserve(max_inflight);
    for (uint32_t i = max_inflight; i > 0; --i) free_.push_back(i - 1);
  }

  // Registers an endpoint; remote events for it carry `index` (GNI_EpSetEventData).
  gni_return_t add_ep(gni_ep_handle_t ep, uint32_t index) {
    if (index >= eps_.size()) eps_.resize(index + 1, nullptr);
    eps_[index] = ep;
    return GNI_EpSetEventData(ep, index, index);
  }
  void on(uint8_t tag, Handler h, void* arg) { handlers_[tag] = {h, arg}; }

  // SUCCESS, NOT_DONE (no credit or no free descriptor: progress and retry), or the error.
  gni_return_t send(uint32_t ep_index, uint8_t tag, const void* data, uint32_t len) {
    if (free_.empty()) return GNI_RC_NOT_DONE;
    const uint32_t id = free_.back();
    gni_return_t rc = GNI_SmsgSendWTag(eps_[ep_index], nullptr, 0, const_cast<void*>(data), len, id, tag);
    if (rc != GNI_RC_SUCCESS) return rc;
    free_.pop_back();
    descs_[id] = Desc{ep_index, true};
    return rc;
  }

  // One pass over both CQs. Returns the number of messages handled, or -1 on a CQ error.
  int progress() {
    gni_cq_entry_t e;
    gni_return_t rc;
    while ((rc = GNI_CqGetEvent(local_cq_, &e)) == GNI_RC_SUCCESS) {
      const uint32_t id = GNI_CQ_GET_MSG_ID(e);
      if (id >= descs_.size() || !descs_[id].busy) return fail("local completion for an unknown send descriptor");
      descs_[id].busy = false;
      free_.push_back(id);
      ++local_completions;
    }
    if (rc != GNI_RC_NOT_DONE) return fail("local CQ error", rc);
    int handled = 0;
    for (;;) {
      rc = GNI_CqGetEvent(remote_cq_, &e);
      if (rc == GNI_RC_NOT_DONE) return handled;
      int n = 0;
      if (rc == GNI_RC_SUCCESS) {
        const uint32_t index = GNI_CQ_GET_INST_ID(e);
        if (index >= eps_.size() || !eps_[index]) return fail("remote event for an unknown endpoint");
        n = drain_ep(index);
        if (n == 0) ++credit_events;
      } else if (rc == GNI_RC_ERROR_RESOURCE) {
        // Overrun: events were lost, not messages (each event only says "look"). Taking every
        // waiting message per event lets events pile up behind the messages; recover as
        // btl/ugni does, by looking at every endpoint.
        ++overruns;
        for (uint32_t i = 0; i < eps_.size() && n >= 0; ++i) {
          if (!eps_[i]) continue;
          const int k = drain_ep(i);
          n = k < 0 ? k : n + k;
        }
      } else {
        return fail("remote CQ error", rc);
      }
      if (n < 0) return -1;
      handled += n;
    }
  }

  uint32_t inflight() const { return uint32_t(descs_.size() - free_.size()); }

  uint64_t local_completions = 0;
  uint64_t credit_events = 0;  // SMSG events that found no message
  uint64_t overruns = 0;       // remote CQ overruns recovered from
  const char* error = nullptr;  // what made progress() return -1
  gni_return_t error_rc = GNI_RC_SUCCESS;

 private:
  struct Desc {
    uint32_t ep_index = 0;
    bool busy = false;
  };
  struct Slot {
    Handler h = nullptr;
    void* arg = nullptr;
  };

  int fail(const char* what, gni_return_t rc = GNI_RC_SUCCESS) {
    error = what;
    error_rc = rc;
    return -1;
  }

  int drain_ep(uint32_t index) {
    gni_ep_handle_t ep = eps_[index];
    int n = 0;
    for (;;) {
      void* msg = nullptr;
      uint8_t tag = GNI_SMSG_ANY_TAG;
      gni_return_t rc = GNI_SmsgGetNextWTag(ep, &msg, &tag);
      if (rc == GNI_RC_NOT_DONE) return n;
      if (rc != GNI_RC_SUCCESS) return fail("GNI_SmsgGetNextWTag", rc);
      // The handler runs on the mailbox slot, before the release (as btl/ugni's callbacks do).
      const Slot& s = handlers_[tag];
      if (!s.h) return fail("message with a tag nobody handles");
      s.h(*this, index, msg, s.arg);
      if ((rc = GNI_SmsgRelease(ep)) != GNI_RC_SUCCESS) return fail("GNI_SmsgRelease", rc);
      ++n;
    }
  }

  gni_cq_handle_t local_cq_;
  gni_cq_handle_t remote_cq_;
  std::vector<gni_ep_handle_t> eps_;
  std::vector<Desc> descs_;
  std::vector<uint32_t> free_;
  std::array<Slot, 256> handlers_{};
};

}  // namespace nicemu::bench
