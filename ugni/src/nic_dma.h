// Writes the emulated NIC makes into an application's registered memory on a peer's behalf.
//
// Over the ofi fabric the "NIC" is a thread of this process: the provider copies a peer's
// PUT into registered memory inside fi_cq_read/fi_cq_sread, and the port serves a peer's AMO
// with a store. On Gemini these are DMA: the application orders its reads of that memory
// with the peer out of band (a barrier, a message, a flag it polls), which ThreadSanitizer
// cannot see, so every such read would be reported as a race with the writing thread. Under
// -fsanitize=thread the writes inside a NicDmaScope are not tracked (the thread's own other
// accesses still are); in every other build the scope is empty.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace nicemu::ugni {

struct NicDmaScope {
#if defined(__SANITIZE_THREAD__)
  NicDmaScope() { AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
  ~NicDmaScope() { AnnotateIgnoreWritesEnd(__FILE__, __LINE__); }
#else
  NicDmaScope() {}  // user-provided: a scope variable is not "unused"
#endif
  NicDmaScope(const NicDmaScope&) = delete;
  NicDmaScope& operator=(const NicDmaScope&) = delete;
};

}  // namespace nicemu::ugni
