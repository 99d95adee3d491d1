// Anonymous memory for the uDREG tests (unit and integration), which unmap registered
// memory and map other memory into the hole to see the cache notice.
#pragma once
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// `len` bytes of private anonymous memory, every byte `fill`. A test cannot go on without
// it: a failed mmap aborts.
inline char* map_anon(uint64_t len, int fill) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::abort();
  }
  std::memset(p, fill, len);
  return static_cast<char*>(p);
}

// Maps fresh memory into the hole [p, p + n) an unmap left, every byte `fill` (left zero
// when fill < 0). Another thread (a sanitizer runtime's allocator) may have taken the hole
// first: then false, and the caller's scenario starts over at another address.
inline bool refill(char* p, uint64_t n, int fill = -1) {
  void* q = mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (q != p) {
    if (q != MAP_FAILED) munmap(q, n);
    return false;
  }
  if (fill >= 0) std::memset(p, fill, n);
  return true;
}
