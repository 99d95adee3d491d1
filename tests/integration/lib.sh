# Sourced by the shell integration tests: pass/fail counting and stopping the daemons a
# script started (their pids in DAEMON_PID, keyed by NIC address or name).
declare -A DAEMON_PID=()
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }

# SIGTERM to every daemon in DAEMON_PID, two seconds to exit, then SIGKILL.
stop_daemons() {
  local a p
  for a in "${!DAEMON_PID[@]}"; do kill -TERM "${DAEMON_PID[$a]}" 2>/dev/null; done
  for a in "${!DAEMON_PID[@]}"; do
    p=${DAEMON_PID[$a]}
    for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
}
