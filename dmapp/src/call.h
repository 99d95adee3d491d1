// One API call's completion class (blocking, _nb, _nbi): which group its posts join, and
// what happens at the end of the call (wait, hand out the syncid, nothing).
#pragma once
#include <mutex>

#include "context.h"

namespace nicemu::dmapp {

enum class Mode { kBlocking, kNb, kNbi };

class Call {
 public:
  Call(Mode mode, dmapp_syncid_handle_t* syncid) : mode_(mode), out_(syncid), c_(context()) {
    if (c_) lock_ = std::unique_lock<std::recursive_mutex>(c_->mu);
  }
  // Checks the context and, for _nb, claims a syncid. SUCCESS or the error to return.
  dmapp_return_t begin() {
    if (!c_) return DMAPP_RC_INVALID_PARAM;  // not initialised
    switch (mode_) {
      case Mode::kBlocking: group_ = &local_; break;
      case Mode::kNbi: group_ = &c_->implicit; break;
      case Mode::kNb:
        if (!out_) return DMAPP_RC_INVALID_PARAM;
        group_ = c_->alloc_syncid();
        if (!group_) {
          c_->progress(false);
          return DMAPP_RC_NO_SPACE;  // every syncid is still held: test or wait some
        }
        break;
    }
    return DMAPP_RC_SUCCESS;
  }
  Context& ctx() { return *c_; }
  dmapp_syncid* group() { return group_; }
  // The first post of a non-blocking call may fail with NO_SPACE; later ones wait for room,
  // so that a call is never left half posted.
  bool may_block() {
    bool b = mode_ == Mode::kBlocking || posted_;
    posted_ = true;
    return b;
  }
  // Ends the call with `rc` (the first error met while posting, or SUCCESS).
  dmapp_return_t finish(dmapp_return_t rc) {
    switch (mode_) {
      case Mode::kBlocking: {
        dmapp_return_t w = c_->wait_group(group_);
        return rc != DMAPP_RC_SUCCESS ? rc : w;
      }
      case Mode::kNb:
        if (rc != DMAPP_RC_SUCCESS) {
          // Nothing to hand out: retire what was posted, and the syncid with it.
          c_->wait_group(group_);
          c_->release_syncid(group_);
          return rc;
        }
        *out_ = group_;
        return rc;
      case Mode::kNbi:
        return rc;
    }
    return rc;
  }

 private:
  Mode mode_;
  dmapp_syncid_handle_t* out_;
  Context* c_;
  std::unique_lock<std::recursive_mutex> lock_;
  dmapp_syncid local_;
  dmapp_syncid* group_ = nullptr;
  bool posted_ = false;
};

// One contiguous piece, FMA or BTE by the offload threshold (transfers.cpp).
dmapp_return_t put_piece(Call& call, dmapp_pe_t pe, const Remote& r, const void* src, uint64_t bytes,
                         const Remote* flag = nullptr, uint64_t flag_value = 0, bool copy_source = false);
dmapp_return_t get_piece(Call& call, dmapp_pe_t pe, const Remote& r, void* dst, uint64_t bytes);

}  // namespace nicemu::dmapp
