// libudreg loaded with dlopen after start-up, as Open MPI loads its rcache/udreg component:
// the interposed hooks are then behind libc in the symbol search order and see nothing.
//   auto   userfaultfd still sees libc's own munmap: free then malloc at the same address
//          is a miss (exit 77 if userfaultfd is refused on this machine)
//   hooks  no source sees every unmap: the library must not cache, so two Registers of the
//          same range get two registrations and a release deregisters at once
// Usage: udreg_dlopen_check PATH_TO_LIBUDREG (mode from NICEMU_UDREG_INVALIDATION).
#include <dlfcn.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "udreg_nicemu.h"
#include "udreg_pub.h"

namespace {

int regs = 0, deregs = 0;
void* dev_reg(void* addr, uint64_t, void*) {
  ++regs;
  return addr;
}
uint32_t dev_dereg(void*, void*) {
  ++deregs;
  return 0;
}

#define CHECK(c)                                                           \
  do {                                                                     \
    if (!(c)) {                                                            \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
#define SYM(name) auto name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name))
  SYM(UDREG_CacheCreate);
  SYM(UDREG_CacheAccess);
  SYM(UDREG_Register);
  SYM(UDREG_DecrRefcount);
  SYM(UDREG_GetStat);
  SYM(nicemu_udreg_invalidation_sources);
  CHECK(UDREG_CacheCreate && UDREG_CacheAccess && UDREG_Register && UDREG_DecrRefcount && UDREG_GetStat &&
        nicemu_udreg_invalidation_sources);

  udreg_cache_attr_t a{};
  std::snprintf(a.cache_name, sizeof a.cache_name, "dlopen");
  a.max_entries = 16;
  a.modes = UDREG_CC_MODE_USE_KERNEL_CACHE | UDREG_CC_MODE_USE_LAZY_DEREG;
  a.device_reg_func = dev_reg;
  a.device_dereg_func = dev_dereg;
  CHECK(UDREG_CacheCreate(&a) == UDREG_RC_SUCCESS);
  udreg_cache_handle_t h = nullptr;
  CHECK(UDREG_CacheAccess("dlopen", &h) == UDREG_RC_SUCCESS);

  const char* m = std::getenv("NICEMU_UDREG_INVALIDATION");
  std::string mode = m ? m : "auto";
  unsigned src = nicemu_udreg_invalidation_sources();
  CHECK(!(src & NICEMU_UDREG_SOURCE_HOOKS));  // not in the symbol path after dlopen

  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  const size_t n = 4 << 20;
  if (mode == "hooks") {
    CHECK(src == 0);
    char* p = static_cast<char*>(malloc(n));
    udreg_entry_t *e1 = nullptr, *e2 = nullptr;
    CHECK(UDREG_Register(h, p, n, &e1) == UDREG_RC_SUCCESS);
    CHECK(UDREG_Register(h, p, n, &e2) == UDREG_RC_SUCCESS);
    CHECK(e1 != e2 && regs == 2);  // not shared: nothing could invalidate it
    CHECK(UDREG_DecrRefcount(h, e1) == UDREG_RC_SUCCESS);
    CHECK(UDREG_DecrRefcount(h, e2) == UDREG_RC_SUCCESS);
    CHECK(deregs == 2);  // lazy deregistration refused
    free(p);
    return 0;
  }
  if (!(src & NICEMU_UDREG_SOURCE_UFFD)) {
    std::fprintf(stderr, "userfaultfd not available here: skipped\n");
    return 77;
  }
  char* p = static_cast<char*>(malloc(n));
  std::memset(p, 1, n);
  udreg_entry_t* e = nullptr;
  CHECK(UDREG_Register(h, p, n, &e) == UDREG_RC_SUCCESS);
  CHECK(UDREG_DecrRefcount(h, e) == UDREG_RC_SUCCESS);
  free(p);
  char* q = static_cast<char*>(malloc(n));
  if (q != p) {
    std::fprintf(stderr, "malloc did not reuse the address (sanitizer allocator?): skipped\n");
    free(q);
    return 77;
  }
  CHECK(UDREG_Register(h, q, n, &e) == UDREG_RC_SUCCESS);
  uint64_t hits = 1;
  CHECK(UDREG_GetStat(h, UDREG_STAT_CACHE_HIT, &hits) == UDREG_RC_SUCCESS);
  CHECK(hits == 0 && regs == 2 && deregs == 1);
  CHECK(UDREG_DecrRefcount(h, e) == UDREG_RC_SUCCESS);
  free(q);
  return 0;
}
