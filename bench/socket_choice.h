// The daemon socket a benchmark talks to: --socket, else $NICEMU_SOCKET, else node
// $NICEMU_NODE's in the run directory, else the first node found there (empty: none).
#pragma once
#include <cstdlib>
#include <string>

#include "nicemu/ctl/ctl_client.h"

inline std::string resolve_socket(const std::string& explicit_socket) {
  if (!explicit_socket.empty()) return explicit_socket;
  if (const char* s = std::getenv("NICEMU_SOCKET"); s && *s) return s;
  std::string rundir = nicemu::ctl::default_rundir();
  if (const char* n = std::getenv("NICEMU_NODE"); n && *n)
    return nicemu::ctl::socket_path(rundir, uint32_t(std::strtoul(n, nullptr, 10)));
  auto nodes = nicemu::ctl::list_nodes(rundir);
  if (nodes.empty()) return {};
  return nicemu::ctl::socket_path(rundir, nodes.front());
}
