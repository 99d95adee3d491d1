// Ordering model (docs/ordering.md): which class a post gets from its delivery mode, the
// target's PI flags and a forced mode, and which transactions may pass which.
#include <doctest/doctest.h>

#include "ordering_model.h"

using namespace nicemu::ugni::ordering;
namespace af = nicemu::abi::fault;

TEST_CASE("ordering: class from dlvr_mode, PI flags and the forced mode") {
  CHECK(class_of(af::kOrderAuto, GNI_DLVMODE_PERFORMANCE, 0) == kDefault);
  CHECK(class_of(af::kOrderAuto, GNI_DLVMODE_IN_ORDER, GNI_MEM_RELAXED_PI_ORDERING) == kStrict);
  CHECK(class_of(af::kOrderAuto, GNI_DLVMODE_NO_ADAPT, GNI_MEM_RELAXED_PI_ORDERING) == kRelaxed);  // half of IN_ORDER
  CHECK(class_of(af::kOrderAuto, GNI_DLVMODE_ADAPTIVE1, GNI_MEM_STRICT_PI_ORDERING) == kStrict);
  CHECK(class_of(af::kOrderAuto, 0, GNI_MEM_STRICT_PI_ORDERING | GNI_MEM_RELAXED_PI_ORDERING) == kStrict);
  CHECK(class_of(af::kOrderRelaxed, GNI_DLVMODE_IN_ORDER, GNI_MEM_STRICT_PI_ORDERING) == kRelaxed);
  CHECK(class_of(af::kOrderStrict, 0, GNI_MEM_RELAXED_PI_ORDERING) == kStrict);
  CHECK(smsg_class_of(af::kOrderAuto, GNI_DLVMODE_PERFORMANCE) == kDefault);
  CHECK(smsg_class_of(af::kOrderAuto, GNI_DLVMODE_IN_ORDER) == kStrict);
}

TEST_CASE("ordering: what may pass what") {
  const Txn put_s{kStrict, true}, put_d{kDefault, true}, put_r{kRelaxed, true};
  const Txn get_s{kStrict, false}, get_d{kDefault, false}, get_r{kRelaxed, false};
  // strict: nothing passes, nothing is passed
  for (const Txn& y : {put_s, put_d, put_r, get_d})
    for (const Txn& x : {put_s, get_s}) CHECK_FALSE(may_pass(y, x));
  CHECK_FALSE(may_pass(put_s, get_r));
  // default: non-posted may pass posted, nothing else
  CHECK(may_pass(put_d, get_d));
  CHECK_FALSE(may_pass(put_d, put_d));
  CHECK_FALSE(may_pass(get_d, put_d));
  CHECK_FALSE(may_pass(get_d, get_d));
  // relaxed: either side relaxed lets it pass
  CHECK(may_pass(put_r, put_d));
  CHECK(may_pass(put_d, put_r));
  CHECK(may_pass(get_d, put_r));
  // SMSG packets of one channel may overtake each other (the receiver orders them); a
  // default SMSG may not pass a default PUT, so payload stays before its envelope.
  int ch1 = 0, ch2 = 0;
  const Txn m1{kDefault, true, true, &ch1}, m1b{kDefault, true, true, &ch1}, m2{kDefault, true, true, &ch2};
  CHECK(may_pass(m1, m1b));
  CHECK_FALSE(may_pass(m1, m2));
  CHECK_FALSE(may_pass(put_d, m1));
  CHECK(may_pass(put_r, m1));
  const Txn ms{kStrict, true, true, &ch1};
  CHECK_FALSE(may_pass(m1, ms));
}
