// The symmetric heap: its range, mapped at one agreed address on every PE, and the
// deterministic allocator behind dmapp_sheap_malloc/realloc/free.
#include "symmetric_heap.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pmi.h"

namespace nicemu::dmapp {

void SymmetricHeap::reset(uint64_t base, uint64_t size) {
  base_ = base;
  size_ = size;
  used_ = 0;
  free_.clear();
  live_.clear();
  if (size) free_[base] = size;
}

uint64_t SymmetricHeap::allocate(uint64_t size) {
  const uint64_t n = round(size ? size : 1);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const uint64_t addr = it->first, len = it->second;
    free_.erase(it);
    if (len > n) free_[addr + n] = len - n;
    live_[addr] = n;
    used_ += n;
    return addr;
  }
  return 0;
}

uint64_t SymmetricHeap::block_size(uint64_t addr) const {
  auto it = live_.find(addr);
  return it == live_.end() ? 0 : it->second;
}

bool SymmetricHeap::release(uint64_t addr) {
  auto it = live_.find(addr);
  if (it == live_.end()) return false;
  uint64_t a = addr, len = it->second;
  live_.erase(it);
  used_ -= len;
  auto next = free_.find(a + len);
  if (next != free_.end()) {
    len += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(a);
  if (prev != free_.begin()) {
    --prev;
    if (prev->first + prev->second == a) {
      a = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[a] = len;
  return true;
}

bool SymmetricHeap::resize_in_place(uint64_t addr, uint64_t size) {
  auto it = live_.find(addr);
  if (it == live_.end()) return false;
  const uint64_t n = round(size ? size : 1), cur = it->second;
  if (n == cur) return true;
  if (n < cur) {
    it->second = n;
    used_ -= cur - n;
    live_[addr] = n;
    // Give the tail back (coalescing with a following free block).
    uint64_t tail = addr + n, tlen = cur - n;
    auto next = free_.find(addr + cur);
    if (next != free_.end()) {
      tlen += next->second;
      free_.erase(next);
    }
    free_[tail] = tlen;
    return true;
  }
  auto next = free_.find(addr + cur);
  if (next == free_.end() || cur + next->second < n) return false;
  const uint64_t rest = cur + next->second - n;
  free_.erase(next);
  if (rest) free_[addr + n] = rest;
  it->second = n;
  used_ += n - cur;
  return true;
}

uint64_t SymmetricHeap::largest_free() const {
  uint64_t m = 0;
  for (auto& [a, l] : free_) m = l > m ? l : m;
  return m;
}

namespace {

// Candidate bases, far above where the kernel places heaps, libraries and stacks of a
// normal process (47-bit user space): one of them is free in every PE in practice; the
// PEs agree on the first that all could map.
constexpr uint64_t kCandidates[] = {0x2a0000000000ull, 0x3a0000000000ull, 0x1a0000000000ull,
                                    0x4a0000000000ull, 0x5a0000000000ull, 0x0a0000000000ull};

}  // namespace

void* map_symmetric_range(uint64_t size) {
  int npes = 0;
  if (PMI_Get_size(&npes) != PMI_SUCCESS || npes <= 0) return nullptr;
  for (uint64_t cand : kCandidates) {
    void* want = reinterpret_cast<void*>(cand);
    void* p = mmap(want, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE,
                   -1, 0);
    // Kernels before 4.17 ignore the flag and may place the mapping elsewhere.
    if (p != MAP_FAILED && p != want) {
      munmap(p, size);
      p = MAP_FAILED;
    }
    int ok = p != MAP_FAILED;
    std::vector<int> all(size_t(npes), 0);
    if (PMI_Allgather(&ok, all.data(), sizeof ok) != PMI_SUCCESS) {
      if (ok) munmap(p, size);
      return nullptr;
    }
    bool everyone = true;
    for (int v : all) everyone = everyone && v;
    if (everyone) return p;
    if (ok) munmap(p, size);
  }
  std::fprintf(stderr, "dmapp: no address range of %llu bytes is free on every PE for the symmetric heap\n",
               static_cast<unsigned long long>(size));
  return nullptr;
}

void unmap_symmetric_range(void* base, uint64_t size) {
  if (base) munmap(base, size);
}

uint64_t symmetric_heap_size_from_env() {
  constexpr uint64_t kDefault = 64ull << 20;  // Cray's default is unconfirmed (§14)
  const char* s = std::getenv("XT_SYMMETRIC_HEAP_SIZE");
  if (!s || !*s) return kDefault;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || end == s) return 0;
  uint64_t mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1ull << 10; ++end; break;
    case 'm': case 'M': mul = 1ull << 20; ++end; break;
    case 'g': case 'G': mul = 1ull << 30; ++end; break;
    default: break;
  }
  if (*end == 'b' || *end == 'B') ++end;
  if (*end || v == 0 || v > (1ull << 46) / mul) return 0;
  // Whole pages: the range is mapped and registered as one.
  return (v * mul + 4095) & ~4095ull;
}

}  // namespace nicemu::dmapp
