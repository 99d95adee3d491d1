// Fuzz target: the daemon's handling of control messages (Node::handle, nicemu/daemon),
// on a real Node whose run directory is a fresh temporary directory (no sockets: peer
// lookups and datagrams to other nodes find nobody). Every message a client may send
// over its control socket goes through here first.
//
// Input: a sequence of messages, each as long as its header's `length` field says (the
// rest of the input if that is 0, short or too long), all from one connection, so an
// attach can be followed by registrations, CQs, mailboxes, datagrams and MSGQ requests
// on the region it created. The connection then closes (its CDM is reclaimed), so inputs
// do not pile up state.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_driver.h"
#include "nicemu/daemon/node.h"

namespace ctl = nicemu::abi::ctl;
using nicemu::daemon::Node;

// The pid of the fuzzing connection: seeds carry it in their attach requests. No process
// has it (above the kernel's pid_max), so nothing ever touches a real process's memory.
static constexpr pid_t kFuzzPid = 0x7ffffff0;

static char g_rundir[] = "/tmp/nicemu-fuzz-XXXXXX";

static Node& node() {
  static std::unique_ptr<Node> n = [] {
    spdlog::set_level(spdlog::level::off);
    char* dir = mkdtemp(g_rundir);
    if (!dir) std::abort();
    std::atexit([] { std::filesystem::remove_all(g_rundir); });
    nicemu::daemon::NodeConfig cfg;
    cfg.nic_addr = 0;
    cfg.rundir = dir;
    cfg.socket_path = std::string(dir) + "/nic0.sock";
    cfg.region_size = nicemu::abi::kRoSize + (uint64_t{4} << 20);
    cfg.allow_any_credential = true;
    cfg.bte_channels = 1;
    return std::make_unique<Node>(cfg);
  }();
  return *n;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Node& n = node();
  nicemu::daemon::Peer peer;
  peer.id = 1;
  peer.pid = kFuzzPid;
  peer.uid = getuid();
  peer.gid = getgid();
  std::vector<char> reply;
  nicemu::daemon::PassFds fds{-1, -1, -1};
  size_t off = 0;
  int budget = 64;  // messages per input
  while (off < size && budget-- > 0) {
    size_t len = size - off;
    if (len >= sizeof(ctl::Header)) {
      ctl::Header h;
      std::memcpy(&h, data + off, sizeof h);
      if (h.length >= sizeof h && h.length <= len) len = h.length;
    }
    if (len > ctl::kMaxMessage) len = ctl::kMaxMessage;
    n.handle(peer, reinterpret_cast<const char*>(data + off), len, reply, fds);
    if (reply.size() > ctl::kMaxMessage) std::abort();  // every reply fits one message
    off += len;
  }
  n.connection_closed(peer);
  return 0;
}
