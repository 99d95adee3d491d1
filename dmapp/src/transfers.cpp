// The data-motion calls (§5): contiguous, strided, indexed, multi-PE and put-with-flag, in
// their blocking, _nb and _nbi forms. Each call becomes one or more contiguous pieces; a
// piece goes to FMA (GNI_PostFma) up to the offload threshold and to the BTE
// (GNI_PostRdma) above it, as DMAPP switches on Gemini/Aries. GETs of any address and
// length: what GNI's alignment rules refuse goes partly or wholly through bounce slots.
#include <cstring>

#include "call.h"

namespace nicemu::dmapp {

namespace {

// The local side of a post that needs a registration (every BTE post, FMA GETs): an
// existing registration, the request's bounce slot, or a registration for this post only.
dmapp_return_t local_side(Context& c, Request* q, void* addr, uint64_t bytes, bool is_get) {
  gni_mem_handle_t mh{};
  if (c.local_handle(addr, bytes, mh)) {
    q->desc.local_addr = reinterpret_cast<uint64_t>(addr);
    q->desc.local_mem_hndl = mh;
    return DMAPP_RC_SUCCESS;
  }
  if (bytes <= kBounceBytes) {
    if (is_get) {
      q->copy_to = addr;
      q->copy_len = bytes;
    } else {
      std::memcpy(q->bounce, addr, bytes);
    }
    q->desc.local_addr = reinterpret_cast<uint64_t>(q->bounce);
    q->desc.local_mem_hndl = c.bounce_mh();
    return DMAPP_RC_SUCCESS;
  }
  if (GNI_MemRegister(c.nic, reinterpret_cast<uint64_t>(addr), bytes, nullptr, GNI_MEM_READWRITE, uint32_t(-1),
                      &q->temp_mh) != GNI_RC_SUCCESS)
    return DMAPP_RC_RESOURCE_ERROR;
  q->temp_registered = true;
  q->desc.local_addr = reinterpret_cast<uint64_t>(addr);
  q->desc.local_mem_hndl = q->temp_mh;
  return DMAPP_RC_SUCCESS;
}

}  // namespace

dmapp_return_t put_piece(Call& call, dmapp_pe_t pe, const Remote& r, const void* src, uint64_t bytes,
                         const Remote* flag, uint64_t flag_value, bool copy_source) {
  Context& c = call.ctx();
  Request* q = c.alloc_request(call.may_block());
  if (!q) return DMAPP_RC_NO_SPACE;
  q->group = call.group();
  q->pe = pe;
  q->rdma = bytes > c.attrs.offload_threshold;
  q->desc.dlvr_mode = c.put_dlvr_mode();
  q->desc.remote_addr = r.addr;
  q->desc.remote_mem_hndl = r.mh;
  q->desc.length = bytes;
  if (!q->rdma) {
    // FMA PUT sources need no registration; the flag rides on the same transaction.
    q->desc.type = flag ? GNI_POST_FMA_PUT_W_SYNCFLAG : GNI_POST_FMA_PUT;
    q->desc.local_addr = reinterpret_cast<uint64_t>(src);
    if (copy_source && bytes <= kBounceBytes) {  // a source on the library's stack
      std::memcpy(q->bounce, src, bytes);
      q->desc.local_addr = reinterpret_cast<uint64_t>(q->bounce);
    }
    if (flag) {
      q->desc.sync_flag_addr = flag->addr;
      q->desc.sync_flag_value = flag_value;
    }
    return c.post(q);
  }
  q->desc.type = GNI_POST_RDMA_PUT;
  dmapp_return_t rc = local_side(c, q, const_cast<void*>(src), bytes, false);
  if (rc != DMAPP_RC_SUCCESS) {
    c.free_request(q);
    return rc;
  }
  if (flag) {
    // The BTE has no flag: the completer posts it once the data is at the target.
    q->flag_pending = true;
    q->flag_addr = flag->addr;
    q->flag_mh = flag->mh;
    q->flag_value = flag_value;
  }
  return c.post(q);
}

namespace {

// A GET request of [raddr, raddr+len) on the engine its size picks; the local side is the
// caller's to fill. nullptr when no request is free.
Request* get_request(Call& call, dmapp_pe_t pe, uint64_t raddr, const gni_mem_handle_t& mh, uint64_t len) {
  Context& c = call.ctx();
  Request* q = c.alloc_request(call.may_block());
  if (!q) return nullptr;
  q->group = call.group();
  q->pe = pe;
  q->rdma = len > c.attrs.offload_threshold;
  q->desc.type = q->rdma ? GNI_POST_RDMA_GET : GNI_POST_FMA_GET;
  q->desc.dlvr_mode = c.get_dlvr_mode();
  q->desc.remote_addr = raddr;
  q->desc.remote_mem_hndl = mh;
  q->desc.length = len;
  return q;
}

// One GET of the aligned remote range [raddr, raddr+len), len <= kBounceBytes, into the
// request's registered bounce slot; at completion `n` bytes from `off` in the slot go to
// `dst` (Context::complete, before the group counts the request done).
dmapp_return_t bounce_get(Call& call, dmapp_pe_t pe, uint64_t raddr, const gni_mem_handle_t& mh, uint64_t len,
                          uint64_t off, void* dst, uint64_t n) {
  Context& c = call.ctx();
  Request* q = get_request(call, pe, raddr, mh, len);
  if (!q) return DMAPP_RC_NO_SPACE;
  q->desc.local_addr = reinterpret_cast<uint64_t>(q->bounce);
  q->desc.local_mem_hndl = c.bounce_mh();
  q->copy_to = dst;
  q->copy_off = uint32_t(off);
  q->copy_len = n;
  return c.post(q);
}

// A GET that GNI would refuse for alignment (remote address or length not a multiple of 4;
// on Gemini also the local address). Cray's DMAPP moves such GETs itself, and so does this:
// the aligned superset of the remote range is read (segments are registered in whole pages,
// so the superset is inside the registration) and only the wanted bytes are copied out.
// Up to one bounce slot it is one GET; above, the unaligned head and tail words go through
// bounce slots and the aligned middle straight to the engine, as any aligned GET.
dmapp_return_t unaligned_get(Call& call, dmapp_pe_t pe, const Remote& r, void* dst, uint64_t bytes) {
  const uint64_t lo = r.addr & ~uint64_t(3), hi = (r.addr + bytes + 3) & ~uint64_t(3);
  if (hi - lo <= kBounceBytes) return bounce_get(call, pe, lo, r.mh, hi - lo, r.addr - lo, dst, bytes);
  char* out = static_cast<char*>(dst);
  const uint64_t head = ((r.addr + 3) & ~uint64_t(3)) - r.addr;  // bytes before the first whole word
  const uint64_t tail = (r.addr + bytes) & 3;                     // bytes after the last whole word
  const uint64_t mid = bytes - head - tail;                       // > 0: hi - lo > kBounceBytes
  dmapp_return_t rc = DMAPP_RC_SUCCESS;
  if (head) rc = bounce_get(call, pe, lo, r.mh, 4, r.addr - lo, out, head);
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const Remote m{r.addr + head, r.mh};
  if ((reinterpret_cast<uint64_t>(out + head) & call.ctx().get_local_align_mask) == 0) {
    rc = get_piece(call, pe, m, out + head, mid);
  } else {
    // Gemini, and the middle's local address is not 4-byte aligned: no engine can write
    // there, so the middle goes through bounce slots too.
    for (uint64_t done = 0; done < mid && rc == DMAPP_RC_SUCCESS; done += kBounceBytes) {
      const uint64_t n = mid - done < kBounceBytes ? mid - done : kBounceBytes;
      rc = bounce_get(call, pe, m.addr + done, m.mh, n, 0, out + head + done, n);
    }
  }
  if (rc != DMAPP_RC_SUCCESS) return rc;
  if (tail) rc = bounce_get(call, pe, hi - 4, r.mh, 4, 0, out + head + mid, tail);
  return rc;
}

}  // namespace

dmapp_return_t get_piece(Call& call, dmapp_pe_t pe, const Remote& r, void* dst, uint64_t bytes) {
  Context& c = call.ctx();
  // GNI's alignment rules for GETs (4-byte remote address and length; Gemini: local address
  // too). Anything else takes the slow path; the aligned case costs one test more, no more.
  if (((r.addr | bytes) & 3) | (reinterpret_cast<uint64_t>(dst) & c.get_local_align_mask)) [[unlikely]]
    return unaligned_get(call, pe, r, dst, bytes);
  Request* q = get_request(call, pe, r.addr, r.mh, bytes);
  if (!q) return DMAPP_RC_NO_SPACE;
  dmapp_return_t rc = local_side(c, q, dst, bytes, true);
  if (rc != DMAPP_RC_SUCCESS) {
    c.free_request(q);
    return rc;
  }
  return c.post(q);
}

namespace {

char* at(void* base, ptrdiff_t elems, uint64_t es) { return static_cast<char*>(base) + elems * ptrdiff_t(es); }

dmapp_return_t put_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, dmapp_seg_desc_t* seg, dmapp_pe_t pe,
                        void* src, uint64_t nelems, dmapp_type_t type, void* flag = nullptr, uint64_t flag_value = 0,
                        bool with_flag = false) {
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  if (!es || (!src && nelems) || nelems > (uint64_t(1) << 40)) return call.finish(DMAPP_RC_INVALID_PARAM);
  const uint64_t bytes = nelems * es;
  Remote r, f;
  if (nelems && (rc = call.ctx().resolve(target, bytes, seg, pe, r)) != DMAPP_RC_SUCCESS) return call.finish(rc);
  if (with_flag) {
    if (reinterpret_cast<uint64_t>(flag) & 7) return call.finish(DMAPP_RC_ALIGNMENT_ERROR);
    if ((rc = call.ctx().resolve(flag, sizeof(uint64_t), seg, pe, f)) != DMAPP_RC_SUCCESS) return call.finish(rc);
    if (!nelems) return call.finish(put_piece(call, pe, f, &flag_value, sizeof flag_value, nullptr, 0, true));
  }
  if (!nelems) return call.finish(DMAPP_RC_SUCCESS);
  return call.finish(put_piece(call, pe, r, src, bytes, with_flag ? &f : nullptr, flag_value));
}

dmapp_return_t get_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, void* src, dmapp_seg_desc_t* seg,
                        dmapp_pe_t pe, uint64_t nelems, dmapp_type_t type) {
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  // §3: zero-length GETs are not supported.
  if (!es || !target || !nelems || nelems > (uint64_t(1) << 40)) return call.finish(DMAPP_RC_INVALID_PARAM);
  Remote r;
  if ((rc = call.ctx().resolve(src, nelems * es, seg, pe, r)) != DMAPP_RC_SUCCESS) return call.finish(rc);
  return call.finish(get_piece(call, pe, r, target, nelems * es));
}

// Strided: element i goes from source + i*sst to target + i*tst (strides in elements).
dmapp_return_t iput_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, dmapp_seg_desc_t* seg, dmapp_pe_t pe,
                         void* src, ptrdiff_t tst, ptrdiff_t sst, uint64_t nelems, dmapp_type_t type) {
  if (tst == 1 && sst == 1) return put_impl(m, sid, target, seg, pe, src, nelems, type);
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  if (!es || tst < 1 || sst < 1 || (!src && nelems)) return call.finish(DMAPP_RC_INVALID_PARAM);
  // Check the whole pattern first: an invalid element posts nothing.
  Remote r;
  if (nelems && (rc = call.ctx().resolve(at(target, ptrdiff_t(nelems - 1) * tst, es), es, seg, pe, r)) !=
                    DMAPP_RC_SUCCESS)
    return call.finish(rc);
  for (uint64_t i = 0; i < nelems && rc == DMAPP_RC_SUCCESS; ++i) {
    rc = call.ctx().resolve(at(target, ptrdiff_t(i) * tst, es), es, seg, pe, r);
    if (rc == DMAPP_RC_SUCCESS) rc = put_piece(call, pe, r, at(src, ptrdiff_t(i) * sst, es), es);
  }
  return call.finish(rc);
}

dmapp_return_t iget_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, void* src, dmapp_seg_desc_t* seg,
                         dmapp_pe_t pe, ptrdiff_t tst, ptrdiff_t sst, uint64_t nelems, dmapp_type_t type) {
  if (tst == 1 && sst == 1) return get_impl(m, sid, target, src, seg, pe, nelems, type);
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  if (!es || !target || !nelems || tst < 1 || sst < 1) return call.finish(DMAPP_RC_INVALID_PARAM);
  Remote r;
  if ((rc = call.ctx().resolve(at(src, ptrdiff_t(nelems - 1) * sst, es), es, seg, pe, r)) != DMAPP_RC_SUCCESS)
    return call.finish(rc);
  for (uint64_t i = 0; i < nelems && rc == DMAPP_RC_SUCCESS; ++i) {
    rc = call.ctx().resolve(at(src, ptrdiff_t(i) * sst, es), es, seg, pe, r);
    if (rc == DMAPP_RC_SUCCESS) rc = get_piece(call, pe, r, at(target, ptrdiff_t(i) * tst, es), es);
  }
  return call.finish(rc);
}

// Indexed: element i goes from source + i to target + tidx[i] (offsets in elements).
// Elements of any size and address, GETs included: get_piece moves what GNI would refuse.
// (Cray's header lists DMAPP_BYTE as not supported for indexed GETs; doing them anyway
// cannot break a program written for that.)
dmapp_return_t ixput_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, dmapp_seg_desc_t* seg, dmapp_pe_t pe,
                          void* src, ptrdiff_t* tidx, uint64_t nelems, dmapp_type_t type) {
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  if (!es || (nelems && (!src || !tidx))) return call.finish(DMAPP_RC_INVALID_PARAM);
  Remote r;
  for (uint64_t i = 0; i < nelems; ++i)
    if ((rc = call.ctx().resolve(at(target, tidx[i], es), es, seg, pe, r)) != DMAPP_RC_SUCCESS) return call.finish(rc);
  for (uint64_t i = 0; i < nelems && rc == DMAPP_RC_SUCCESS; ++i) {
    call.ctx().resolve(at(target, tidx[i], es), es, seg, pe, r);
    rc = put_piece(call, pe, r, at(src, ptrdiff_t(i), es), es);
  }
  return call.finish(rc);
}

dmapp_return_t ixget_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, void* src, dmapp_seg_desc_t* seg,
                          dmapp_pe_t pe, ptrdiff_t* sidx, uint64_t nelems, dmapp_type_t type) {
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  if (!es || !target || !sidx || !nelems) return call.finish(DMAPP_RC_INVALID_PARAM);
  Remote r;
  for (uint64_t i = 0; i < nelems; ++i)
    if ((rc = call.ctx().resolve(at(src, sidx[i], es), es, seg, pe, r)) != DMAPP_RC_SUCCESS) return call.finish(rc);
  for (uint64_t i = 0; i < nelems && rc == DMAPP_RC_SUCCESS; ++i) {
    call.ctx().resolve(at(src, sidx[i], es), es, seg, pe, r);
    rc = get_piece(call, pe, r, at(target, ptrdiff_t(i), es), es);
  }
  return call.finish(rc);
}

// put_ixpe (same data to every PE) and scatter_ixpe (PE i gets block i).
dmapp_return_t ixpe_put_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, dmapp_seg_desc_t* seg,
                             dmapp_pe_t* pes, uint32_t npes, void* src, uint64_t nelems, dmapp_type_t type,
                             bool scatter) {
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  if (!es || (npes && !pes) || (nelems && !src)) return call.finish(DMAPP_RC_INVALID_PARAM);
  const uint64_t bytes = nelems * es;
  Remote r;
  for (uint32_t i = 0; i < npes && nelems; ++i)
    if ((rc = call.ctx().resolve(target, bytes, seg, pes[i], r)) != DMAPP_RC_SUCCESS) return call.finish(rc);
  for (uint32_t i = 0; i < npes && nelems && rc == DMAPP_RC_SUCCESS; ++i) {
    call.ctx().resolve(target, bytes, seg, pes[i], r);
    rc = put_piece(call, pes[i], r, scatter ? at(src, ptrdiff_t(i * nelems), es) : src, bytes);
  }
  return call.finish(rc);
}

dmapp_return_t gather_impl(Mode m, dmapp_syncid_handle_t* sid, void* target, void* src, dmapp_seg_desc_t* seg,
                           dmapp_pe_t* pes, uint32_t npes, uint64_t nelems, dmapp_type_t type) {
  Call call(m, sid);
  dmapp_return_t rc = call.begin();
  if (rc != DMAPP_RC_SUCCESS) return rc;
  const uint64_t es = type_size(type);
  if (!es || !target || !nelems || !npes || !pes) return call.finish(DMAPP_RC_INVALID_PARAM);
  const uint64_t bytes = nelems * es;
  Remote r;
  for (uint32_t i = 0; i < npes; ++i)
    if ((rc = call.ctx().resolve(src, bytes, seg, pes[i], r)) != DMAPP_RC_SUCCESS) return call.finish(rc);
  for (uint32_t i = 0; i < npes && rc == DMAPP_RC_SUCCESS; ++i) {
    call.ctx().resolve(src, bytes, seg, pes[i], r);
    rc = get_piece(call, pes[i], r, at(target, ptrdiff_t(i * nelems), es), bytes);
  }
  return call.finish(rc);
}

}  // namespace
}  // namespace nicemu::dmapp

using namespace nicemu::dmapp;

extern "C" {

dmapp_return_t dmapp_put(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, uint64_t n, dmapp_type_t ty) {
  return put_impl(Mode::kBlocking, nullptr, t, seg, pe, s, n, ty);
}
dmapp_return_t dmapp_put_nb(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, uint64_t n, dmapp_type_t ty,
                            dmapp_syncid_handle_t* id) {
  return put_impl(Mode::kNb, id, t, seg, pe, s, n, ty);
}
dmapp_return_t dmapp_put_nbi(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, uint64_t n, dmapp_type_t ty) {
  return put_impl(Mode::kNbi, nullptr, t, seg, pe, s, n, ty);
}
dmapp_return_t dmapp_get(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, uint64_t n, dmapp_type_t ty) {
  return get_impl(Mode::kBlocking, nullptr, t, s, seg, pe, n, ty);
}
dmapp_return_t dmapp_get_nb(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, uint64_t n, dmapp_type_t ty,
                            dmapp_syncid_handle_t* id) {
  return get_impl(Mode::kNb, id, t, s, seg, pe, n, ty);
}
dmapp_return_t dmapp_get_nbi(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, uint64_t n, dmapp_type_t ty) {
  return get_impl(Mode::kNbi, nullptr, t, s, seg, pe, n, ty);
}
// The flag semantics are unconfirmed (§5); with the parameters of dmapp_get_nbi, it is one.
dmapp_return_t dmapp_get_flag_nbi(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, uint64_t n,
                                  dmapp_type_t ty) {
  return get_impl(Mode::kNbi, nullptr, t, s, seg, pe, n, ty);
}

dmapp_return_t dmapp_iput(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, ptrdiff_t tst, ptrdiff_t sst,
                          uint64_t n, dmapp_type_t ty) {
  return iput_impl(Mode::kBlocking, nullptr, t, seg, pe, s, tst, sst, n, ty);
}
dmapp_return_t dmapp_iput_nb(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, ptrdiff_t tst, ptrdiff_t sst,
                             uint64_t n, dmapp_type_t ty, dmapp_syncid_handle_t* id) {
  return iput_impl(Mode::kNb, id, t, seg, pe, s, tst, sst, n, ty);
}
dmapp_return_t dmapp_iput_nbi(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, ptrdiff_t tst, ptrdiff_t sst,
                              uint64_t n, dmapp_type_t ty) {
  return iput_impl(Mode::kNbi, nullptr, t, seg, pe, s, tst, sst, n, ty);
}
dmapp_return_t dmapp_iget(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, ptrdiff_t tst, ptrdiff_t sst,
                          uint64_t n, dmapp_type_t ty) {
  return iget_impl(Mode::kBlocking, nullptr, t, s, seg, pe, tst, sst, n, ty);
}
dmapp_return_t dmapp_iget_nb(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, ptrdiff_t tst, ptrdiff_t sst,
                             uint64_t n, dmapp_type_t ty, dmapp_syncid_handle_t* id) {
  return iget_impl(Mode::kNb, id, t, s, seg, pe, tst, sst, n, ty);
}
dmapp_return_t dmapp_iget_nbi(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, ptrdiff_t tst, ptrdiff_t sst,
                              uint64_t n, dmapp_type_t ty) {
  return iget_impl(Mode::kNbi, nullptr, t, s, seg, pe, tst, sst, n, ty);
}

dmapp_return_t dmapp_ixput(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, ptrdiff_t* idx, uint64_t n,
                           dmapp_type_t ty) {
  return ixput_impl(Mode::kBlocking, nullptr, t, seg, pe, s, idx, n, ty);
}
dmapp_return_t dmapp_ixput_nb(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, ptrdiff_t* idx, uint64_t n,
                              dmapp_type_t ty, dmapp_syncid_handle_t* id) {
  return ixput_impl(Mode::kNb, id, t, seg, pe, s, idx, n, ty);
}
dmapp_return_t dmapp_ixput_nbi(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, ptrdiff_t* idx, uint64_t n,
                               dmapp_type_t ty) {
  return ixput_impl(Mode::kNbi, nullptr, t, seg, pe, s, idx, n, ty);
}
dmapp_return_t dmapp_ixget(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, ptrdiff_t* idx, uint64_t n,
                           dmapp_type_t ty) {
  return ixget_impl(Mode::kBlocking, nullptr, t, s, seg, pe, idx, n, ty);
}
dmapp_return_t dmapp_ixget_nb(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, ptrdiff_t* idx, uint64_t n,
                              dmapp_type_t ty, dmapp_syncid_handle_t* id) {
  return ixget_impl(Mode::kNb, id, t, s, seg, pe, idx, n, ty);
}
dmapp_return_t dmapp_ixget_nbi(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t pe, ptrdiff_t* idx, uint64_t n,
                               dmapp_type_t ty) {
  return ixget_impl(Mode::kNbi, nullptr, t, s, seg, pe, idx, n, ty);
}

dmapp_return_t dmapp_put_ixpe(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np, void* s, uint64_t n,
                              dmapp_type_t ty) {
  return ixpe_put_impl(Mode::kBlocking, nullptr, t, seg, pes, np, s, n, ty, false);
}
dmapp_return_t dmapp_put_ixpe_nb(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np, void* s, uint64_t n,
                                 dmapp_type_t ty, dmapp_syncid_handle_t* id) {
  return ixpe_put_impl(Mode::kNb, id, t, seg, pes, np, s, n, ty, false);
}
dmapp_return_t dmapp_put_ixpe_nbi(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np, void* s, uint64_t n,
                                  dmapp_type_t ty) {
  return ixpe_put_impl(Mode::kNbi, nullptr, t, seg, pes, np, s, n, ty, false);
}
dmapp_return_t dmapp_scatter_ixpe(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np, void* s, uint64_t n,
                                  dmapp_type_t ty) {
  return ixpe_put_impl(Mode::kBlocking, nullptr, t, seg, pes, np, s, n, ty, true);
}
dmapp_return_t dmapp_scatter_ixpe_nb(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np, void* s,
                                     uint64_t n, dmapp_type_t ty, dmapp_syncid_handle_t* id) {
  return ixpe_put_impl(Mode::kNb, id, t, seg, pes, np, s, n, ty, true);
}
dmapp_return_t dmapp_scatter_ixpe_nbi(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np, void* s,
                                      uint64_t n, dmapp_type_t ty) {
  return ixpe_put_impl(Mode::kNbi, nullptr, t, seg, pes, np, s, n, ty, true);
}
dmapp_return_t dmapp_gather_ixpe(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np, uint64_t n,
                                 dmapp_type_t ty) {
  return gather_impl(Mode::kBlocking, nullptr, t, s, seg, pes, np, n, ty);
}
dmapp_return_t dmapp_gather_ixpe_nb(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np,
                                    uint64_t n, dmapp_type_t ty, dmapp_syncid_handle_t* id) {
  return gather_impl(Mode::kNb, id, t, s, seg, pes, np, n, ty);
}
dmapp_return_t dmapp_gather_ixpe_nbi(void* t, void* s, dmapp_seg_desc_t* seg, dmapp_pe_t* pes, uint32_t np,
                                     uint64_t n, dmapp_type_t ty) {
  return gather_impl(Mode::kNbi, nullptr, t, s, seg, pes, np, n, ty);
}

dmapp_return_t dmapp_put_flag(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, uint64_t n, dmapp_type_t ty,
                              void* flag, uint64_t v) {
  return put_impl(Mode::kBlocking, nullptr, t, seg, pe, s, n, ty, flag, v, true);
}
dmapp_return_t dmapp_put_flag_nb(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, uint64_t n,
                                 dmapp_type_t ty, void* flag, uint64_t v, dmapp_syncid_handle_t* id) {
  return put_impl(Mode::kNb, id, t, seg, pe, s, n, ty, flag, v, true);
}
dmapp_return_t dmapp_put_flag_nbi(void* t, dmapp_seg_desc_t* seg, dmapp_pe_t pe, void* s, uint64_t n,
                                  dmapp_type_t ty, void* flag, uint64_t v) {
  return put_impl(Mode::kNbi, nullptr, t, seg, pe, s, n, ty, flag, v, true);
}

}  // extern "C"
