// The counter layout (nicemu/abi/counters_layout.h) and the daemon's counter page
// (nicemu/daemon/stats_page.h): stable, exportable names; entries for CDMs and links;
// totals that only grow, whatever a client writes into its own block.
#include <doctest/doctest.h>

#include <cctype>
#include <set>
#include <string>

#include "nicemu/abi/counters_layout.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/daemon/stats_page.h"

namespace ac = nicemu::abi::counters;
using nicemu::daemon::StatsPage;

namespace {

// Prometheus metric-name characters, and no clash within one table.
template <size_t N>
void check_names(const ac::CounterInfo (&info)[N]) {
  std::set<std::string> seen;
  for (const auto& c : info) {
    std::string n = c.name;
    CHECK(!n.empty());
    CHECK(std::islower(static_cast<unsigned char>(n[0])));
    for (char ch : n) CHECK((std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) || ch == '_'));
    CHECK(n.find("__") == std::string::npos);
    CHECK(seen.insert(n).second);
    CHECK(std::string(c.help).size() > 5);
  }
}

void init_block(ac::CdmCounterBlock& b) {
  b.magic = ac::kBlockMagic;
  b.version = ac::kVersion;
  b.slots = ac::kCdmSlots;
}

}  // namespace

TEST_CASE("counter names are stable identifiers") {
  check_names(ac::kNodeInfo);
  check_names(ac::kCdmInfo);
  check_names(ac::kLinkInfo);
  // Names that monitoring already keys on (append-only: these must never move).
  CHECK(std::string(ac::kNodeInfo[ac::node::connections].name) == "connections");
  CHECK(std::string(ac::kCdmInfo[ac::cdm::fma_put_posts].name) == "fma_put_posts");
  CHECK(ac::cdm::fma_put_posts == 0);
  CHECK(ac::node::attaches == 1);
}

TEST_CASE("error classes follow the CQE status codes") {
  namespace cqe = nicemu::abi::cqe;
  CHECK(ac::kErrorBase + cqe::kErrProtection - 1 == ac::cdm::errors_protection);
  CHECK(ac::kErrorBase + cqe::kErrBounds - 1 == ac::cdm::errors_bounds);
  CHECK(ac::kErrorBase + cqe::kErrPeerGone - 1 == ac::cdm::errors_peer_gone);
  CHECK(ac::kErrorBase + cqe::kErrTransient - 1 == ac::cdm::errors_transient);
  CHECK(ac::kErrorBase + cqe::kErrInjected - 1 == ac::cdm::errors_injected);
  CHECK(cqe::kErrStatusLast - 1 == ac::kErrorClasses);
}

TEST_CASE("the page: header, node counters, CDM entries, totals, links") {
  StatsPage page("", 42);
  const ac::PageHeader& h = page.header();
  CHECK(h.magic == ac::kMagic);
  CHECK(h.version == ac::kVersion);
  CHECK(h.nic_addr == 42);
  CHECK(h.page_size == ac::kPageSize);
  CHECK(h.state.load() == ac::kPageLive);

  auto c = page.node(ac::node::attaches);
  ++c;
  c++;
  CHECK(page.node(ac::node::attaches).value() == 2);

  ac::CdmCounterBlock b{};
  init_block(b);
  page.cdm_attached(7, 1234, 1000, 3, 5, 0xabc);
  CHECK(page.node(ac::node::cdms_attached).value() == 1);
  b.v[ac::cdm::smsg_sends] = 10;
  page.refresh(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 10);
  b.v[ac::cdm::smsg_sends] = 15;
  page.refresh(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 15);

  // The client's block is untrusted: a counter going down does not take the totals down,
  // and growth after that counts from the new value.
  b.v[ac::cdm::smsg_sends] = 3;
  page.refresh(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 15);
  b.v[ac::cdm::smsg_sends] = 5;
  page.refresh(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 17);
  // A block whose magic was overwritten is not copied at all.
  b.magic = 0;
  b.v[ac::cdm::smsg_sends] = 1000;
  page.refresh(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 17);
  b.magic = ac::kBlockMagic;

  // Detach takes a last copy, then frees the entry.
  b.v[ac::cdm::smsg_sends] = 6;
  page.cdm_detached(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 18);
  CHECK(page.node(ac::node::cdms_attached).value() == 0);
  page.refresh(7, &b);  // unknown attach id: ignored
  CHECK(page.total(ac::cdm::smsg_sends) == 18);

  page.link(3, ac::link::messages_sent).add(2);
  page.link(3, ac::link::messages_sent).add(1);
  CHECK(page.link(3, ac::link::messages_sent).value() == 3);
  CHECK(page.link(4, ac::link::messages_sent).value() == 0);
}

TEST_CASE("more CDMs than entries: the rest are untracked but still in the totals") {
  StatsPage page("", 1);
  ac::CdmCounterBlock b{};
  init_block(b);
  b.v[ac::cdm::amo_posts] = 1;
  for (uint64_t id = 1; id <= ac::kCdmEntries + 2; ++id) {
    page.cdm_attached(id, 100, 0, uint32_t(id), 1, 1);
    page.refresh(id, &b);
  }
  CHECK(page.node(ac::node::cdms_untracked).value() == 2);
  CHECK(page.node(ac::node::cdms_attached).value() == ac::kCdmEntries + 2);
  CHECK(page.total(ac::cdm::amo_posts) == ac::kCdmEntries + 2);
  page.cdm_detached(ac::kCdmEntries + 1, &b);
  CHECK(page.node(ac::node::cdms_untracked).value() == 1);
  // A tracked one leaves: its entry is free for the next attach.
  page.cdm_detached(1, &b);
  page.cdm_attached(9999, 100, 0, 1, 1, 1);
  CHECK(page.node(ac::node::cdms_untracked).value() == 1);
}
