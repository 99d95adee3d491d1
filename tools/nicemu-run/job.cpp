// Rank processes, the poll loop and teardown; see job.h.
#include "job.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>

#include <fmt/core.h>

#include "nicemu/common/placement.h"
#include "pmi/src/process_mapping.h"
#include "pmi_server.h"
#include "rank_output.h"
#include "signal_pipe.h"

extern char** environ;

namespace nicemu::run {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kKillGrace = std::chrono::seconds(2);

// Variables the launcher defines for each rank; inherited values are dropped first so an
// outer launcher's settings never leak into the job.
constexpr const char* kOwnedVars[] = {
    "PMI_FD",         "PMI_PORT",       "PMI_ID",           "PMI_RANK",
    "PMI_SIZE",       "PMI_SPAWNED",    "PMI_GNI_PTAG",     "PMI_GNI_COOKIE",
    "PMI_GNI_DEV_ID", "PMI_GNI_LOC_ADDR", "NICEMU_NODE",    "ALPS_APP_PE",
    "NICEMU_JOB_NODES", "NICEMU_PMI_PIPELINE", "NICEMU_JOB_RANKS_PER_NODE", "NICEMU_JOB_ID",
};

void say(const std::string& msg) { fmt::print(stderr, "nicemu-run: {}\n", msg); }

// PATH lookup done before fork, so the child only calls execve().
std::optional<std::string> resolve_program(const std::string& prog) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (prog.find('/') != std::string::npos) return runnable(prog) ? std::optional(prog) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t i = 0;
  while (i <= dirs.size()) {
    size_t end = dirs.find(':', i);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(i, end - i);
    std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + prog;
    if (runnable(cand)) return cand;
    i = end + 1;
  }
  return std::nullopt;
}

std::string describe_status(int rank, int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return fmt::format("rank {} was killed by signal {} ({}){}", rank, sig, signal_name(sig),
                       WCOREDUMP(status) ? ", core dumped" : "");
  }
  return fmt::format("rank {} exited with status {}", rank, WEXITSTATUS(status));
}

class Job final : public PmiServer::Listener {
 public:
  Job(const JobConfig& cfg, SignalPipe& signals) : cfg_(cfg), signals_(signals) {}
  ~Job() override;
  int run();

  void on_pmi_abort(int rank, int exit_code) override {
    // An abort that asks for status 0 still fails the job.
    teardown(exit_code != 0 ? exit_code : 1,
             fmt::format("rank {} called PMI_Abort with exit code {}", rank, exit_code));
  }
  void on_barrier_stuck(const std::vector<int>& gone) override {
    std::string list;
    for (int r : gone) list += (list.empty() ? "" : ", ") + std::to_string(r);
    teardown(kExitLaunchFailure,
             fmt::format("the PMI barrier can never complete: rank(s) {} exited or closed "
                         "their PMI connection without entering it",
                         list));
  }

 private:
  struct Rank {
    int node = 0;
    pid_t pid = -1;
    bool alive = false;
    std::unique_ptr<RankOutput> out, err;
  };

  std::vector<std::string> base_environment() const;
  void spawn(int rank, const std::string& path, const std::vector<std::string>& base_env,
             const std::string& pmi_port);
  void reap();
  void teardown(int status, const std::string& why);
  void kill_alive(int sig);
  void handle_signals();
  int alive_count() const;

  const JobConfig& cfg_;
  SignalPipe& signals_;
  rlimit nofile_{};  // the limit ranks get: the launcher's own, before raising it
  std::unique_ptr<PmiServer> server_;
  std::vector<Rank> ranks_;
  int devnull_ = -1;

  bool tearing_down_ = false;
  int exit_status_ = 0;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> job_deadline_;
};

Job::~Job() {
  if (devnull_ >= 0) ::close(devnull_);
  // Never leave ranks behind, even when run() threw.
  for (Rank& r : ranks_) {
    if (!r.alive) continue;
    ::kill(-r.pid, SIGKILL);
    ::waitpid(r.pid, nullptr, 0);
  }
}

std::vector<std::string> Job::base_environment() const {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    std::string_view key = kv.substr(0, kv.find('='));
    bool owned = std::any_of(std::begin(kOwnedVars), std::end(kOwnedVars),
                             [&](const char* v) { return key == v; });
    if (cfg_.nic && key == "NICEMU_RUNDIR") owned = true;
    if (!owned) env.emplace_back(kv);
  }
  return env;
}

void Job::spawn(int rank, const std::string& path, const std::vector<std::string>& base_env,
                const std::string& pmi_port) {
  Rank& r = ranks_[rank];
  r.node = placement::node_of_rank(rank, cfg_.np, cfg_.nodes, cfg_.ranks_per_node);

  // Descriptors, all close-on-exec in the launcher; the child clears the flag on its own.
  int pmi[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  auto fail = [&](const char* what) {
    int e = errno;
    for (int fd : {pmi[0], pmi[1], out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    throw std::runtime_error(fmt::format("{} for rank {}: {}", what, rank, std::strerror(e)));
  };
  if (pmi_port.empty() && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pmi) != 0)
    fail("socketpair");
  if (cfg_.tag_output && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0))
    fail("pipe");

  std::vector<std::string> env = base_env;
  if (pmi_port.empty()) {
    env.push_back(fmt::format("PMI_FD={}", pmi[1]));
  } else {
    env.push_back("PMI_PORT=" + pmi_port);
    env.push_back(fmt::format("PMI_ID={}", rank));
  }
  env.push_back(fmt::format("PMI_RANK={}", rank));
  env.push_back(fmt::format("PMI_SIZE={}", cfg_.np));
  // Our server answers a connection's lines in arrival order, so libpmi may pipeline its
  // collectives' gets (pmi/src/client.h, kvs_get_many); other servers do not promise it.
  env.push_back("NICEMU_PMI_PIPELINE=64");
  env.push_back(fmt::format("ALPS_APP_PE={}", rank));
  // The job's workload-manager id (drc_get_wlm_id, DRC grants to a job): the launcher's
  // pid, unique on this host while the job runs.
  env.push_back(fmt::format("NICEMU_JOB_ID={}", ::getpid()));
  if (cfg_.nic) {
    uint32_t addr = cfg_.nic->node_addrs[r.node];
    env.push_back(fmt::format("PMI_GNI_PTAG={}", cfg_.nic->ptag));
    env.push_back(fmt::format("PMI_GNI_COOKIE={}", cfg_.nic->cookie));
    env.push_back("PMI_GNI_DEV_ID=0");
    env.push_back(fmt::format("PMI_GNI_LOC_ADDR={}", addr));
    env.push_back("NICEMU_RUNDIR=" +
                  (cfg_.nic->node_rundirs.empty() ? cfg_.nic->rundir : cfg_.nic->node_rundirs[r.node]));
    env.push_back(fmt::format("NICEMU_NODE={}", addr));
    // The nodes the ranks are placed over (in blocks): ALPS's placement (libalpsutil).
    std::string nodes;
    for (uint32_t a : cfg_.nic->node_addrs) nodes += (nodes.empty() ? "" : ",") + std::to_string(a);
    env.push_back("NICEMU_JOB_NODES=" + nodes);
    if (cfg_.ranks_per_node > 0)
      env.push_back(fmt::format("NICEMU_JOB_RANKS_PER_NODE={}", cfg_.ranks_per_node));
  }
  std::vector<char*> envp, argv;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = cfg_.command;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  // Only rank 0 reads the launcher's stdin, and not from a terminal: ranks run in their
  // own process groups, and a background group reading the terminal would be stopped.
  int stdin_fd = (rank == 0 && !::isatty(STDIN_FILENO)) ? -1 : devnull_;
  const pid_t parent = ::getpid();

  // Signals stay blocked across fork so no handler runs in the child before it resets them.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::fork();
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    for (int sig : SignalPipe::kHandled) ::signal(sig, SIG_DFL);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::setpgid(0, 0);  // teardown kills the rank's whole group, its children included
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a launcher killed with -9 takes its ranks along
    if (::getppid() != parent) ::_exit(kExitLaunchFailure);
    ::setrlimit(RLIMIT_NOFILE, &nofile_);
    if (stdin_fd >= 0) ::dup2(stdin_fd, STDIN_FILENO);
    if (out[1] >= 0) ::dup2(out[1], STDOUT_FILENO);
    if (err[1] >= 0) ::dup2(err[1], STDERR_FILENO);
    if (pmi[1] >= 0) ::fcntl(pmi[1], F_SETFD, 0);
    ::execve(path.c_str(), argv.data(), envp.data());
    const char msg[] = "nicemu-run: execve failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(kExitNotFound);
  }
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    errno = fork_errno;
    fail("fork");
  }
  ::setpgid(pid, pid);  // also from here, so kill(-pid) works however the race goes
  r.pid = pid;
  r.alive = true;
  spdlog::debug("rank {} started: pid {}, node {}", rank, pid, r.node);

  for (int fd : {pmi[1], out[1], err[1]})
    if (fd >= 0) ::close(fd);
  if (pmi[0] >= 0) server_->add_rank_connection(rank, pmi[0]);
  if (out[0] >= 0) r.out = std::make_unique<RankOutput>(rank, out[0], STDOUT_FILENO);
  if (err[0] >= 0) r.err = std::make_unique<RankOutput>(rank, err[0], STDERR_FILENO);
}

int Job::alive_count() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(),
                                        [](const Rank& r) { return r.alive; }));
}

void Job::kill_alive(int sig) {
  for (Rank& r : ranks_)
    if (r.alive && ::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);  // no group yet: the rank
}

void Job::teardown(int status, const std::string& why) {
  if (tearing_down_) return;  // the first failure decides the status
  tearing_down_ = true;
  exit_status_ = status;
  say(why);
  if (int n = alive_count(); n > 0) {
    say(fmt::format("terminating the remaining {} rank(s)", n));
    kill_alive(SIGTERM);
    kill_deadline_ = Clock::now() + kKillGrace;
  }
}

void Job::reap() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (!r.alive) continue;
    int status = 0;
    pid_t got = ::waitpid(r.pid, &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) continue;
    r.alive = false;
    int rank = static_cast<int>(i);
    if (got < 0) {
      spdlog::warn("waitpid for rank {} (pid {}): {}", rank, r.pid, std::strerror(errno));
      status = 0;
    }
    bool ok = got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (tearing_down_ || ok) {
      spdlog::debug("{}", describe_status(rank, status));
    } else {
      int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      teardown(code, describe_status(rank, status));
    }
    server_->rank_exited(rank);
  }
}

void Job::handle_signals() {
  for (int sig : signals_.drain()) {
    if (sig == SIGCHLD) continue;  // reap() runs every iteration
    if (!tearing_down_) {
      teardown(128 + sig, fmt::format("received {}, ending the job", signal_name(sig)));
    } else if (alive_count() > 0) {
      say(fmt::format("received {} again, killing the ranks", signal_name(sig)));
      kill_alive(SIGKILL);
    }
  }
}

int Job::run() {
  // Signals that arrived while the daemons were being started end the job before it begins.
  for (int sig : signals_.drain()) {
    if (sig != SIGCHLD) {
      say(fmt::format("received {} before the job started", signal_name(sig)));
      return 128 + sig;
    }
  }
  auto path = resolve_program(cfg_.command.front());
  if (!path) {
    say(fmt::format("{}: command not found or not executable", cfg_.command.front()));
    return kExitNotFound;
  }
  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Three descriptors per rank (PMI socket, stdout, stderr): use the whole hard limit
  // here, and give the ranks the limit they would have had without us.
  ::getrlimit(RLIMIT_NOFILE, &nofile_);
  if (nofile_.rlim_cur < nofile_.rlim_max) {
    rlimit raised = nofile_;
    raised.rlim_cur = nofile_.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &raised);
  }

  // The job's KVS starts with where ranks run and, with a NIC, each node's NIC address.
  std::vector<int> nodes(static_cast<size_t>(cfg_.np));
  for (int r = 0; r < cfg_.np; ++r) nodes[r] = placement::node_of_rank(r, cfg_.np, cfg_.nodes, cfg_.ranks_per_node);
  PmiServer::Options opts;
  opts.size = cfg_.np;
  opts.kvsname = fmt::format("kvs_{}_0", ::getpid());
  opts.preload.emplace_back("PMI_process_mapping", wire::format_process_mapping(nodes));
  if (cfg_.nic) {
    std::string addrs;
    for (int n = 0; n < cfg_.nodes; ++n)
      addrs += (n ? "," : "") + std::to_string(cfg_.nic->node_addrs[n]);
    opts.preload.emplace_back("nicemu_nic_addrs", addrs);
  }
  spdlog::debug("job {}: {} rank(s) on {} node(s), mapping {}", opts.kvsname, cfg_.np,
                cfg_.nodes, opts.preload.front().second);
  server_ = std::make_unique<PmiServer>(std::move(opts), *this);
  std::string pmi_port = cfg_.pmi_over_tcp ? server_->listen_tcp() : std::string();

  ranks_.resize(static_cast<size_t>(cfg_.np));
  const std::vector<std::string> env = base_environment();
  for (int r = 0; r < cfg_.np && !tearing_down_; ++r) {
    try {
      spawn(r, *path, env, pmi_port);
    } catch (const std::exception& e) {
      teardown(kExitLaunchFailure, e.what());
    }
    handle_signals();
  }
  if (cfg_.timeout_s > 0)
    job_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(cfg_.timeout_s));

  std::vector<pollfd> fds;
  std::vector<RankOutput*> outputs;  // parallel to fds from first_output on
  while (alive_count() > 0) {
    auto now = Clock::now();
    auto wait = std::chrono::milliseconds(1000);  // also a safety net for reaping
    for (auto& deadline : {job_deadline_, kill_deadline_})
      if (deadline)
        wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(
                                  std::max(Clock::duration::zero(), *deadline - now)));
    fds.clear();
    outputs.clear();
    fds.push_back({signals_.fd(), POLLIN, 0});
    server_->add_pollfds(fds);
    size_t first_output = fds.size();
    for (Rank& r : ranks_)
      for (RankOutput* o : {r.out.get(), r.err.get()})
        if (o && o->open()) {
          fds.push_back({o->fd(), POLLIN, 0});
          outputs.push_back(o);
        }

    int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (n < 0 && errno != EINTR) throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
    if (n > 0) {
      // PMI traffic first: an abort sent just before exiting must be seen as an abort.
      for (size_t i = 1; i < first_output; ++i)
        if (fds[i].revents) server_->handle(fds[i]);
      for (size_t i = first_output; i < fds.size(); ++i)
        if (fds[i].revents) outputs[i - first_output]->on_readable();
    }
    handle_signals();
    reap();

    now = Clock::now();
    if (job_deadline_ && now >= *job_deadline_) {
      job_deadline_.reset();
      teardown(kExitTimeout, fmt::format("the job exceeded its timeout of {} s", cfg_.timeout_s));
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      kill_deadline_.reset();
      if (int left = alive_count(); left > 0) {
        say(fmt::format("{} rank(s) still running after SIGTERM, sending SIGKILL", left));
        kill_alive(SIGKILL);
      }
    }
  }
  // Every rank is gone: relay what is still in the pipes, without waiting for
  // grandchildren that may hold them open.
  for (Rank& r : ranks_)
    for (auto* o : {r.out.get(), r.err.get()})
      if (o) o->finish();
  return exit_status_;
}

}  // namespace

int run_job(const JobConfig& cfg, SignalPipe& signals) {
  Job job(cfg, signals);
  return job.run();
}

}  // namespace nicemu::run
