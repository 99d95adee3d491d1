#!/usr/bin/env bash
# tools/fault-campaign on a project program (examples/dmapp_histogram, launched by Hydra):
# without faults the run is "passed"; with failed AMOs (amo-error) it is "failed-clean"
# (DMAPP reports the error; "wrong-data" before it stopped reposting AMOs); the printed
# replay command repeats the same outcome; the summary table counts both; a misspelt fault
# kind is refused with a message. Usage: test_fault_campaign.sh BUILD_DIR SOURCE_DIR
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" examples/dmapp_histogram
src=${2:?source dir}
need_cmd python3 mpiexec.hydra
test_init test_fault_campaign
# Every daemon the campaign starts runs with --rundir under $TMP (its run directories come
# from TMPDIR), so lib.sh's cleanup finds any left behind.
# shellcheck disable=SC2034  # read by lib_cleanup
KILL_RUNDIR=$TMP
export TMPDIR=$TMP
camp=("$src/tools/fault-campaign" --build "$BUILD" --compat-dir "$TMP/compat" --client dmapp --limit 40)

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

capture bad 20 "${camp[@]}" --fault no-such-kind
if [[ $RC -eq 2 ]] && grep -q 'unknown fault kind no-such-kind' "$TMP/bad.err"; then pass "unknown fault kind refused"
else fail "unknown fault kind: rc $RC"; show bad; fi
finish fault-campaign
