// libpmi's connection to the process manager. It finds the server (an inherited socket in
// PMI_FD, a TCP address in PMI_PORT, or none: a singleton job of one rank with a local
// KVS), performs the PMI-1 handshake and runs one request/answer exchange at a time
// (shared/spec/pmi-api.md §8). PMI-1, PMI-2 and the Cray extensions are all built on it.
#pragma once
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "pmi.h"
#include "wire.h"

namespace nicemu::pmi {

// KVS key prefix under which each rank publishes its NIC address when the server is not
// nicemu-run (Client::publish_nic_addr).
inline constexpr const char* kNicAddrKeyPrefix = "nicemu_nic_addr_";

class Client {
 public:
  // The process-wide instance. Never destroyed: atexit handlers of other libraries may
  // still call PMI after static destructors ran.
  static Client& get();

  // Reference counted (spec §6: MPI, DMAPP and tools may all init and finalize PMI): only
  // the first init talks to the server and only the last finalize sends `finalize`. The
  // connection stays open after that, so a later init works again.
  int init(int* spawned);
  int finalize();
  bool initialized();
  // PMI_SUCCESS when initialized, PMI_ERR_INIT otherwise.
  int check_init();
  // True once the job facts below are known (they stay valid after finalize).
  bool known() const { return known_; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int appnum() const { return appnum_; }
  bool spawned() const { return spawned_; }
  const std::string& kvsname() const { return kvsname_; }
  int kvsname_max() const { return kvsname_max_; }
  int keylen_max() const { return keylen_max_; }
  int vallen_max() const { return vallen_max_; }
  // The server is nicemu-run (it sets NICEMU_PMI_PIPELINE for its ranks): it pre-loads
  // every node's NIC address and reads request lines of any length.
  static bool server_is_nicemu_run();

  // KVS operations on raw values; escaping for the wire happens here. kvs_get returns
  // PMI_ERR_INVALID_KEY when the key is absent.
  int kvs_put(std::string_view kvsname, std::string_view key, std::string_view value);
  int kvs_get(std::string_view kvsname, std::string_view key, std::string& value);
  // Several gets, pipelined on the wire when the server allows it (NICEMU_PMI_PIPELINE,
  // set by nicemu-run: a window of requests per write, then their answers): a collective
  // of N ranks then costs N/window round trips, not N. rcs[i] is
  // kvs_get's code for keys[i]; the return value is PMI_FAIL only if the connection broke.
  int kvs_get_many(std::string_view kvsname, const std::vector<std::string>& keys, std::vector<std::string>& values,
                   std::vector<int>& rcs);
  int barrier();
  int universe_size(int* size);
  // Asks the launcher to kill the job (no answer comes).
  void send_abort(int exit_code);

  // Collectives hold this across their several exchanges; the methods above take it too.
  std::recursive_mutex& mutex() { return mu_; }
  // Numbers the collectives so their KVS keys never collide; every rank calls the
  // collectives in the same order, so the numbers agree across ranks.
  unsigned next_collective() { return ++collectives_; }

  // Prints "libpmi: rank R: msg" to stderr.
  void report(std::string_view msg) const;

 private:
  Client() = default;
  int connect();
  int connect_port(const char* port);
  int handshake_initack(int id);
  int handshake_init();
  int exchange(const wire::Message& req, std::string_view expect, wire::Message& reply);
  bool send_line(const std::string& line);
  bool recv_line(std::string& line);
  void lost(std::string_view what, int err);
  void publish_nic_addr();

  std::recursive_mutex mu_;
  int refcount_ = 0;
  bool known_ = false;     // rank/size/kvsname fetched
  bool rank_known_ = false;  // rank parsed (messages can name it)
  bool connected_ = false; // fd_ valid (or singleton)
  bool broken_ = false;    // the connection failed; every exchange now fails
  bool singleton_ = false;
  bool pmix_ = false;      // PMIx back end (pmix_backend.h) instead of the PMI-1 wire
  int fd_ = -1;
  std::string fd_origin_;  // "PMI_FD 5" or "PMI_PORT host:port", for messages
  wire::LineReader reader_;
  std::map<std::string, std::string, std::less<>> local_kvs_;  // singleton only

  int rank_ = 0, size_ = 1, appnum_ = 0;
  bool spawned_ = false;
  std::string kvsname_;
  int kvsname_max_ = wire::kKvsnameMax, keylen_max_ = wire::kKeylenMax,
      vallen_max_ = wire::kVallenMax;
  unsigned collectives_ = 0;
};

// Runs an API body, turning exceptions into PMI codes so none crosses the C boundary.
template <typename F>
int guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return PMI_ERR_NOMEM;
  } catch (...) {
    return PMI_FAIL;
  }
}

// Copies `s` with its NUL into buf[len]; PMI_ERR_INVALID_LENGTH (and a truncated,
// terminated copy) when it does not fit.
int copy_out(std::string_view s, char* buf, int len);

}  // namespace nicemu::pmi
