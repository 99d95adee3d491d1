#include "nicemu/fault/fault_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>

namespace nicemu::fault {

namespace af = abi::fault;

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string page_path(const std::string& socket) {
  constexpr std::string_view kSock = ".sock";
  if (socket.size() > kSock.size() && socket.ends_with(kSock))
    return socket.substr(0, socket.size() - kSock.size()) + ".fault";
  return socket + ".fault";
}

PagePublisher::PagePublisher(const std::string& path) : path_(path) {
  void* p;
  if (path.empty()) {
    p = mmap(nullptr, af::kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("fault page: mmap: ") + std::strerror(errno));
  } else {
    std::string tmp = path + ".tmp-" + std::to_string(getpid());
    int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("fault page " + tmp + ": " + std::strerror(errno));
    if (fchmod(fd, 0644) != 0 || ftruncate(fd, static_cast<off_t>(af::kPageBytes)) != 0 ||
        (p = mmap(nullptr, af::kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("fault page " + path + ": " + std::strerror(e));
    }
    ::close(fd);
    page_ = new (p) af::Page{};
    page_->magic = af::kMagic;
    page_->version = af::kVersion;
    page_->header_size = sizeof(af::Page);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int e = errno;
      munmap(p, af::kPageBytes);
      ::unlink(tmp.c_str());
      throw std::runtime_error("fault page " + path + ": rename: " + std::strerror(e));
    }
    return;
  }
  page_ = new (p) af::Page{};
  page_->magic = af::kMagic;
  page_->version = af::kVersion;
  page_->header_size = sizeof(af::Page);
}

PagePublisher::~PagePublisher() {
  if (!page_) return;
  page_->active.store(0, std::memory_order_release);
  munmap(page_, af::kPageBytes);
  if (!path_.empty()) ::unlink(path_.c_str());
}

void PagePublisher::publish(const af::Config& cfg) {
  cfg_ = cfg;
  epoch_ns_ = monotonic_ns();
  page_->seq.store(seq_ + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  page_->cfg = cfg_;
  page_->epoch_ns = epoch_ns_;
  page_->active.store(cfg_.enabled ? 1 : 0, std::memory_order_relaxed);
  seq_ += 2;
  page_->seq.store(seq_, std::memory_order_release);
}

const af::Page* map_page(const std::string& path) {
  static const af::Page off{};  // active == 0
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return &off;
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= af::kPageBytes)
    p = mmap(nullptr, af::kPageBytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return &off;
  auto* page = static_cast<const af::Page*>(p);
  if (page->magic != af::kMagic || page->version != af::kVersion) {
    munmap(p, af::kPageBytes);
    return &off;
  }
  return page;  // mapped for the life of the process: cheaper than tracking users
}

bool read_config(const af::Page* p, af::Config& cfg, uint64_t& epoch_ns, uint32_t& seq) {
  for (int tries = 0; tries < 1000; ++tries) {
    uint32_t s1 = p->seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    std::memcpy(&cfg, &p->cfg, sizeof cfg);  // a torn copy is discarded by the check below
    epoch_ns = p->epoch_ns;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (p->seq.load(std::memory_order_relaxed) == s1) {
      seq = s1;
      return true;
    }
  }
  return false;
}

}  // namespace nicemu::fault
