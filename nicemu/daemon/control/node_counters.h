// The node's counters, bound to slots of the counter page (stats_page.h): `++ctr.x` updates
// the page that nicemuctl stats reads. The node owns them; the handlers count into them.
#pragma once
#include "nicemu/daemon/stats_page.h"

namespace nicemu::daemon {

struct Counters {
  Counter connections, attaches, attach_refused, detaches;
  Counter registrations, deregistrations, cq_creates, cq_destroys;
  Counter peer_lookups, peer_lookup_failures, mbox_opens;
  Counter malformed_messages, credentials_issued;
  Counter datagrams_posted, datagrams_cancelled;
  Counter msgq_joins, msgq_join_refused, msgq_lookups;
  Counter credential_refused, resource_refused;
  Counter accept_deferred;  // accept retried later: the daemon was out of descriptors
};

}  // namespace nicemu::daemon
