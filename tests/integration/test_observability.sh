#!/usr/bin/env bash
# Integration test of the operating surface of the daemon: settings from a config file and
# their validation, --help-config, the counter pages (nicemuctl stats as text, JSON and
# Prometheus exposition text checked by a parser; nicemuctl top), exact per-CDM counts of a
# client with known traffic, totals kept after it detaches, a stale page after SIGKILL, and
# SIGHUP reloads (a live setting applied, a restart-only one reported, a broken file refused).
# Usage: test_observability.sh BUILD_DIR SOURCE_DIR     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

SRC=${2:-}
use_build "${1:-}" tests/integration/counters_client
CLIENT=$BUILD/tests/integration/counters_client
CHECK_PROM=$SRC/tests/integration/check_prometheus.py
need_cmd python3
# The exposition check also runs prometheus_client's parser where a Python has it (Debian's
# python3-prometheus-client is for /usr/bin/python3).
PROM_PY=python3
/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null && PROM_PY=/usr/bin/python3

RUNDIR=""
CFG=""
CLIENT_PID=""
test_cleanup() {
  [[ -n "$CLIENT_PID" ]] && kill -KILL "$CLIENT_PID" 2>/dev/null && wait "$CLIENT_PID" 2>/dev/null
  exec 7>&- 2>/dev/null
}
test_init test_observability
RUNDIR=$TMP/run
CFG=$TMP/nicemu.toml

ctl() { "$CTL" --rundir "$RUNDIR" "$@"; }
# json_get FILE PYTHON-EXPRESSION-ON-d
json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# start_daemon A with the test's config, and its counter page published.
obs_daemon() {
  start_daemon "$1" "$RUNDIR" --config "$CFG"
  wait_until 50 test -f "$RUNDIR/nic-$1.stats" || die "daemon $1 published no counter page"
}

# ---- settings ---------------------------------------------------------------------------
"$DAEMON" --help-config >"$TMP/help.txt" && grep -q '^stats_interval_ms$' "$TMP/help.txt" &&
  grep -q 'environment NICEMU_SPIN_US' "$TMP/help.txt" && pass "--help-config lists daemon and library settings" ||
  fail "--help-config"
"$DAEMON" --help-config=toml >"$TMP/default.toml" && grep -q '^#bte_channels = 2$' "$TMP/default.toml" &&
  pass "--help-config=toml renders the default config" || fail "--help-config=toml"
# The default config file, every line uncommented that has a literal value, is accepted.
sed -n 's/^#\([a-z_]* = [^"].*\)$/\1/p; s/^#\([a-z_]* = "[a-z]\+"\)$/\1/p' "$TMP/default.toml" >"$TMP/uncommented.toml"
"$DAEMON" --help-config=bogus >/dev/null 2>&1; [[ $? -eq 2 ]] && pass "unknown --help-config format: exit 2" ||
  fail "--help-config=bogus should exit 2"

printf 'bte_channels = 2\nfrobnicate = 1\n' >"$TMP/unknown.toml"
"$DAEMON" --config "$TMP/unknown.toml" --node 30 --rundir "$RUNDIR" >"$TMP/unknown.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "unknown setting 'frobnicate'" "$TMP/unknown.out" &&
  pass "unknown config key refused (exit 2, names the key)" || fail "unknown key: rc $rc: $(cat "$TMP/unknown.out")"
printf 'bte_channels = 99\n' >"$TMP/range.toml"
"$DAEMON" --config "$TMP/range.toml" --node 30 --rundir "$RUNDIR" >"$TMP/range.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "bte_channels (config file .*range.toml): 99 is outside 1..64" "$TMP/range.out" &&
  pass "out-of-range config value refused with its origin" || fail "range: rc $rc: $(cat "$TMP/range.out")"
"$DAEMON" --node 30 --rundir "$RUNDIR" --log-level loud >"$TMP/level.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "log_level (command line): 'loud' is not one of" "$TMP/level.out" &&
  pass "bad --log-level refused" || fail "bad log level: rc $rc: $(cat "$TMP/level.out")"
mkdir -p "$RUNDIR"
cp "$TMP/uncommented.toml" "$CFG"
sed -i 's/^stats_interval_ms = .*/stats_interval_ms = 50/' "$CFG"
grep -q '^stats_interval_ms = 50$' "$CFG" || fail "the default config has no stats_interval_ms line"

# ---- daemons and a client with known traffic ---------------------------------------------
obs_daemon 20
obs_daemon 21
pass "daemons start with the default config file (all settings uncommented)"
[[ "$(stat -c %a "$RUNDIR/nic-20.stats")" == 644 ]] && pass "counter page mode 0644" || fail "counter page mode"

creds=$(ctl cred issue) || { fail "cred issue"; exit 1; }
eval "export $(echo "$creds" | tr '\n' ' ')"
mkfifo "$TMP/client.in"
NICEMU_SOCKET=$RUNDIR/nic-20.sock "$CLIENT" 10 4096 <"$TMP/client.in" >"$TMP/client.out" 2>"$TMP/client.err" &
CLIENT_PID=$!
exec 7>"$TMP/client.in"
for _ in $(seq 200); do grep -q '^ready' "$TMP/client.out" && break; kill -0 "$CLIENT_PID" 2>/dev/null || break; sleep 0.05; done
grep -q "^ready $CLIENT_PID" "$TMP/client.out" || { fail "client: $(cat "$TMP/client.err")"; exit 1; }

# The daemon copies the client's block every 50 ms: wait for the final values.
want_cdm() { json_get "$TMP/stats.json" "[c['counters']['$1'] for n in d['nodes'] for c in n['cdms'] if c['pid'] == $CLIENT_PID]"; }
for _ in $(seq 100); do
  ctl --node 20 stats --json >"$TMP/stats.json" 2>"$TMP/stats.err" || break
  [[ "$(want_cdm cq_local_events)" == "[11]" ]] && break
  sleep 0.05
done
for check in "fma_put_posts [11]" "fma_put_bytes [40968]" "cq_local_events [11]" "registrations [1]" \
             "errors_protection [1]" "smsg_sends [0]"; do
  set -- $check
  got=$(want_cdm "$1")
  [[ "$got" == "$2" ]] && pass "per-CDM $1 = $2" || fail "per-CDM $1: got $got, want $2"
done
[[ "$(json_get "$TMP/stats.json" "d['nodes'][0]['counters']['cdms_attached']")" == 1 ]] &&
  pass "cdms_attached gauge is 1" || fail "cdms_attached"
[[ "$(json_get "$TMP/stats.json" "d['nodes'][0]['totals']['fma_put_posts']")" == 11 ]] &&
  pass "node totals include the live CDM" || fail "totals while attached"

ctl stats >"$TMP/stats.txt" && grep -q "cdm attach .* pid $CLIENT_PID .* inst 7" "$TMP/stats.txt" &&
  grep -q "nic 21 .* running" "$TMP/stats.txt" && pass "stats text lists both nodes and the CDM" ||
  fail "stats text: $(head -5 "$TMP/stats.txt")"

ctl stats --prometheus >"$TMP/metrics.prom" || fail "stats --prometheus exit status"
if "$PROM_PY" "$CHECK_PROM" --require nicemu_up --require nicemu_cdm_fma_put_posts_total \
     --require nicemu_node_attaches_total <"$TMP/metrics.prom"; then
  pass "stats --prometheus is valid exposition text"
else
  fail "stats --prometheus"
fi
grep -q "^nicemu_cdm_fma_put_posts_total{nic=\"20\",attach=\"[0-9]*\",pid=\"$CLIENT_PID\",inst=\"7\",ptag=\"[0-9]*\"} 11$" \
  "$TMP/metrics.prom" && pass "per-CDM series with its labels" || fail "per-CDM series missing"
# The validator itself must refuse broken text.
printf 'nicemu_x_total{nic="1} 3\n' | python3 "$CHECK_PROM" >/dev/null 2>&1 && fail "validator accepted a broken label" ||
  pass "validator refuses a broken label"
printf '# TYPE a counter\na 1\n# TYPE b gauge\nb 2\na{x="1"} 3\n' | python3 "$CHECK_PROM" >/dev/null 2>&1 &&
  fail "validator accepted interleaved families" || pass "validator refuses interleaved families"

ctl top --iterations 2 --interval 0.2 --no-clear >"$TMP/top.txt" 2>&1
[[ $(grep -c '^nicemu top' "$TMP/top.txt") -eq 2 ]] && grep -q "^20 " "$TMP/top.txt" &&
  grep -qE "^  7/[0-9]+ +$CLIENT_PID " "$TMP/top.txt" && pass "top: two frames with the node and the CDM" ||
  fail "top: $(cat "$TMP/top.txt")"

# ---- detach: the CDM entry goes, the totals stay -----------------------------------------
exec 7>&-
wait "$CLIENT_PID"
rc=$?
CLIENT_PID=""
[[ $rc -eq 0 ]] || fail "client exit status $rc"
for _ in $(seq 100); do
  ctl --node 20 stats --json >"$TMP/after.json" || break
  [[ "$(json_get "$TMP/after.json" "len(d['nodes'][0]['cdms'])")" == 0 ]] && break
  sleep 0.05
done
[[ "$(json_get "$TMP/after.json" "len(d['nodes'][0]['cdms'])")" == 0 &&
   "$(json_get "$TMP/after.json" "d['nodes'][0]['totals']['fma_put_posts']")" == 11 &&
   "$(json_get "$TMP/after.json" "d['nodes'][0]['counters']['detaches']")" == 1 ]] &&
  pass "after detach: no CDM entry, totals kept, detaches = 1" || fail "after detach: $(cat "$TMP/after.json")"

# ---- SIGHUP --------------------------------------------------------------------------------
reloads() { ctl --node 20 stats --json >"$TMP/r.json" && json_get "$TMP/r.json" "d['nodes'][0]['counters']['reloads']"; }
wait_log() {  # pattern
  for _ in $(seq 100); do grep -q "$1" "$TMP/daemon20.log" && return 0; sleep 0.05; done
  return 1
}
sed -i 's/^log_level = .*/log_level = "debug"/' "$CFG"
kill -HUP "${DAEMON_PID[20]}"
wait_log "reload: log_level is now debug" && [[ "$(reloads)" == 1 ]] &&
  pass "SIGHUP applies a live setting (log_level) and counts the reload" || fail "SIGHUP live: $(tail -3 "$TMP/daemon20.log")"
sed -i 's/^bte_channels = .*/bte_channels = 3/' "$CFG"
kill -HUP "${DAEMON_PID[20]}"
wait_log "bte_channels changed in .* takes effect only after a restart" &&
  pass "SIGHUP reports a restart-only change" || fail "SIGHUP restart-only: $(tail -3 "$TMP/daemon20.log")"
echo 'this is = = not toml' >>"$CFG"
kill -HUP "${DAEMON_PID[20]}"
wait_log "reload failed, settings unchanged" && ctl --node 20 status >/dev/null &&
  pass "SIGHUP with a broken file: refused, daemon still serves" || fail "SIGHUP broken file"

# ---- a daemon killed outright leaves a stale page ------------------------------------------
kill -KILL "${DAEMON_PID[21]}"
wait "${DAEMON_PID[21]}" 2>/dev/null
unset 'DAEMON_PID[21]'
ctl stats --prometheus >"$TMP/stale.prom" 2>/dev/null
grep -q '^nicemu_up{nic="21"} 0$' "$TMP/stale.prom" && grep -q '^nicemu_up{nic="20"} 1$' "$TMP/stale.prom" &&
  python3 "$CHECK_PROM" <"$TMP/stale.prom" >/dev/null && pass "stale page: nicemu_up 0, still valid text" ||
  fail "stale page: $(grep nicemu_up "$TMP/stale.prom")"

# ---- clean stop removes the page ------------------------------------------------------------
stop_daemon 20
[[ ! -e "$RUNDIR/nic-20.stats" && ! -e "$RUNDIR/nic-20.sock" ]] && pass "SIGTERM removes socket and counter page" ||
  fail "files left after SIGTERM: $(ls "$RUNDIR")"

finish observability
