// Interposed memory calls: libudreg exports munmap, mremap, madvise, mmap/mmap64, brk, sbrk,
// free, realloc and reallocarray. When libudreg precedes libc in the symbol search order (the
// program links -ludreg, or LD_PRELOAD) every call of these from the program and from other
// libraries comes here first; the hook reports the range that is about to go away, then
// calls the next definition (dlsym RTLD_NEXT), and reports it again once the call returned:
// an entry another thread registered while the call was in flight (memory being unmapped
// while it is registered) is dropped too before the caller goes on. Calls libc makes to itself (free() ending in
// munmap, heap trims) never pass through the symbol table, which is why free and realloc are
// hooked too: a glibc chunk that was mmapped is reported before it is freed.
//
// These run inside malloc and free and in any thread: no allocation, no lock, nothing but
// atomics. With no cached entry anywhere they cost two loads.

// mmap and mmap64 are both defined here; with 64-bit offsets forced, <sys/mman.h> would make
// them one symbol (off_t is 64 bits on LP64 either way).
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "address_filter.h"
#include "invalidation_ring.h"
#include "memory_monitor.h"

extern "C" {
void __libc_free(void* p);
void* __libc_realloc(void* p, size_t n);
}

namespace nicemu::udreg {

namespace {

using munmap_fn = int (*)(void*, size_t);
using mmap_fn = void* (*)(void*, size_t, int, int, int, off_t);
using mremap_fn = void* (*)(void*, size_t, size_t, int, ...);
using madvise_fn = int (*)(void*, size_t, int);
using brk_fn = int (*)(void*);
using sbrk_fn = void* (*)(intptr_t);
using free_fn = void (*)(void*);
using realloc_fn = void* (*)(void*, size_t);
using reallocarray_fn = void* (*)(void*, size_t, size_t);

struct Real {
  std::atomic<munmap_fn> munmap{nullptr};
  std::atomic<mmap_fn> mmap{nullptr};
  std::atomic<mmap_fn> mmap64{nullptr};
  std::atomic<mremap_fn> mremap{nullptr};
  std::atomic<madvise_fn> madvise{nullptr};
  std::atomic<brk_fn> brk{nullptr};
  std::atomic<sbrk_fn> sbrk{nullptr};
  std::atomic<free_fn> free{nullptr};
  std::atomic<realloc_fn> realloc{nullptr};
  std::atomic<reallocarray_fn> reallocarray{nullptr};
  std::atomic<bool> glibc_chunks{false};  // the next free is glibc's: its chunk header is readable
};
constinit Real g_real;

constinit std::atomic<bool> g_on{false};
constinit std::atomic<uintptr_t> g_probe_munmap{0};
constinit std::atomic<bool> g_probe_munmap_seen{false};
constinit std::atomic<uintptr_t> g_probe_free{0};
constinit std::atomic<bool> g_probe_free_seen{false};

template <typename F>
F resolve(std::atomic<F>& slot, const char* name) {
  F f = slot.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
    slot.store(f, std::memory_order_release);
  }
  return f;
}

__attribute__((constructor)) void resolve_all() {
  resolve(g_real.munmap, "munmap");
  resolve(g_real.mmap, "mmap");
  resolve(g_real.mmap64, "mmap64");
  resolve(g_real.mremap, "mremap");
  resolve(g_real.madvise, "madvise");
  resolve(g_real.brk, "brk");
  resolve(g_real.sbrk, "sbrk");
  resolve(g_real.realloc, "realloc");
  resolve(g_real.reallocarray, "reallocarray");
  free_fn f = resolve(g_real.free, "free");
  g_real.glibc_chunks.store(f == &__libc_free, std::memory_order_release);
}

inline bool armed() { return g_on.load(std::memory_order_relaxed) && !address_filter().empty(); }

inline void report(const void* p, size_t n) {
  uint64_t a = reinterpret_cast<uintptr_t>(p);
  report_unmapped(a, n > UINT64_MAX - a ? UINT64_MAX : a + n);
}

struct Span {
  uintptr_t start = 0, end = 0;
};

// glibc marks a chunk that has its own mapping with bit 1 of the size word before the user
// pointer; the word before that holds the offset of the chunk in its mapping (alignment).
// Returns the mapping, reported, or an empty span.
Span report_if_mmapped_chunk(void* p) {
  if (!g_real.glibc_chunks.load(std::memory_order_relaxed)) return {};
  const size_t* h = static_cast<const size_t*>(p);
  size_t size = h[-1];
  if (!(size & 2)) return {};
  size_t offset = h[-2];
  uintptr_t chunk = reinterpret_cast<uintptr_t>(p) - 2 * sizeof(size_t);
  uintptr_t block = chunk - offset;
  size_t total = offset + (size & ~size_t(7));
  if ((block & 4095) != 0 || (total & 4095) != 0) return {};  // not what glibc maps: do not trust it
  report_unmapped(block, block + total);
  return {block, block + total};
}

inline uintptr_t current_break() {
  sbrk_fn s = g_real.sbrk.load(std::memory_order_relaxed);
  return s ? reinterpret_cast<uintptr_t>(s(0)) : 0;
}

// A free or realloc that trimmed the top of the main heap moved the break down. Seen only
// afterwards (libc calls its own sbrk); reported at once.
inline void report_trim(uintptr_t before) {
  uintptr_t after = current_break();
  if (before && after && after < before) report_unmapped(after, before);
}

}  // namespace

void hooks_enable(bool on) { g_on.store(on, std::memory_order_release); }

bool hooks_probe_munmap() {
  void* p = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  // What the program's own calls resolve to, whichever library is first in the search order.
  auto fn = reinterpret_cast<munmap_fn>(dlsym(RTLD_DEFAULT, "munmap"));
  g_probe_munmap_seen.store(false);
  g_probe_munmap.store(reinterpret_cast<uintptr_t>(p));
  if (fn)
    fn(p, 4096);
  else
    syscall(SYS_munmap, p, 4096);
  g_probe_munmap.store(0);
  return g_probe_munmap_seen.load();
}

bool hooks_probe_free() {
  void* p = malloc(64);
  if (!p) return false;
  auto fn = reinterpret_cast<free_fn>(dlsym(RTLD_DEFAULT, "free"));
  g_probe_free_seen.store(false);
  g_probe_free.store(reinterpret_cast<uintptr_t>(p));
  if (fn)
    fn(p);
  else
    __libc_free(p);
  g_probe_free.store(0);
  return g_probe_free_seen.load();
}

}  // namespace nicemu::udreg

using namespace nicemu::udreg;

extern "C" {

int munmap(void* addr, size_t len) noexcept {
  if (reinterpret_cast<uintptr_t>(addr) == g_probe_munmap.load(std::memory_order_relaxed))
    g_probe_munmap_seen.store(true);
  bool on = armed();
  if (on) report(addr, len);
  munmap_fn f = g_real.munmap.load(std::memory_order_relaxed);
  int r = f ? f(addr, len) : int(syscall(SYS_munmap, addr, len));
  if (on) report(addr, len);
  return r;
}

static void* mmap_common(std::atomic<mmap_fn>& slot, void* addr, size_t len, int prot, int flags, int fd,
                         off_t off) {
  // MAP_FIXED replaces whatever was mapped there; MAP_FIXED_NOREPLACE fails instead.
  bool on = (flags & MAP_FIXED) && !(flags & MAP_FIXED_NOREPLACE) && armed();
  if (on) report(addr, len);
  mmap_fn f = slot.load(std::memory_order_relaxed);
  void* r = f ? f(addr, len, prot, flags, fd, off)
              : reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
  if (on) report(addr, len);
  return r;
}

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) noexcept {
  return mmap_common(g_real.mmap, addr, len, prot, flags, fd, off);
}

void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) noexcept {
  return mmap_common(g_real.mmap64, addr, len, prot, flags, fd, off);
}

void* mremap(void* old_addr, size_t old_len, size_t new_len, int flags, ...) noexcept {
  void* new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void*);
    va_end(ap);
  }
  // The old range moves or shrinks (or, with MREMAP_DONTUNMAP, loses its pages); a fixed
  // destination replaces what was there.
  bool on = armed();
  auto both = [&] {
    report(old_addr, old_len);
    if (flags & MREMAP_FIXED) report(new_addr, new_len);
  };
  if (on) both();
  mremap_fn f = g_real.mremap.load(std::memory_order_relaxed);
  void* r = f ? f(old_addr, old_len, new_len, flags, new_addr)
              : reinterpret_cast<void*>(syscall(SYS_mremap, old_addr, old_len, new_len, flags, new_addr));
  if (on) both();
  return r;
}

int madvise(void* addr, size_t len, int advice) noexcept {
  bool on = (advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE ||
             advice == MADV_DONTNEED_LOCKED) &&
            armed();
  if (on) report(addr, len);
  madvise_fn f = g_real.madvise.load(std::memory_order_relaxed);
  int r = f ? f(addr, len, advice) : int(syscall(SYS_madvise, addr, len, advice));
  if (on) report(addr, len);
  return r;
}

int brk(void* addr) noexcept {
  brk_fn f = resolve(g_real.brk, "brk");
  if (!f) {
    errno = ENOMEM;
    return -1;
  }
  Span gone;
  if (armed()) {
    uintptr_t cur = current_break();
    if (cur && reinterpret_cast<uintptr_t>(addr) < cur) gone = {reinterpret_cast<uintptr_t>(addr), cur};
  }
  report_unmapped(gone.start, gone.end);
  int r = f(addr);
  report_unmapped(gone.start, gone.end);
  return r;
}

void* sbrk(intptr_t delta) noexcept {
  sbrk_fn f = resolve(g_real.sbrk, "sbrk");
  if (!f) {
    errno = ENOMEM;
    return reinterpret_cast<void*>(-1);
  }
  Span gone;
  if (delta < 0 && armed()) {
    uintptr_t cur = reinterpret_cast<uintptr_t>(f(0));
    gone = {cur - uintptr_t(-delta), cur};
  }
  report_unmapped(gone.start, gone.end);
  void* r = f(delta);
  report_unmapped(gone.start, gone.end);
  return r;
}

void free(void* p) noexcept {
  if (p && reinterpret_cast<uintptr_t>(p) == g_probe_free.load(std::memory_order_relaxed))
    g_probe_free_seen.store(true);
  free_fn f = g_real.free.load(std::memory_order_relaxed);
  if (!f) f = __libc_free;
  if (!p || !armed()) return f(p);
  Span chunk = report_if_mmapped_chunk(p);
  uintptr_t before = current_break();
  f(p);
  report_unmapped(chunk.start, chunk.end);
  report_trim(before);
}

void* realloc(void* p, size_t n) noexcept {
  realloc_fn f = g_real.realloc.load(std::memory_order_relaxed);
  if (!f) f = __libc_realloc;
  if (!p || !armed()) return f(p, n);
  // An mmapped chunk is moved with mremap or unmapped, inside libc.
  Span chunk = report_if_mmapped_chunk(p);
  uintptr_t before = current_break();
  void* r = f(p, n);
  report_unmapped(chunk.start, chunk.end);
  report_trim(before);
  return r;
}

void* reallocarray(void* p, size_t count, size_t size) noexcept {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return nullptr;
  }
  reallocarray_fn f = g_real.reallocarray.load(std::memory_order_relaxed);
  if (!f || !p || !armed()) return realloc(p, n);
  Span chunk = report_if_mmapped_chunk(p);
  uintptr_t before = current_break();
  void* r = f(p, count, size);
  report_unmapped(chunk.start, chunk.end);
  report_trim(before);
  return r;
}

}  // extern "C"
