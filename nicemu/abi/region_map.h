// How a CDM region (shm_layout.h) travels and is mapped: two memfds, one for the read-only
// section [0, kRoSize) and one for the heap [kRoSize, region_size), mapped back to back so
// that region offsets stay what shm_layout.h says.
//
// Why two: a process holding a memfd may map any part of it with any protection the file
// allows, so one memfd for both parts would let the owner (or any peer) map the read-only
// section writable and forge the registration table that peers validate against. The
// daemon maps the read-only memfd writable, then seals it with F_SEAL_FUTURE_WRITE: its own
// mapping keeps working, while every later mmap(PROT_WRITE, MAP_SHARED), mprotect to
// PROT_WRITE of a shared mapping, and write() on it fail for everybody. Shared by the
// daemon, its BTE engine and libugni.
#pragma once
#include <fcntl.h>
#include <sys/mman.h>

#include <cstdint>

#include "nicemu/abi/shm_layout.h"

namespace nicemu::abi {

// Seals the daemon puts on each memfd: sizes fixed; no new writers of the read-only part.
inline constexpr int kRoSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
inline constexpr int kHeapSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// Maps `size` bytes from two memfds at one reserved address range: [0, ro_size) from
// `ro_fd` with `ro_prot` (PROT_READ for everybody but the daemon before sealing), the rest
// read-write from `rw_fd`. Returns the base, or nullptr (nothing left mapped). The MSGQ
// segment (msgq_layout.h) travels the same way, with its own ro_size.
inline char* map_split(int ro_fd, int rw_fd, uint64_t ro_size, uint64_t size, int ro_prot = PROT_READ) {
  if (size <= ro_size || ro_size == 0 || ro_fd < 0 || rw_fd < 0) return nullptr;
  void* base = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* b = static_cast<char*>(base);
  if (mmap(b, ro_size, ro_prot, MAP_SHARED | MAP_FIXED, ro_fd, 0) == MAP_FAILED ||
      mmap(b + ro_size, size - ro_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, rw_fd, 0) == MAP_FAILED) {
    munmap(base, size);
    return nullptr;
  }
  return b;
}

// A CDM region of `size` bytes (read-only section kRoSize).
inline char* map_region(int ro_fd, int heap_fd, uint64_t size, int ro_prot = PROT_READ) {
  return map_split(ro_fd, heap_fd, kRoSize, size, ro_prot);
}

// True if `ro_fd` carries the seals that make the read-only section read-only for the
// caller: a client refuses a region whose table its owner could rewrite.
inline bool ro_sealed(int ro_fd) {
  int s = fcntl(ro_fd, F_GET_SEALS);
  return s >= 0 && (s & (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) == (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
}

}  // namespace nicemu::abi
