#include "nicemu/daemon/bte/bte_engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/region_access.h"

namespace nicemu::daemon {

using namespace nicemu::abi;
namespace rc = nicemu::abi::gni;
namespace cqe = nicemu::abi::cqe;

namespace {
// Requests taken from one CDM's ring and not completed yet; beyond this the dispatcher
// leaves the rest in the ring, which then fills up and the library's posts return
// GNI_RC_ERROR_RESOURCE ("queue full, retry later"): daemon memory stays bounded.
constexpr uint32_t kMaxInflight = kBteRingCapacity;
// Requests up to this size run in the dispatcher when their EP has nothing outstanding:
// their copy takes a few microseconds at most, less than waking a channel (and it holds
// back other rings' requests no longer than one chunk of a channel would).
constexpr uint64_t kInlineBytes = 16 << 10;
// The ordering domain of a CDM's proxied posts (no EP id of the ring is this large).
constexpr uint32_t kProxyRoute = 0xFFFFFFFFu;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}
}  // namespace

BteEngine::BteEngine(BteConfig cfg)
    : cfg_(std::move(cfg)), regions_(cfg_.nic_addr, cfg_.rundir), shared_(regions_, cfg_.chunk_bytes) {
  if (cfg_.channels == 0) cfg_.channels = 1;
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  kick_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_ < 0 || kick_ < 0) throw std::runtime_error("BTE engine: epoll/eventfd: " + std::string(strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  epoll_ctl(epoll_, EPOLL_CTL_ADD, kick_, &ev);
  shared_.finished = [this](const BteJob& j) { finished(j); };
  for (uint32_t i = 0; i < cfg_.channels; ++i) shared_.channels.push_back(std::make_unique<BteChannel>(shared_, i));
  for (auto& c : shared_.channels) c->start();
  inline_ = std::make_unique<BteChannel>(shared_, cfg_.channels);
  dispatcher_ = std::thread([this] { dispatch_loop(); });
}

BteEngine::~BteEngine() {
  stop();
  if (epoll_ >= 0) ::close(epoll_);
  if (kick_ >= 0) ::close(kick_);
}

void BteEngine::stop() {
  if (stop_.exchange(true)) return;
  kick();
  if (dispatcher_.joinable()) dispatcher_.join();
  {
    std::lock_guard<std::mutex> lk(shared_.mu);
    shared_.stopping = true;
    for (auto& c : shared_.channels) c->wake();
  }
  for (auto& c : shared_.channels) c->join();
}

void BteEngine::kick() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(kick_, &one, sizeof one);
}

void BteEngine::region_attached(int ro_fd, int mdd_fd, int heap_fd, uint64_t size, pid_t owner) {
  if (!regions_.add_local(ro_fd, mdd_fd, heap_fd, size, owner))
    spdlog::warn("nic {}: BTE cannot map the region of pid {}: its RDMA posts will fail", cfg_.nic_addr, owner);
}

void BteEngine::region_gone(uint64_t attach_id) {
  regions_.remove_local(attach_id);
  std::lock_guard<std::mutex> lk(sources_mu_);
  auto it = sources_.find(attach_id);
  if (it == sources_.end()) return;
  // Unregister now (the library keeps a copy of the eventfd open); the source itself lives
  // on while the dispatcher or a queued job still holds it.
  epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second->doorbell, nullptr);
  sources_.erase(it);
  sources_gen_.fetch_add(1);
}

int BteEngine::open_ring(uint64_t attach_id, uint64_t ctl_offset, uint32_t capacity, int& doorbell) {
  std::lock_guard<std::mutex> lk(sources_mu_);
  if (auto it = sources_.find(attach_id); it != sources_.end()) {
    doorbell = it->second->doorbell;
    return rc::kSuccess;
  }
  auto region = regions_.local(attach_id);
  if (!region || capacity == 0 || (capacity & (capacity - 1)) != 0 ||
      !region_in_heap(region->size(), ctl_offset, bte_ring_bytes(capacity)))
    return rc::kErrorResource;
  auto s = std::make_shared<BteSource>();
  s->region = region;
  s->view.ctl = reinterpret_cast<BteRingCtl*>(region->base() + ctl_offset);
  s->view.slots = reinterpret_cast<BteSlot*>(region->base() + ctl_offset + sizeof(BteRingCtl));
  s->view.mask = capacity - 1;
  // Non-blocking for everybody (the flag belongs to the open file the library shares): a
  // client's doorbell write never blocks, whatever the counter holds.
  s->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->doorbell < 0) return rc::kErrorResource;
  // Edge-triggered: every write is one wake-up, and nobody needs to read the counter
  // (a client reading its own eventfd can only delay its own requests).
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  if (epoll_ctl(epoll_, EPOLL_CTL_ADD, s->doorbell, &ev) != 0) return rc::kErrorResource;
  doorbell = s->doorbell;
  sources_[attach_id] = std::move(s);
  sources_gen_.fetch_add(1);
  kick();  // the dispatcher starts watching the new ring
  return rc::kSuccess;
}

// Takes what a ring holds, up to the in-flight bound. True if anything was taken.
bool BteEngine::drain(BteSource& s, const std::shared_ptr<BteSource>& sp) {
  bool any = false;
  BteRequest req;
  while (s.inflight.load(std::memory_order_relaxed) < kMaxInflight && s.view.pop(s.head, req)) {
    s.inflight.fetch_add(1, std::memory_order_relaxed);
    route(sp, req);
    any = true;
  }
  return any;
}

bool BteEngine::poll_window_open(uint64_t last_work_ns) const {
  return cfg_.poll_us != 0 && now_ns() - last_work_ns < uint64_t{cfg_.poll_us} * 1000;
}

void BteEngine::dispatch_loop() {
  std::vector<std::shared_ptr<BteSource>> snap;
  uint64_t snap_gen = ~uint64_t{0};
  uint64_t last_work = 0;  // when a ring last had a request (0: never, no polling)
  while (!stop_.load()) {
    if (uint64_t g = sources_gen_.load(); g != snap_gen) {
      std::lock_guard<std::mutex> lk(sources_mu_);
      snap.clear();
      for (auto& [id, s] : sources_) snap.push_back(s);
      snap_gen = g;
    }
    auto serving = [](const BteSource& s) {
      return s.region->header().state.load(std::memory_order_acquire) == kRegionAlive &&
             s.inflight.load(std::memory_order_relaxed) < kMaxInflight;
    };
    bool any = false;
    for (auto& s : snap)
      if (serving(*s)) any |= drain(*s, s);
    if (any) {
      if (cfg_.poll_us) last_work = now_ns();
      continue;
    }
    // Idle, but work came a moment ago: a client posting back to back is likely to post
    // again within microseconds. Look again without arming the doorbells (its post then
    // makes no system call, and we wait for no wake-up), for a bounded time. No
    // sched_yield between looks: on a host with more runnable threads than CPUs a
    // yielding dispatcher goes to the back of the run queue and sees the next post a
    // scheduler round later (milliseconds, measured), where a sleeping one is woken by the
    // doorbell at once; the bound keeps what it takes from others to `poll_us` per burst.
    if (last_work && poll_window_open(last_work)) {
      __builtin_ia32_pause();
      continue;
    }
    last_work = 0;
    // Idle: arm every ring, look once more, then sleep until a doorbell or a kick.
    bool pending = false;
    for (auto& s : snap)
      if (serving(*s) && s->view.arm(s->head)) pending = true;
    if (pending) continue;
    epoll_event evs[16];
    int n = epoll_wait(epoll_, evs, 16, -1);
    if (n < 0 && errno != EINTR) {
      spdlog::error("nic {}: BTE dispatcher: epoll_wait: {}", cfg_.nic_addr, strerror(errno));
      return;
    }
  }
}

// Keeps each EP's outstanding requests on one channel (posting order); a new ordering
// domain goes to the least loaded channel. A small request of an EP with nothing
// outstanding runs here and now (completed before the next request is taken, so it keeps
// the EP's order too).
void BteEngine::route(const std::shared_ptr<BteSource>& s, const BteRequest& req) {
  BteJob job;
  job.req = req;
  job.source = s;
  const bool single = s->region->header().modes & kBteSingleChannelMode;
  job.route = {s->region->attach_id(), single ? 0u : req.ep_id};
  std::unique_lock<std::mutex> lk(shared_.mu);
  if (req.length <= std::min(kInlineBytes, cfg_.chunk_bytes) && !routes_.contains(job.route)) {
    lk.unlock();
    inline_->run_inline(job);
    return;
  }
  auto& [channel, outstanding] = routes_[job.route];
  if (outstanding++ == 0) {
    channel = 0;
    for (uint32_t i = 1; i < shared_.channels.size(); ++i)
      if (shared_.channels[i]->load() < shared_.channels[channel]->load()) channel = i;
  }
  BteChannel& c = *shared_.channels[channel];
  c.enqueue(std::move(job));
  c.wake();
}

void BteEngine::proxy(const std::shared_ptr<MappedRegion>& initiator, const abi::remote::RemotePost& post,
                      const uint8_t* inline_data) {
  auto p = std::make_shared<ProxyPost>();
  p->post = post;
  p->initiator = initiator;
  if (uint64_t st = proxy_check(post)) return shared_.proxies.complete(*p, st, shared_.counters);
  p->data.assign(inline_data, inline_data + post.inline_length);
  BteJob job;
  job.proxy = std::move(p);
  job.route = {initiator->attach_id(), kProxyRoute};
  std::unique_lock<std::mutex> lk(shared_.mu);
  auto it = routes_.find(job.route);
  if (it != routes_.end() && it->second.second >= kMaxProxied) {
    lk.unlock();
    return shared_.proxies.complete(*job.proxy, cqe::kErrTransient, shared_.counters);
  }
  if (it == routes_.end()) {
    uint32_t channel = 0;
    for (uint32_t i = 1; i < shared_.channels.size(); ++i)
      if (shared_.channels[i]->load() < shared_.channels[channel]->load()) channel = i;
    it = routes_.emplace(job.route, std::make_pair(channel, 0u)).first;
  }
  ++it->second.second;
  BteChannel& c = *shared_.channels[it->second.first];
  c.enqueue(std::move(job));
  c.wake();
}

void BteEngine::finished(const BteJob& job) {
  if (auto it = routes_.find(job.route); it != routes_.end() && --it->second.second == 0) routes_.erase(it);
  if (!job.source) return;  // a proxied post: no ring
  // After the completion's events: the library may now run transfers itself (bte_ring.h).
  job.source->view.ctl->done.fetch_add(1, std::memory_order_release);
  if (job.source->inflight.fetch_sub(1, std::memory_order_relaxed) == kMaxInflight) kick();
}

nlohmann::json BteEngine::status() const {
  const BteCounters& c = shared_.counters;
  size_t rings;
  {
    std::lock_guard<std::mutex> lk(sources_mu_);
    rings = sources_.size();
  }
  return nlohmann::json{{"channels", cfg_.channels},
                        {"chunk_bytes", cfg_.chunk_bytes},
                        {"poll_us", cfg_.poll_us},
                        {"rings", rings},
                        {"requests", c.requests.load()},
                        {"bytes", c.bytes.load()},
                        {"errors", c.errors.load()},
                        {"dropped", c.dropped.load()},
                        {"chunks", c.chunks.load()},
                        {"helped_chunks", c.helped_chunks.load()},
                        {"inline", c.inline_jobs.load()},
                        {"proxied", c.proxied.load()}};
}

}  // namespace nicemu::daemon
