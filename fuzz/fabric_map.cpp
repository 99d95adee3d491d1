// Fuzz target: the fabric map parser (nicemu/fabric/fabric_map.h, `nicemu --fabric FILE`).
// Host names are resolved with getaddrinfo; the harness replaces it with a numeric-only
// stand-in so inputs never reach DNS (slow, and not what is being tested).
#include <arpa/inet.h>
#include <netdb.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "fuzz_driver.h"
#include "nicemu/fabric/fabric_map.h"

extern "C" int getaddrinfo(const char* node, const char*, const struct addrinfo*, struct addrinfo** res) {
  in_addr a{};
  if (!node || inet_pton(AF_INET, node, &a) != 1) return EAI_NONAME;
  auto* ai = static_cast<addrinfo*>(std::calloc(1, sizeof(addrinfo) + sizeof(sockaddr_in)));
  auto* sa = reinterpret_cast<sockaddr_in*>(ai + 1);
  sa->sin_family = AF_INET;
  sa->sin_addr = a;
  ai->ai_family = AF_INET;
  ai->ai_socktype = SOCK_DGRAM;
  ai->ai_addrlen = sizeof(sockaddr_in);
  ai->ai_addr = reinterpret_cast<sockaddr*>(sa);
  *res = ai;
  return 0;
}
extern "C" void freeaddrinfo(struct addrinfo* ai) { std::free(ai); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto map = nicemu::fabric::FabricMap::parse(text, "fuzz");
    for (const auto& [nic, ep] : map.nodes()) {
      const auto* found = map.find(nic);
      if (!found || found->nic != nic || ep.addr.sin_family != AF_INET) std::abort();
    }
  } catch (const std::exception&) {
    // A refused map: the error is the expected outcome of most inputs.
  }
  return 0;
}
