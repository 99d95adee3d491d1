// Signals as poll()able events (the self-pipe pattern): handlers for SIGCHLD, SIGINT,
// SIGTERM and SIGHUP write the signal number into a pipe the launcher's loop reads.
// Handlers, not a blocked mask + signalfd, so that children started by other code (the
// daemons) never inherit blocked signals.
#pragma once
#include <vector>

namespace nicemu::run {

class SignalPipe {
 public:
  // Installs the handlers (SA_RESTART) and ignores SIGPIPE. One instance per process.
  SignalPipe();
  ~SignalPipe();  // restores the default dispositions
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }
  // Signals received since the last call, in order (non-blocking).
  std::vector<int> drain();

  // The signals whose dispositions this class changes; a forked child resets them to
  // SIG_DFL before exec (async-signal-safe: plain array).
  static const int kHandled[5];

 private:
  int read_fd_ = -1;
};

// Name of a signal for messages: "SIGSEGV", or "signal 42".
const char* signal_name(int sig);

}  // namespace nicemu::run
