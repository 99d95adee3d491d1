// What a cache asks of the invalidation sources for each new registration: will an unmap of
// this range be reported? Only then may the entry be cached and shared; otherwise it lives
// as long as its references and is deregistered with the last one (never stale, no reuse).
#pragma once
#include <cstdint>

namespace nicemu::udreg {

class Watcher {
 public:
  virtual ~Watcher() = default;
  virtual bool watch(uint64_t start, uint64_t end) = 0;
};

}  // namespace nicemu::udreg
