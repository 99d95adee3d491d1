// dmapp_init(_ext), dmapp_finalize and the query calls (§4), and the error strings.
#include <cstring>
#include <mutex>

#include "context.h"

using namespace nicemu::dmapp;

namespace nicemu::dmapp {

// The one definition of the defaults: dmapp_init(NULL, ...) uses them, and the attribute
// queries report them before dmapp_init (programs read them, change a few fields and pass
// them to init). Routing defaults as Cray's header states them.
dmapp_rma_attrs_ext_t default_attrs() {
  dmapp_rma_attrs_ext_t a{};
  a.max_outstanding_nb = DMAPP_DEF_OUTSTANDING_NB;
  a.offload_threshold = DMAPP_OFFLOAD_THRESHOLD;
  a.put_relaxed_ordering = DMAPP_ROUTING_DETERMINISTIC;
  a.get_relaxed_ordering = DMAPP_ROUTING_ADAPTIVE;
  a.max_concurrency = 1;
  a.PI_ordering = DMAPP_PI_ORDERING_STRICT;
  a.queue_depth = DMAPP_QUEUE_DEFAULT_DEPTH;
  a.queue_nelems = DMAPP_QUEUE_DEFAULT_NELEMS;
  return a;
}

}  // namespace nicemu::dmapp

namespace {

std::mutex g_init_mu;

dmapp_rma_attrs_ext_t widen(const dmapp_rma_attrs_t& a) {
  dmapp_rma_attrs_ext_t e = default_attrs();
  e.max_outstanding_nb = a.max_outstanding_nb;
  e.offload_threshold = a.offload_threshold;
  e.put_relaxed_ordering = a.put_relaxed_ordering;
  e.get_relaxed_ordering = a.get_relaxed_ordering;
  e.max_concurrency = a.max_concurrency;
  return e;
}

void narrow(const dmapp_rma_attrs_ext_t& e, dmapp_rma_attrs_t* a) {
  a->max_outstanding_nb = e.max_outstanding_nb;
  a->offload_threshold = e.offload_threshold;
  a->put_relaxed_ordering = e.put_relaxed_ordering;
  a->get_relaxed_ordering = e.get_relaxed_ordering;
  a->max_concurrency = e.max_concurrency;
}

dmapp_return_t init_common(const dmapp_rma_attrs_ext_t& req, dmapp_rma_attrs_ext_t* actual) {
  std::lock_guard<std::mutex> lk(g_init_mu);
  if (context()) return DMAPP_RC_INVALID_PARAM;  // call exactly one of init/init_ext, once
  auto* c = new Context;
  dmapp_return_t rc = c->init(req, actual);
  if (rc != DMAPP_RC_SUCCESS) {
    release_all(*c);
    delete c;
    return rc;
  }
  set_context(c);
  return rc;
}

}  // namespace

extern "C" {

const char* dmapp_err_str[] = {
    "DMAPP_RC_SUCCESS: success",
    "DMAPP_RC_INVALID_PARAM: invalid parameter (bad PE, segment, address range, type or handle; or not initialised)",
    "DMAPP_RC_ALIGNMENT_ERROR: misaligned address or length",
    "DMAPP_RC_TRANSACTION_ERROR: a network transaction failed (the target refused the access or is gone)",
    "DMAPP_RC_RESOURCE_ERROR: out of resources (initialisation, registration)",
    "DMAPP_RC_PERMISSION_ERROR: operation not permitted",
    "DMAPP_RC_NO_SPACE: too many outstanding non-blocking requests; sync some or raise max_outstanding_nb",
    "DMAPP_RC_NOT_DONE: not complete",
    "DMAPP_RC_NOT_SUPPORTED: not supported by this implementation",
    "DMAPP_RC_NOT_FOUND: not found",
    "DMAPP_RC_BUSY: object in use",
    "DMAPP_RC_NOT_USED: reserved",
};

dmapp_return_t dmapp_explain_error(dmapp_return_t rc, const char** msg) {
  if (!msg) return DMAPP_RC_INVALID_PARAM;
  const unsigned i = unsigned(rc);
  *msg = i < sizeof dmapp_err_str / sizeof *dmapp_err_str ? dmapp_err_str[i] : "unknown DMAPP return code";
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_init(dmapp_rma_attrs_t* req, dmapp_rma_attrs_t* actual) {
  dmapp_rma_attrs_ext_t e = req ? widen(*req) : default_attrs(), out{};
  dmapp_return_t rc = init_common(e, &out);
  if (rc == DMAPP_RC_SUCCESS && actual) narrow(out, actual);
  return rc;
}

dmapp_return_t dmapp_init_ext(dmapp_rma_attrs_ext_t* req, dmapp_rma_attrs_ext_t* actual) {
  return init_common(req ? *req : default_attrs(), actual);
}

dmapp_return_t dmapp_finalize(void) {
  std::lock_guard<std::mutex> lk(g_init_mu);
  Context* c = context();
  if (!c) return DMAPP_RC_INVALID_PARAM;
  dmapp_return_t rc;
  {
    std::lock_guard<std::recursive_mutex> l2(c->mu);
    rc = c->finalize();
  }
  set_context(nullptr);
  delete c;
  return rc;
}

dmapp_return_t dmapp_initialized(int* flag) {
  if (!flag) return DMAPP_RC_INVALID_PARAM;
  *flag = context() != nullptr;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_get_jobinfo(dmapp_jobinfo_t* info) {
  Context* c = context();
  if (!c || !info) return DMAPP_RC_INVALID_PARAM;
  std::memset(info, 0, sizeof *info);
  info->version = DMAPP_VERSION;
  gni_nic_device_t dev = GNI_DEVICE_ARIES;
  GNI_GetDeviceType(&dev);
  info->hw_version = int(dev);
  info->npes = c->npes;
  info->pe = c->pe;
  c->fill_seg(info->data_seg, c->data, kSegData);
  c->fill_seg(info->sheap_seg, c->heap, kSegHeap);
  return DMAPP_RC_SUCCESS;
}

// Before dmapp_init (and after dmapp_finalize): the defaults init would use; then the
// attributes in force.
dmapp_return_t dmapp_get_rma_attrs_ext(dmapp_rma_attrs_ext_t* a) {
  if (!a) return DMAPP_RC_INVALID_PARAM;
  Context* c = context();
  if (!c) {
    *a = default_attrs();
    return DMAPP_RC_SUCCESS;
  }
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  *a = c->attrs;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_get_rma_attrs(dmapp_rma_attrs_t* a) {
  if (!a) return DMAPP_RC_INVALID_PARAM;
  dmapp_rma_attrs_ext_t e{};
  dmapp_get_rma_attrs_ext(&e);
  narrow(e, a);
  return DMAPP_RC_SUCCESS;
}

// Only the dynamic attributes change: offload threshold, routing, PI ordering (of later
// registrations). max_outstanding_nb and max_concurrency are init-time; `actual` shows them
// unchanged.
dmapp_return_t dmapp_set_rma_attrs_ext(dmapp_rma_attrs_ext_t* req, dmapp_rma_attrs_ext_t* actual) {
  Context* c = context();
  if (!c || !req) return DMAPP_RC_INVALID_PARAM;
  if (req->put_relaxed_ordering > DMAPP_ROUTING_ADAPTIVE || req->get_relaxed_ordering > DMAPP_ROUTING_ADAPTIVE ||
      req->PI_ordering > DMAPP_PI_ORDERING_RELAXED)
    return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  c->attrs.offload_threshold = req->offload_threshold;
  c->attrs.put_relaxed_ordering = req->put_relaxed_ordering;
  c->attrs.get_relaxed_ordering = req->get_relaxed_ordering;
  c->attrs.PI_ordering = req->PI_ordering;
  if (actual) *actual = c->attrs;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_set_rma_attrs(dmapp_rma_attrs_t* req, dmapp_rma_attrs_t* actual) {
  Context* c = context();
  if (!c || !req) return DMAPP_RC_INVALID_PARAM;
  dmapp_rma_attrs_ext_t e{};
  dmapp_get_rma_attrs_ext(&e);
  e.offload_threshold = req->offload_threshold;
  e.put_relaxed_ordering = req->put_relaxed_ordering;
  e.get_relaxed_ordering = req->get_relaxed_ordering;
  dmapp_rma_attrs_ext_t out{};
  dmapp_return_t rc = dmapp_set_rma_attrs_ext(&e, &out);
  if (rc == DMAPP_RC_SUCCESS && actual) narrow(out, actual);
  return rc;
}

}  // extern "C"
