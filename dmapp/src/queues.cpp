// DMAPP queues (§10): one receive ring per PE in a block of the symmetric heap reserved at
// init (so it is at the same address on every PE), filled by the senders with GNI
// operations only: a remote fetch-and-add on the ring's tail claims a slot, a GET of the
// ring's head waits for room, and a put-with-flag writes the message and then the slot's
// sequence flag. The receiver runs its callback for each slot whose flag shows up, in
// order, from DMAPP progress (dmapp_progress, dmapp_queue_put and blocking waits); there is
// no progress thread (DMAPP_QUEUE_ASYNC_PROGRESS is refused).
#include <sched.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "context.h"

struct dmapp_queue {
  int (*cb)(void*, void*, uint32_t, dmapp_pe_t);
  void* context;
};

namespace nicemu::dmapp {

namespace {

// Ring header, then `depth` slots of `slot_bytes`:
//   slot: u64 flag (claim number + 1 once written), u32 length, i32 sender, payload.
struct RingHeader {
  uint64_t tail;  // claims so far: senders' fetch-and-add
  uint64_t head;  // messages consumed: written by the receiver, read by senders
  uint64_t pad[6];
};
static_assert(sizeof(RingHeader) == 64);
constexpr uint64_t kSlotHeader = 16;

dmapp_queue g_queue;
bool g_attached = false;
bool g_in_poll = false;

uint64_t slot_bytes(const Context& c) {
  return (kSlotHeader + uint64_t(c.attrs.queue_nelems) * 16 + 63) & ~uint64_t(63);
}
char* slot_at(const Context& c, uint64_t n) {
  return reinterpret_cast<char*>(c.queue_base + sizeof(RingHeader) + (n % c.attrs.queue_depth) * slot_bytes(c));
}
RingHeader* header(const Context& c) { return reinterpret_cast<RingHeader*>(c.queue_base); }

// Delivers what has arrived, in claim order; a callback may call DMAPP (even queue_put),
// but not re-enter the poll.
void poll(Context& c) {
  if (!g_attached || g_in_poll || !c.queue_base) return;
  g_in_poll = true;
  RingHeader* h = header(c);
  for (;;) {
    const uint64_t n = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
    char* s = slot_at(c, n);
    auto* flag = reinterpret_cast<uint64_t*>(s);
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != n + 1) break;
    uint32_t len;
    int32_t from;
    std::memcpy(&len, s + 8, sizeof len);
    std::memcpy(&from, s + 12, sizeof from);
    g_queue.cb(g_queue.context, s + kSlotHeader, len, from);
    __atomic_store_n(flag, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->head, n + 1, __ATOMIC_RELEASE);  // the slot is free for senders
  }
  g_in_poll = false;
}

}  // namespace

uint64_t queue_region_bytes(const dmapp_rma_attrs_ext_t& a) {
  return sizeof(RingHeader) + uint64_t(a.queue_depth) * ((kSlotHeader + uint64_t(a.queue_nelems) * 16 + 63) & ~uint64_t(63));
}

void queue_poll(Context& c) { poll(c); }
void queue_forget() { g_attached = false; }

}  // namespace nicemu::dmapp

using namespace nicemu::dmapp;

extern "C" {

dmapp_return_t dmapp_queue_attach(int (*cb)(void*, void*, uint32_t, dmapp_pe_t), void* ctx, uint64_t flags,
                                  dmapp_queue_handle_t* h) {
  Context* c = context();
  if (!c || !cb || !h) return DMAPP_RC_INVALID_PARAM;
  if (flags & DMAPP_QUEUE_ASYNC_PROGRESS) return DMAPP_RC_NOT_SUPPORTED;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  if (!c->queue_base) return DMAPP_RC_RESOURCE_ERROR;
  if (g_attached) return DMAPP_RC_BUSY;  // one queue per PE
  g_queue = dmapp_queue{cb, ctx};
  g_attached = true;
  *h = &g_queue;
  poll(*c);  // messages sent before we attached
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_queue_detach(dmapp_queue_handle_t h, uint64_t) {
  Context* c = context();
  if (!c || h != &g_queue || !g_attached) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  poll(*c);
  g_attached = false;
  return DMAPP_RC_SUCCESS;
}

dmapp_return_t dmapp_queue_put(dmapp_queue_handle_t h, void* source, uint64_t nelems, dmapp_type_t type,
                               dmapp_pe_t target, uint64_t) {
  Context* c = context();
  const uint64_t es = type_size(type);
  if (!c || h != &g_queue || !g_attached || !es || (nelems && !source)) return DMAPP_RC_INVALID_PARAM;
  if (target < 0 || target >= c->npes || nelems > c->attrs.queue_nelems) return DMAPP_RC_INVALID_PARAM;
  std::lock_guard<std::recursive_mutex> lk(c->mu);
  dmapp_jobinfo_t info;
  dmapp_get_jobinfo(&info);
  RingHeader* hd = header(*c);
  alignas(8) uint64_t claim = 0;
  dmapp_return_t rc = dmapp_afadd_qw(&claim, &hd->tail, &info.sheap_seg, target, 1);
  if (rc != DMAPP_RC_SUCCESS) return rc;
  // The slot is ours; wait until the receiver has consumed what was in it.
  for (;;) {
    alignas(8) uint64_t head = 0;
    if ((rc = dmapp_get(&head, &hd->head, &info.sheap_seg, target, 1, DMAPP_QW)) != DMAPP_RC_SUCCESS) return rc;
    if (claim - head < c->attrs.queue_depth) break;
    poll(*c);  // the target may be waiting for room in ours
    sched_yield();
  }
  const uint64_t bytes = nelems * es;
  std::vector<char> msg(8 + bytes);
  const uint32_t len = uint32_t(bytes);
  const int32_t from = c->pe;
  std::memcpy(msg.data(), &len, sizeof len);
  std::memcpy(msg.data() + 4, &from, sizeof from);
  if (bytes) std::memcpy(msg.data() + 8, source, bytes);
  char* s = slot_at(*c, claim);
  rc = dmapp_put_flag(s + 8, &info.sheap_seg, target, msg.data(), msg.size(), DMAPP_BYTE, s, claim + 1);
  poll(*c);
  return rc;
}

}  // extern "C"
