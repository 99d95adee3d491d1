// The ofi fabric's verdict on failed posts (ofi_peer_check.h says what and why).
#include "ofi_peer_check.h"

namespace nicemu::ugni {

PeerCheck::PeerCheck(Ask ask, Finish finish, std::chrono::nanoseconds gather)
    : ask_(std::move(ask)), finish_(std::move(finish)), gather_(gather) {}

PeerCheck::~PeerCheck() { stop(); }

void PeerCheck::suspect(uint64_t peer, void* item) {
  std::unique_lock<std::mutex> lk(mu_);
  if (stop_) {
    // Closing: no events any more (ofi_close), the item only given back.
    lk.unlock();
    std::vector<void*> one{item};
    finish_(peer, PeerAnswer{PeerAnswer::kDropped, {}}, one);
    return;
  }
  auto [it, fresh] = batches_.try_emplace(peer);
  if (fresh) it->second.due = std::chrono::steady_clock::now() + gather_;
  it->second.items.push_back(item);
  if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  cv_.notify_one();
}

void PeerCheck::stop() {
  std::map<uint64_t, Batch> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    stop_ = true;
    cv_.notify_one();
  }
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(batches_);
  }
  for (auto& [peer, b] : left) finish_(peer, PeerAnswer{PeerAnswer::kDropped, {}}, b.items);
}

uint64_t PeerCheck::asked() const {
  std::lock_guard<std::mutex> lk(mu_);
  return asked_;
}

void PeerCheck::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (batches_.empty()) {
      cv_.wait(lk);
      continue;
    }
    // The batch due first; asked once due, outside the lock (a daemon may take seconds).
    auto first = batches_.begin();
    for (auto it = batches_.begin(); it != batches_.end(); ++it)
      if (it->second.due < first->second.due) first = it;
    if (std::chrono::steady_clock::now() < first->second.due) {
      cv_.wait_until(lk, first->second.due);
      continue;
    }
    const uint64_t peer = first->first;
    std::vector<void*> items = std::move(first->second.items);
    batches_.erase(first);
    ++asked_;
    lk.unlock();
    const PeerAnswer a = ask_(peer);
    // Posts failing meanwhile towards the same peer share the answer.
    lk.lock();
    if (auto it = batches_.find(peer); it != batches_.end()) {
      items.insert(items.end(), it->second.items.begin(), it->second.items.end());
      batches_.erase(it);
    }
    lk.unlock();
    finish_(peer, a, items);
    lk.lock();
  }
}

}  // namespace nicemu::ugni
