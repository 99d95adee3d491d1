#!/usr/bin/env bash
# The up-front check of tools that run jobs as throw-away users (tools/lib/user_access.py,
# called by tools/soak and tools/chaos after they create their users): a build directory
# below a root-owned 0700 directory is refused at once, naming that directory and the
# chmod that fixes it; once it is opened, the same paths pass. Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || skip "switching users needs root"
need_cmd setpriv python3
id -u nobody >/dev/null 2>&1 || skip "no user nobody"
CHECK=$(cd "$(dirname "$0")/../.." && pwd)/tools/lib/user_access.py
test_init test_user_access
# TMP stands in for root's home: mktemp makes it 0700, owned by root.
chmod 0700 "$TMP"
mkdir -p "$TMP/build/bin" "$TMP/out"
cp /bin/true "$TMP/build/bin/prog"
chmod 0755 "$TMP/build" "$TMP/build/bin" "$TMP/build/bin/prog" "$TMP/out"

capture closed 30 python3 "$CHECK" --user nobody --exec "$TMP/build/bin/prog" --dir "$TMP/out"
if expect_rc closed 1; then
  if grep -qF "cannot enter $TMP (mode 0700" "$TMP/closed.err" && grep -qF "chmod o+x $TMP\`" "$TMP/closed.err" &&
    [[ $(grep -c "cannot enter $TMP " "$TMP/closed.err") -eq 1 ]]; then
    pass "a 0700 root directory above the build and output is named once, with its fix"
  else
    fail "the refusal does not name $TMP and its fix"
    show closed
  fi
fi

# A file the user may reach but not run is named itself.
chmod 0711 "$TMP"
chmod 0700 "$TMP/build/bin/prog"
capture noexec 30 python3 "$CHECK" --user nobody --exec "$TMP/build/bin/prog" --dir "$TMP/out"
if expect_rc noexec 1; then
  if grep -qF "cannot execute $TMP/build/bin/prog (mode 0700" "$TMP/noexec.err" &&
    ! grep -qF "$TMP/out" "$TMP/noexec.err"; then
    pass "a program the user cannot run is named, and only it"
  else
    fail "the refusal does not name the program alone"
    show noexec
  fi
fi

chmod 0755 "$TMP/build/bin/prog"
capture open 30 python3 "$CHECK" --user nobody --exec "$TMP/build/bin/prog" --dir "$TMP/out"
expect_rc open 0 && pass "reachable paths pass"
finish test_user_access
