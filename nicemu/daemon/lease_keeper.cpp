#include "nicemu/daemon/lease_keeper.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

#include <spdlog/spdlog.h>

namespace nicemu::daemon {

using abi::RegionHeader;
static_assert(abi::kLeaseOwnerDied == FUTEX_OWNER_DIED);
static_assert(offsetof(RegionHeader, lease) - offsetof(RegionHeader, lease_link) == 8);

LeaseKeeper::LeaseKeeper() {
  head_.list.next = &head_.list;  // empty: the list points back at its head
  head_.futex_offset = static_cast<long>(offsetof(RegionHeader, lease) - offsetof(RegionHeader, lease_link));
  head_.list_op_pending = nullptr;
  std::unique_lock<std::mutex> lk(mu_);
  thread_ = std::thread([this] {
    // This thread's robust list is ours alone (it takes no glibc robust mutex).
    bool ok = syscall(SYS_set_robust_list, &head_, sizeof head_) == 0;
    std::unique_lock<std::mutex> l(mu_);
    tid_ = ok ? static_cast<pid_t>(syscall(SYS_gettid)) : -1;
    cv_.notify_all();
    cv_.wait(l, [this] { return stop_; });
  });
  cv_.wait(lk, [this] { return tid_ != 0; });
  if (tid_ < 0)
    spdlog::warn("set_robust_list failed: clients learn of a killed daemon only from its socket, not its regions");
}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::relink() {
  // The kernel reads the list only when the thread exits; a chain rebuilt whole is
  // consistent at every store but the one in flight (at worst one region is not marked).
  robust_list* next = &head_.list;
  for (RegionHeader* h : linked_) {
    auto* link = reinterpret_cast<robust_list*>(&h->lease_link);
    link->next = next;
    next = link;
  }
  head_.list.next = next;
}

void LeaseKeeper::add(RegionHeader* h) {
  if (!active()) return;
  h->lease.store(static_cast<uint32_t>(tid_), std::memory_order_release);
  linked_.insert(h);
  relink();
}

void LeaseKeeper::remove(RegionHeader* h) {
  if (linked_.erase(h)) relink();
}

}  // namespace nicemu::daemon
