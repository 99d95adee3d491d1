// Completion calls (§7) and progress (§11): syncid test/wait, gsync test/wait, progress
// callbacks.
#include <algorithm>
#include <mutex>

#include "context.h"

using namespace nicemu::dmapp;

extern "C" {

dmapp_return_t dmapp_syncid_test(dmapp_syncid_handle_t* id, int* flag) {
  Context* c = context();
  if (!c || !id || !*id || !flag) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  dmapp_syncid* s = *id;
  if (!s->in_use) return DMAPP_RC_INVALID_PARAM;  // already retired
  c->progress(false);
  if (s->pending) {
    *flag = 0;
    return DMAPP_RC_SUCCESS;
  }
  *flag = 1;
  dmapp_return_t rc = s->error;
  if (!c->release_syncid(s)) return DMAPP_RC_INVALID_PARAM;
  *id = nullptr;
  return rc;
}

dmapp_return_t dmapp_syncid_wait(dmapp_syncid_handle_t* id) {
  Context* c = context();
  if (!c || !id || !*id) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  dmapp_syncid* s = *id;
  if (!s->in_use) return DMAPP_RC_INVALID_PARAM;
  dmapp_return_t rc = c->wait_group(s);
  if (!c->release_syncid(s)) return DMAPP_RC_INVALID_PARAM;
  *id = nullptr;
  return rc;
}

dmapp_return_t dmapp_gsync_test(int* flag) {
  Context* c = context();
  if (!c || !flag) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  c->progress(false);
  if (c->implicit.pending) {
    *flag = 0;
    return DMAPP_RC_SUCCESS;
  }
  *flag = 1;
  dmapp_return_t rc = c->implicit.error;
  c->implicit.error = DMAPP_RC_SUCCESS;
  return rc;
}

dmapp_return_t dmapp_gsync_wait(void) {
  Context* c = context();
  if (!c) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  return c->wait_group(&c->implicit);
}

dmapp_return_t dmapp_progress(void) {
  Context* c = context();
  if (!c) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  c->progress(false);
  queue_poll(*c);
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_register_progress_cb(int (*cb)(void*), void* data) {
  Context* c = context();
  if (!c || !cb) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  if (c->progress_cbs.size() >= 64) return DMAPP_RC_NO_SPACE;
  c->progress_cbs.emplace_back(cb, data);
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_deregister_progress_cb(int (*cb)(void*)) {
  Context* c = context();
  if (!c || !cb) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  auto it = std::find_if(c->progress_cbs.begin(), c->progress_cbs.end(), [&](auto& p) { return p.first == cb; });
  if (it == c->progress_cbs.end()) return DMAPP_RC_NOT_FOUND;
  c->progress_cbs.erase(it);
  return DMAPP_RC_SUCCESS;
}

}  // extern "C"
