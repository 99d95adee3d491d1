// The process-wide state of libdmapp: the PE table (NIC address, endpoint, peers'
// segment handles), the two symmetric segments, the attributes, the request pool and the
// completion groups (syncids and the implicit group). DMAPP is built on libugni's public
// API only, as Cray's is built on GNI.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "dmapp.h"
#include "symmetric_heap.h"

// A completion group: one explicit syncid, the implicit (nbi) group, or a blocking call.
// Several GNI posts may belong to one group (strided, indexed, multi-PE calls).
struct dmapp_syncid {
  uint32_t pending = 0;
  dmapp_return_t error = DMAPP_RC_SUCCESS;
  bool in_use = false;
};

namespace nicemu::dmapp {

// seg_desc.flags of the two symmetric segments: the library finds the target PE's
// registration from the caller's own descriptor (§3). 0 marks a dynamic segment, whose
// descriptor is the remote PE's.
constexpr uint16_t kSegDynamic = 0;
constexpr uint16_t kSegData = 0xD1;
constexpr uint16_t kSegHeap = 0xD2;

// Size of each request's bounce slot: fetched AMO values and small GETs into memory that is
// not registered, PUT sources of RDMA posts from unregistered memory.
constexpr size_t kBounceBytes = 4096;

struct Peer {
  uint32_t nic_addr = 0;
  gni_ep_handle_t ep = nullptr;
  uint64_t data_base = 0;  // data segment base in that PE (ASLR: differs per process)
  gni_mem_handle_t data_mh{};
  gni_mem_handle_t heap_mh{};
};

// One GNI post in flight. `desc` comes first: GNI_GetCompleted hands back its address.
struct Request {
  gni_post_descriptor_t desc{};
  dmapp_syncid* group = nullptr;
  uint32_t index = 0;
  int pe = 0;
  bool rdma = false;
  bool in_flight = false;       // posted, its one CQ event not yet taken
  uint8_t retries = 0;
  void* bounce = nullptr;       // this request's slot in the registered bounce arena
  void* copy_to = nullptr;      // GET through the bounce slot: copy out at completion
  size_t copy_len = 0;
  uint32_t copy_off = 0;        // where the wanted bytes start in the slot (unaligned GETs)
  bool temp_registered = false; // local side registered for this post only
  gni_mem_handle_t temp_mh{};
  bool flag_pending = false;    // put-with-flag through BTE: the flag follows the data
  uint64_t flag_addr = 0;
  uint64_t flag_value = 0;
  gni_mem_handle_t flag_mh{};
};

// Where a remote access goes: the target PE's address and registration.
struct Remote {
  uint64_t addr = 0;
  gni_mem_handle_t mh{};
};

struct Segment {
  uint64_t base = 0;
  uint64_t len = 0;
  gni_mem_handle_t mh{};
};

class Context {
 public:
  dmapp_return_t init(const dmapp_rma_attrs_ext_t& req, dmapp_rma_attrs_ext_t* actual);
  dmapp_return_t finalize();

  int pe = 0;
  int npes = 0;
  dmapp_rma_attrs_ext_t attrs{};
  std::recursive_mutex mu;  // max_concurrency > 1: one caller at a time inside the library

  gni_cdm_handle_t cdm = nullptr;
  gni_nic_handle_t nic = nullptr;
  gni_cq_handle_t cq = nullptr;
  std::vector<Peer> peers;
  Segment data;
  Segment heap;
  SymmetricHeap heap_alloc;
  std::vector<Segment> dynamic;  // this PE's dmapp_mem_register'd ranges
  uint64_t queue_base = 0;       // this PE's queue ring in the symmetric heap (queues.cpp)

  // The remote side of an access of `bytes` at `addr` in `seg` on `pe`.
  dmapp_return_t resolve(const void* addr, uint64_t bytes, const dmapp_seg_desc_t* seg, dmapp_pe_t pe,
                         Remote& out) const;
  // A local registration covering [addr, addr+bytes), if any.
  bool local_handle(const void* addr, uint64_t bytes, gni_mem_handle_t& mh) const;
  void fill_seg(dmapp_seg_desc_t& d, const Segment& s, uint16_t kind) const;

  // Requests (requests.cpp).
  Request* alloc_request(bool may_block);
  void free_request(Request* r);
  dmapp_return_t post(Request* r);
  void progress(bool block);
  dmapp_return_t wait_group(dmapp_syncid* g);
  dmapp_syncid* alloc_syncid();
  // False if `s` is not a live syncid of this context.
  bool release_syncid(dmapp_syncid* s);
  const gni_mem_handle_t& bounce_mh() const { return bounce_mh_; }
  // 3 on Gemini, whose GETs also need a 4-byte aligned local address; 0 on Aries.
  uint64_t get_local_align_mask = 0;
  dmapp_syncid implicit;  // all _nbi requests
  std::vector<std::pair<int (*)(void*), void*>> progress_cbs;

  uint16_t put_dlvr_mode() const;
  uint16_t get_dlvr_mode() const;

 private:
  void complete(Request* r, bool ok, gni_cq_entry_t ev);
  void cq_overrun();
  std::vector<Request> requests_;
  // Requests in flight when the CQ overran: their callers were told TRANSACTION_ERROR, and
  // each goes back to the pool when its event comes after all (never, if that was lost).
  dmapp_syncid orphans_;
  uint32_t in_flight_ = 0;
  std::vector<uint32_t> free_requests_;
  std::vector<dmapp_syncid> syncids_;
  std::vector<uint32_t> free_syncids_;
  void* bounce_arena_ = nullptr;
  gni_mem_handle_t bounce_mh_{};
  bool data_registered_ = false;
  bool heap_registered_ = false;
  bool pmi_initialized_by_us_ = false;  // our PMI_Init reference, returned at finalize
  friend dmapp_return_t release_all(Context&);
};

// Queues (queues.cpp): the ring's size for the attributes, delivery of arrived messages,
// and forgetting the attached queue at finalize.
uint64_t queue_region_bytes(const dmapp_rma_attrs_ext_t& a);
void queue_poll(Context& c);
void queue_forget();

// The attributes dmapp_init uses when given none, and what the attribute queries report
// before dmapp_init (init_query.cpp).
dmapp_rma_attrs_ext_t default_attrs();

// Undoes whatever init() managed to set up.
dmapp_return_t release_all(Context& c);

// The one context of the process, or nullptr before dmapp_init / after dmapp_finalize.
Context* context();
void set_context(Context* c);

// Element size of a dmapp_type_t, 0 if invalid.
inline uint64_t type_size(dmapp_type_t t) {
  switch (t) {
    case DMAPP_DQW: return 16;
    case DMAPP_QW: return 8;
    case DMAPP_DW: return 4;
    case DMAPP_BYTE: return 1;
  }
  return 0;
}

dmapp_return_t from_gni(gni_return_t rc);

}  // namespace nicemu::dmapp
