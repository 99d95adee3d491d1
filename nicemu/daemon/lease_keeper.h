// The daemon's lease on its regions (RegionHeader::lease, shm_layout.h): a thread that does
// nothing but live as long as the daemon, whose robust-futex list links the lease word of
// every live region. When the daemon dies, by SIGKILL too, the kernel walks that list and
// sets FUTEX_OWNER_DIED in each word, so clients and other daemons stop trusting the
// region's tables at once (no heartbeat, no system call on their side).
#pragma once
#include <linux/futex.h>
#include <sys/types.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "nicemu/abi/shm_layout.h"

namespace nicemu::daemon {

class LeaseKeeper {
 public:
  LeaseKeeper();
  ~LeaseKeeper();  // the thread exits: every region still linked reads as NIC down
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Links `h` (a region the daemon maps writable) and stamps its lease; unlinks it again
  // before the region is unmapped. Main thread only.
  void add(abi::RegionHeader* h);
  void remove(abi::RegionHeader* h);
  bool active() const { return tid_ > 0; }

 private:
  void relink();

  robust_list_head head_{};
  std::set<abi::RegionHeader*> linked_;
  pid_t tid_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nicemu::daemon
