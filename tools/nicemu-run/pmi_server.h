// nicemu-run's PMI-1 server: the "simple PMI" wire protocol of shared/spec/pmi-api.md §8
// for the ranks of one job. It owns the job's KVS (pre-loaded with PMI_process_mapping
// and nicemu_nic_addrs) and its barrier, and serves each rank over the socket inherited
// through PMI_FD or over a TCP connection identified by `initack` (PMI_PORT + PMI_ID).
// Single-threaded: the launcher's poll loop calls it when its descriptors are ready.
#pragma once
#include <poll.h>

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pmi/src/wire.h"

namespace nicemu::run {

namespace wire = nicemu::pmi::wire;

class PmiServer {
 public:
  // Events the launcher acts on.
  class Listener {
   public:
    virtual ~Listener() = default;
    // A rank sent `abort`.
    virtual void on_pmi_abort(int rank, int exit_code) = 0;
    // Every rank is either waiting in the barrier or gone (exited / disconnected), but
    // not all are in it: the barrier can never complete.
    virtual void on_barrier_stuck(const std::vector<int>& gone) = 0;
  };

  struct Options {
    int size = 1;
    std::string kvsname;
    int appnum = 0;
    std::vector<std::pair<std::string, std::string>> preload;
  };

  PmiServer(Options opts, Listener& listener);
  ~PmiServer();
  PmiServer(const PmiServer&) = delete;
  PmiServer& operator=(const PmiServer&) = delete;

  // A connection already known to belong to `rank` (the server end of its socketpair).
  void add_rank_connection(int rank, int fd);
  // Listens on 127.0.0.1 (ephemeral port) for ranks connecting through PMI_PORT; returns
  // "127.0.0.1:<port>". Throws std::runtime_error on failure.
  std::string listen_tcp();
  // The rank's process is gone: it can no longer enter a barrier.
  void rank_exited(int rank);

  // Appends this server's descriptors to `fds`; handle() takes the ones it owns.
  void add_pollfds(std::vector<pollfd>& fds) const;
  bool handle(const pollfd& p);

  const std::string& kvsname() const { return opts_.kvsname; }

 private:
  struct Conn {
    int fd = -1;
    int rank = -1;  // -1: TCP connection before initack
    wire::LineReader in;
    std::string out;
    bool in_spawn = false;  // swallowing the lines of an mcmd=spawn
  };
  struct RankState {
    bool in_barrier = false;
    bool gone = false;
    bool finalized = false;
    int conn_fd = -1;
  };

  void accept_tcp();
  void read_conn(Conn& c);
  void on_line(Conn& c, const std::string& line);
  void dispatch(Conn& c, const wire::Message& m);
  void send(Conn& c, const wire::Message& m);
  void flush(Conn& c);
  void close_conn(int fd, const char* why);
  void mark_gone(int rank);
  void check_barrier();
  std::string who(const Conn& c) const;

  Options opts_;
  Listener& listener_;
  std::map<int, Conn> conns_;  // by fd
  std::vector<RankState> ranks_;
  std::unordered_map<std::string, std::string> kvs_;
  int in_barrier_ = 0;
  bool stuck_reported_ = false;
  int listen_fd_ = -1;
};

}  // namespace nicemu::run
