#!/usr/bin/env bash
# Creates two throw-away Linux users, runs test_two_users (user B against user A's job on
# one daemon) and deletes the users again, on failure too.
# Usage: test_two_users.sh TEST_BINARY     Exit: 0 pass, 1 fail, 77 skip (not root).
set -u
. "$(dirname "$0")/lib.sh"
BIN=${1:?usage: $0 TEST_BINARY}
[[ $(id -u) -eq 0 ]] || skip "creating users needs root"
need_cmd useradd userdel

# Short unique names (useradd allows 32 characters); no home directories, no login.
A=nicemu-a-$$
B=nicemu-b-$$
CREATED=()
test_cleanup() {
  local u
  for u in "${CREATED[@]}"; do
    # Processes of the user would make userdel fail; the test binary kills its children,
    # this is for a crash of the binary itself.
    pkill -KILL -u "$u" 2>/dev/null
    userdel "$u" 2>/dev/null || echo "warning: userdel $u failed" >&2
    getent group "$u" >/dev/null && groupdel "$u" 2>/dev/null
  done
}
test_init test_two_users

for u in "$A" "$B"; do
  useradd --system --no-create-home --user-group --shell /usr/sbin/nologin "$u" || die "useradd $u"
  CREATED+=("$u")
done

TRUST_UID_A=$(id -u "$A") TRUST_GID_A=$(id -g "$A") TRUST_UID_B=$(id -u "$B") TRUST_GID_B=$(id -g "$B") \
  timeout -k 5 90 "$BIN"
