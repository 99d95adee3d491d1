// Tagged relay of a rank's output; see rank_output.h.
#include "rank_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace nicemu::run {

namespace {

// A line longer than this is emitted in pieces rather than buffered without bound.
constexpr size_t kMaxBufferedLine = 64 * 1024;

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone (EPIPE): drop, keep running the job
    off += static_cast<size_t>(n);
  }
}

}  // namespace

RankOutput::RankOutput(int rank, int fd, int dest_fd)
    : fd_(fd), dest_fd_(dest_fd), prefix_("[" + std::to_string(rank) + "] ") {
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

RankOutput::~RankOutput() { close_fd(); }

void RankOutput::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RankOutput::emit_lines(bool flush_partial) {
  size_t start = 0;
  for (;;) {
    size_t nl = buf_.find('\n', start);
    if (nl == std::string::npos) break;
    write_all(dest_fd_, prefix_ + buf_.substr(start, nl - start + 1));
    start = nl + 1;
  }
  buf_.erase(0, start);
  if (!buf_.empty() && (flush_partial || buf_.size() >= kMaxBufferedLine)) {
    write_all(dest_fd_, prefix_ + buf_ + "\n");
    buf_.clear();
  }
}

void RankOutput::on_readable() {
  if (fd_ < 0) return;
  char chunk[16384];
  for (;;) {
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buf_.append(chunk, static_cast<size_t>(n));
      emit_lines(false);
      if (static_cast<size_t>(n) < sizeof chunk) return;  // probably drained; poll again
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    emit_lines(true);  // EOF (or error): the rank closed its end
    close_fd();
    return;
  }
}

void RankOutput::finish() {
  char chunk[16384];
  while (fd_ >= 0) {
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buf_.append(chunk, static_cast<size_t>(n));
      emit_lines(false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  emit_lines(true);
  close_fd();
}

}  // namespace nicemu::run
