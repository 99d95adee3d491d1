/* tools/compat/programs/mpi_pattern.h — the data pattern the compatibility MPI programs send and check
 * (mpi_pingpong.c, mpi_bench.c): a xorshift stream from a seed, so every byte of a received
 * buffer can be checked against what its sender wrote. */
#ifndef NICEMU_COMPAT_MPI_PATTERN_H
#define NICEMU_COMPAT_MPI_PATTERN_H
#include <stddef.h>
#include <stdint.h>

static inline void fill(unsigned char *buf, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    buf[i] = (unsigned char)x;
  }
}
#endif
