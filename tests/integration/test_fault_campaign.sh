#!/usr/bin/env bash
# tools/fault-campaign on a project program (examples/dmapp_histogram, launched by Hydra):
# without faults the run is "passed"; with failed AMOs (amo-error) it is "failed-clean"
# (DMAPP reports the error; "wrong-data" before it stopped reposting AMOs); the printed
# replay command repeats the same outcome; the summary table counts both; a misspelt fault
# kind is refused with a message. With a libugni built with libfabric (third argument ofi):
# under ofi-none (two hosts, fabric_data = ofi) the run passes with its AMOs rank to rank
# (ofi_ops), and one whose ranks cannot open the provider (FI_PROVIDER names none) is a
# set-up error, not a pass over the daemons' path; as root, under netns-ofi-none (two network
# namespace hosts, ranks in them through nicemu-rank) it passes with both ranks in their
# namespaces and only the veth addresses published.
# Usage: test_fault_campaign.sh BUILD_DIR SOURCE_DIR [ofi|no-ofi]
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" examples/dmapp_histogram
src=${2:?source dir}
need_cmd python3 mpiexec.hydra
# The namespaces of the netns kinds, should the campaign not have removed them (killed): the
# campaign names them in each run's log.
test_cleanup() {
  local a b sw
  # shellcheck source=../../tools/lib/netns-hosts.sh
  . "$src/tools/lib/netns-hosts.sh"
  sed -n 's/^# namespace hosts: node 0 in \([^ ]*\) .*node 1 in \([^ ]*\) .*bridge in \([^ ]*\)$/\1 \2 \3/p' \
    "$TMP"/compat/fault-campaign/runs/*/run.log 2>/dev/null |
    while read -r a b sw; do netns_hosts_down "$a" "$b" "$sw"; done
}
test_init test_fault_campaign
# Every daemon the campaign starts runs with --rundir under $TMP (its run directories come
# from TMPDIR), so lib.sh's cleanup finds any left behind.
# shellcheck disable=SC2034  # read by lib_cleanup
KILL_RUNDIR=$TMP
export TMPDIR=$TMP
camp=("$src/tools/fault-campaign" --build "$BUILD" --compat-dir "$TMP/compat" --client dmapp --limit 40)

# The ucx client's gtest judgement, on gtest's own summary texts (UCX is not built here): a
# process whose only failed tests are listed in tools/compat/expected/ucx-gtest-expected-failures
# passes; another failure, a signal or a data mismatch in any test is not hidden.
if python3 - "$src/tools/fault-campaign" >"$TMP/judge.out" 2>&1 <<'PY'
import importlib.machinery, importlib.util, os, sys
loader = importlib.machinery.SourceFileLoader("fault_campaign", sys.argv[1])
fc = importlib.util.module_from_spec(importlib.util.spec_from_loader("fault_campaign", loader))
loader.exec_module(fc)
exp = fc.read_expected_failures(os.path.join(fc.COMPAT_EXPECTED, "ucx-gtest-expected-failures"))
assert ("ugni_rdma/uct_amo_*", "md-refcount") in exp, exp
ran = "[==========] 6 tests from 3 test suites ran. (900 ms total)\n[  PASSED  ] 4 tests.\n"
def failed(*names):
    return ran + f"[  FAILED  ] {len(names)} tests, listed below:\n" + "".join(
        f"[  FAILED  ] {n}, where GetParam() = ugni_rdma/ARIES:0\n" for n in names) + "\n 2 FAILED TESTS\n"
amo = "ugni_rdma/uct_amo_fadd_fxor_test.fadd64/0"
put = "ugni_rdma/uct_p2p_rma_test.put_zcopy/0"
# an expected failure is excused for its own reason only: md-refcount's deregistration errors and
# gtest's count of them as its one failed assertion; not a refused registration, not another failed
# check (a completion's status), not a test without output of its own
dereg = "[1.2] [vm:1:0] ugni_md.c:114 UCX  ERROR GNI_MemDeregister failed, Error status: GNI_RC_INVALID_PARAM 2\n"
reg = "[1.2] [vm:1:0] ugni_md.c:80 UCX  ERROR GNI_MemRegister failed (addr 0x1, size 8), Error status: GNI_RC_ERROR_RESOURCE 3\n"
count = "/src/ucx/test/gtest/common/test.cc:344: Failure\nFailed\nGot 3 errors and 0 warnings during the test\n"
status = "/src/ucx/test/gtest/uct/test_p2p_mix.cc:27: Failure\nValue of: comp->status\n"
cswap = "ugni_rdma/uct_amo_cswap_test.cswap64/0"
def run(log, name=amo):
    return f"[ RUN      ] {name} <ugni_rdma/ARIES:0>\n{log}[  FAILED  ] {name}, where GetParam() = x (5 ms)\n"
assert fc.gtest_judge(1, run(dereg + count) + run(dereg + count, cswap) + failed(amo, cswap), exp) == 0
assert fc.gtest_judge(1, run(dereg + count) + failed(amo), exp) == 0
assert fc.gtest_judge(1, run(dereg + reg + count) + failed(amo), exp) == 1
assert fc.gtest_judge(1, run(dereg + status + count) + failed(amo), exp) == 1
assert fc.gtest_judge(1, run(status) + failed(amo), exp) == 1
assert fc.gtest_judge(1, run(count) + failed(amo), exp) == 1
assert fc.gtest_judge(1, failed(amo), exp) == 1
assert fc.gtest_judge(1, run(dereg + count) + failed(amo, put), exp) == 1
assert fc.gtest_judge(139, failed(amo), exp) == 139
assert fc.gtest_judge(1, ran, exp) == 1
t = fc.Test("t", None, ok=r"^\[==========\] [1-9]\d* tests? from", wrong=fc.UCX_GTEST_WRONG,
            judge=lambda rc, text: fc.gtest_judge(rc, text, exp))
assert fc.classify(t, 1, False, run(dereg + count) + failed(amo), 0) == "passed"
assert fc.classify(t, 1, False, run(dereg + count) + failed(amo), 3) == "absorbed"
assert fc.classify(t, 1, False, run(dereg + status + count) + failed(amo), 3) == "failed-clean"
assert fc.classify(t, 1, False, run(dereg + count) + failed(amo, put), 3) == "failed-clean"
wrong = "test_amo_fadd_fxor.cc:39: Failure\nExpected equality of these values:\n" + failed(amo)
assert fc.classify(t, 1, False, wrong, 3) == "wrong-data"
fence = "test_fence.cc:195: Failure\nExpected equality of these values:\n  error\n    Which is: 256\n" + failed(put)
assert fc.classify(t, 1, False, fence, 3) == "wrong-data"
assert fc.classify(t, 1, False, "Pattern check failed at 0x7f offset 8: Expected: 0x1 Actual: 0x0\n" + failed(put),
                   3) == "wrong-data"
print("judge ok")
PY
then pass "ucx gtest judgement: expected failures excused, others and wrong data not"
else fail "ucx gtest judgement"; show_log "$TMP/judge.out"; fi

capture list 20 "${camp[@]}" --list
if expect_rc list 0 && grep -q '^dmapp: ready' "$TMP/list.out"; then pass "--list: dmapp ready"
else fail "--list does not show dmapp ready"; show list; fi

capture runs 100 "${camp[@]}" --fault none,amo-error --seed 1 --out "$TMP/results.txt"
expect_rc runs 0 || finish fault-campaign
line() { grep "^client=dmapp test=dmapp_histogram fault=$1 seed=1 " "$TMP/results.txt"; }
if line none | grep -q ' outcome=passed '; then pass "no fault: passed"
else fail "no fault: $(line none)"; show runs; fi
if line amo-error | grep -q ' outcome=failed-clean '; then pass "amo-error: failed-clean"
else fail "amo-error: $(line amo-error)"; show runs; fi
if line amo-error | grep -Eq ' injected=[1-9][0-9]* '; then pass "amo-error: faults counted"
else fail "amo-error: no injected fault counted: $(line amo-error)"; fi

# The replay command, run from the source tree, gives the same first five fields.
replay=$(line amo-error | sed -n 's/.* replay=//p')
[[ $replay == tools/fault-campaign* ]] || fail "no replay command: $(line amo-error)"
(cd "$src" && eval "$replay" --out "$TMP/replay.txt") >"$TMP/replay.out" 2>&1 ||
  { fail "replay failed"; show_log "$TMP/replay.out"; }
a=$(line amo-error | cut -d' ' -f1-5)
b=$(grep '^client=' "$TMP/replay.txt" | cut -d' ' -f1-5)
if [[ -n "$a" && "$a" == "$b" ]]; then pass "replay: $b"; else fail "replay gave '$b', first run '$a'"; fi

capture summary 20 "${camp[@]}" --summary "$TMP/results.txt"
if grep -q '^| dmapp_histogram | P1 | F1 |$' "$TMP/summary.out"; then pass "summary table"
else fail "summary table"; show summary; fi

# The ofi kinds (docs/fault-campaigns.md): the data must really go rank to rank.
if [[ ${3:-no-ofi} == ofi ]] && ldconfig -p 2>/dev/null | grep -q 'libfabric\.so\.1 '; then
  capture ofi 100 "${camp[@]}" --fault ofi-none --seed 1 --out "$TMP/ofi.txt"
  l=$(grep '^client=dmapp test=dmapp_histogram fault=ofi-none ' "$TMP/ofi.txt")
  if [[ $l == *' outcome=passed '* && $l =~ \ ofi_ops=([0-9]+) && ${BASH_REMATCH[1]} -ge 100000 ]]; then
    pass "ofi-none: passed, ${BASH_REMATCH[1]} operations rank to rank"
  else fail "ofi-none: $l"; show ofi; fi
  FI_PROVIDER=nicemu-none capture noofi 100 "${camp[@]}" --fault ofi-none --seed 1 --out "$TMP/noofi.txt"
  l=$(grep '^client=dmapp test=dmapp_histogram fault=ofi-none ' "$TMP/noofi.txt")
  if [[ $l == *' outcome=setup-error '*' ofi_ops=0 '* ]]; then pass "ofi-none without a provider: setup-error"
  else fail "ofi-none without a provider: $l"; show noofi; fi
  # On two network namespace hosts: each rank enters its node's namespace through
  # tools/lib/nicemu-rank (NICEMU_NODE_NETNS) after Hydra started it in this one, and its
  # endpoint's address, published to the daemons, is its veth's.
  if [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null && command -v nsenter >/dev/null; then
    capture netns 100 "${camp[@]}" --fault netns-ofi-none --seed 1 --out "$TMP/netns.txt"
    l=$(grep '^client=dmapp test=dmapp_histogram fault=netns-ofi-none ' "$TMP/netns.txt")
    if [[ $l == *' outcome=passed '*' ranks_in_ns=2 '* && $l =~ \ ofi_ops=([0-9]+)\ ofi_hosts=(10\.217\.[0-9]+\.1,10\.217\.[0-9]+\.2)\  &&
        ${BASH_REMATCH[1]} -ge 100000 ]]; then
      pass "netns-ofi-none: passed, both ranks in their hosts' namespaces, ${BASH_REMATCH[1]} operations rank to rank between ${BASH_REMATCH[2]}"
    else
      fail "netns-ofi-none: $l"; show netns
      [[ $l =~ \ log=([^ ]+) ]] && { echo "    its run log, last lines:" >&2; tail -n 40 "${BASH_REMATCH[1]}" | show_log /dev/stdin; }
    fi
    # A namespace that does not exist: the rank wrapper refuses to start the program.
    PMI_RANK=0 PMI_SIZE=1 NICEMU_NODES=0 NICEMU_RUN=$RUN NICEMU_NODE_NETNS=nicemu-no-such-ns \
      capture nons 20 "$src/tools/lib/nicemu-rank" true
    if [[ $RC -eq 127 ]] && grep -q 'no network namespace nicemu-no-such-ns' "$TMP/nons.err"; then
      pass "nicemu-rank: a missing namespace refused"
    else fail "nicemu-rank with a missing namespace: rc $RC"; show nons; fi
  else
    echo "SKIP: netns-ofi-none (needs root, ip and nsenter)"
  fi
else
  echo "SKIP: ofi kinds (libugni without libfabric, or no libfabric.so.1)"
fi

capture bad 20 "${camp[@]}" --fault no-such-kind
if [[ $RC -eq 2 ]] && grep -q 'unknown fault kind no-such-kind' "$TMP/bad.err"; then pass "unknown fault kind refused"
else fail "unknown fault kind: rc $RC"; show bad; fi
finish fault-campaign
