// The fault page (abi/fault_layout.h) on both sides: the daemon publishes, the libraries
// map it read-only and take consistent copies of the configuration.
#pragma once
#include <cstdint>
#include <string>

#include "nicemu/abi/fault_layout.h"

namespace nicemu::fault {

// RUNDIR/nic-ADDR.fault next to the socket RUNDIR/nic-ADDR.sock.
std::string page_path(const std::string& socket);

// Daemon side. The file is built under a temporary name and renamed into place, so a reader
// never maps a half-initialised page; an empty path gives private memory (no readers).
class PagePublisher {
 public:
  explicit PagePublisher(const std::string& path);
  ~PagePublisher();
  PagePublisher(const PagePublisher&) = delete;
  PagePublisher& operator=(const PagePublisher&) = delete;

  // Publishes `cfg` (already validated) with a new epoch for its link windows.
  void publish(const abi::fault::Config& cfg);
  // What was last published: the daemon's own copy. The page is never read back: a client
  // of the daemon's user can open the file read-write and write anything into it.
  const abi::fault::Config& config() const { return cfg_; }
  uint64_t epoch_ns() const { return epoch_ns_; }
  // The page itself, as its readers see it (for in-process readers and tests).
  const abi::fault::Page* page() const { return page_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  abi::fault::Page* page_ = nullptr;
  abi::fault::Config cfg_{};
  uint64_t epoch_ns_ = 0;
  uint32_t seq_ = 0;  // the seqlock's value, ours (the page's may have been overwritten)
};

// Library side: the page at `path` mapped read-only, or a process-wide all-off page when the
// daemon has none (an older daemon, or a private one), so callers never test for null.
const abi::fault::Page* map_page(const std::string& path);

// A consistent copy of the configuration and its epoch; false if it kept changing.
bool read_config(const abi::fault::Page* p, abi::fault::Config& cfg, uint64_t& epoch_ns, uint32_t& seq);

uint64_t monotonic_ns();

}  // namespace nicemu::fault
