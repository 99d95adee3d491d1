// Relays one output stream of one rank (its stdout or stderr pipe) to the launcher's own,
// line by line, each line prefixed "[rank] " (tag-output). A line is written with a
// single write() so lines of different ranks never interleave mid-line.
#pragma once
#include <string>

namespace nicemu::run {

class RankOutput {
 public:
  // Takes ownership of `fd` (the read end, made non-blocking here); writes to `dest_fd`.
  RankOutput(int rank, int fd, int dest_fd);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  // Reads what is available; at end of file flushes a last partial line and closes.
  void on_readable();
  // Final drain once the rank is gone: reads what is buffered in the pipe without
  // waiting (a grandchild may keep the write end open), then flushes and closes.
  void finish();

 private:
  void emit_lines(bool flush_partial);
  void close_fd();

  int fd_;
  int dest_fd_;
  std::string prefix_;
  std::string buf_;
};

}  // namespace nicemu::run
