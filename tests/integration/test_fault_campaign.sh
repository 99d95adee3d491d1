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
# Every daemon the campaign starts runs with --rundir under $TMP.
KILL_RUNDIR=$TMP
camp=("$src/tools/fault-campaign" --build "$BUILD" --compat-dir "$TMP/compat" --client dmapp --limit 40)

capture list 20 "${camp[@]}" --list
expect_rc list 0 && grep -q '^dmapp: ready' "$TMP/list.out" && pass "--list: dmapp ready" ||
  { fail "--list does not show dmapp ready"; show list; }

capture runs 100 "${camp[@]}" --fault none,amo-error --seed 1 --out "$TMP/results.txt"
expect_rc runs 0 || finish fault-campaign
line() { grep "^client=dmapp test=dmapp_histogram fault=$1 seed=1 " "$TMP/results.txt"; }
if line none | grep -q ' outcome=passed '; then pass "no fault: passed"
else fail "no fault: $(line none)"; show runs; fi
if line amo-error | grep -q ' outcome=failed-clean '; then pass "amo-error: failed-clean"
else fail "amo-error: $(line amo-error)"; show runs; fi
line amo-error | grep -Eq ' injected=[1-9][0-9]* ' && pass "amo-error: faults counted" ||
  fail "amo-error: no injected fault counted: $(line amo-error)"

# The replay command, run from the source tree, gives the same first five fields.
replay=$(line amo-error | sed -n 's/.* replay=//p')
[[ $replay == tools/fault-campaign* ]] || fail "no replay command: $(line amo-error)"
(cd "$src" && eval "$replay" --out "$TMP/replay.txt") >"$TMP/replay.out" 2>&1 ||
  { fail "replay failed"; show_log "$TMP/replay.out"; }
a=$(line amo-error | cut -d' ' -f1-5)
b=$(grep '^client=' "$TMP/replay.txt" | cut -d' ' -f1-5)
[[ -n "$a" && "$a" == "$b" ]] && pass "replay: $b" || fail "replay gave '$b', first run '$a'"

capture summary 20 "${camp[@]}" --summary "$TMP/results.txt"
grep -q '^| dmapp_histogram | P1 | F1 |$' "$TMP/summary.out" && pass "summary table" ||
  { fail "summary table"; show summary; }

capture bad 20 "${camp[@]}" --fault no-such-kind
[[ $RC -eq 2 ]] && grep -q 'unknown fault kind no-such-kind' "$TMP/bad.err" && pass "unknown fault kind refused" ||
  { fail "unknown fault kind: rc $RC"; show bad; }
finish fault-campaign
