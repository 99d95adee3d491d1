#include "nicemu/fabric/fabric_map.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

namespace nicemu::fabric {

namespace {
bool resolve(const std::string& host, uint16_t port, sockaddr_in& out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;  // IPv4 only for now (docs/fabric.md)
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  std::memcpy(&out, res->ai_addr, sizeof out);
  out.sin_port = htons(port);
  freeaddrinfo(res);
  return true;
}
}  // namespace

FabricMap FabricMap::load(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << "fabric map " << path << ": " << e.description() << " (line " << e.source().begin.line << ")";
    throw std::runtime_error(os.str());
  }
  std::ostringstream os;
  os << t;
  return parse(os.str(), path);
}

FabricMap FabricMap::parse(const std::string& text, const std::string& origin) {
  auto fail = [&](const std::string& what) { throw std::runtime_error("fabric map " + origin + ": " + what); };
  toml::table t;
  try {
    t = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    fail(std::string(e.description()));
  }
  for (auto&& [k, v] : t)
    if (k != "node") fail("unknown key '" + std::string(k.str()) + "' (expected [[node]] tables)");
  FabricMap m;
  const toml::array* arr = t["node"].as_array();
  if (!arr) fail("no [[node]] entries");
  std::set<std::pair<uint32_t, uint16_t>> endpoints;
  size_t i = 0;
  for (auto&& el : *arr) {
    ++i;
    const toml::table* n = el.as_table();
    std::string where = "entry " + std::to_string(i);
    if (!n) fail(where + " is not a table");
    for (auto&& [k, v] : *n)
      if (k != "nic" && k != "host" && k != "port") fail(where + ": unknown key '" + std::string(k.str()) + "'");
    // value_exact: whole numbers only. value<int64_t>() converts a float, which is
    // undefined behaviour out of range (found by fuzzing: fuzz/regressions/fabric_map).
    auto nic = (*n)["nic"].value_exact<int64_t>();
    auto host = (*n)["host"].value_exact<std::string>();
    auto port = (*n)["port"].value_exact<int64_t>();
    if (!nic || *nic < 0 || *nic > 0xFFFFFFFFll) fail(where + ": nic must be a NIC address (0..2^32-1)");
    if (!host || host->empty()) fail(where + ": host missing");
    if (!port || *port <= 0 || *port > 65535) fail(where + ": port must be 1..65535");
    Endpoint e{static_cast<uint32_t>(*nic), *host, static_cast<uint16_t>(*port), {}};
    if (!resolve(e.host, e.port, e.addr)) fail(where + ": cannot resolve host '" + e.host + "' to IPv4");
    if (m.nodes_.contains(e.nic)) fail(where + ": NIC address " + std::to_string(e.nic) + " listed twice");
    if (!endpoints.emplace(e.addr.sin_addr.s_addr, e.port).second)
      fail(where + ": " + e.host + ":" + std::to_string(e.port) + " used by two NIC addresses");
    m.nodes_[e.nic] = std::move(e);
  }
  return m;
}

const Endpoint* FabricMap::find(uint32_t nic) const {
  auto it = nodes_.find(nic);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::string generate(const std::vector<std::string>& hosts, uint32_t per_host, uint16_t base_port, uint32_t first_nic) {
  std::ostringstream os;
  os << "# nicemu fabric map: NIC address -> host:port (nicemuctl fabric gen)\n";
  uint32_t nic = first_nic;
  for (const auto& h : hosts)
    for (uint32_t j = 0; j < per_host; ++j)
      os << "\n[[node]]\nnic = " << nic++ << "\nhost = \"" << h << "\"\nport = " << base_port + j << "\n";
  return os.str();
}

}  // namespace nicemu::fabric
