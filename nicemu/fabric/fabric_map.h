// The fabric map: which NIC address lives at which host:port (`nicemu --fabric FILE`).
//
//   # one table per emulated node
//   [[node]]
//   nic  = 0
//   host = "10.0.0.1"     # IPv4 address or a name that resolves to one
//   port = 7700
//
// Without a map a daemon only reaches the daemons of its own host (Unix sockets in its run
// directory), which is the default for several emulated nodes on one machine. With one,
// a NIC address that has no daemon socket in the run directory but has an entry here is
// reached over UDP. `nicemuctl fabric gen` writes a map from a host list (generate()).
#pragma once
#include <netinet/in.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nicemu::fabric {

struct Endpoint {
  uint32_t nic = 0;
  std::string host;
  uint16_t port = 0;
  sockaddr_in addr{};  // resolved at load
};

class FabricMap {
 public:
  // Parses and resolves a map; throws std::runtime_error naming the file, the entry and
  // the problem (unknown key, duplicate NIC address or endpoint, unresolvable host).
  static FabricMap load(const std::string& path);
  static FabricMap parse(const std::string& text, const std::string& origin);

  const Endpoint* find(uint32_t nic) const;
  const std::map<uint32_t, Endpoint>& nodes() const { return nodes_; }

 private:
  std::map<uint32_t, Endpoint> nodes_;
};

// A map for `hosts` with `per_host` consecutive NIC addresses each, starting at `first_nic`,
// on ports base_port, base_port + 1, ... of every host.
std::string generate(const std::vector<std::string>& hosts, uint32_t per_host, uint16_t base_port,
                     uint32_t first_nic = 0);

}  // namespace nicemu::fabric
