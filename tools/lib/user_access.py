#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Can a throw-away job user reach the files it will run and the directories it will use?

Tools and tests that run jobs as other users (tools/soak, tools/chaos, the two-user and
DRC tests) would otherwise fail job by job, with the reason only in a job log (Hydra's
"Permission denied" for a build in root's 0700 home directory). This checks up front, as
the user (setpriv), and names the path component that blocks access and what to do.

  user_access.py --user USER [--clear-groups] [--exec PATH]... [--dir PATH]...
      Exit 0 when USER can execute every --exec file and enter and read every --dir
      directory; 1 with one line per blocked path on stderr; 2 when the check cannot run.
      --clear-groups: as USER's uid and primary group only (setpriv --clear-groups), for
      callers that run their jobs so; by default with USER's groups (--init-groups).
"""
import argparse
import os
import pwd
import subprocess
import sys


def _as_user(user, groups, *test_args):
    """True when `test *test_args` succeeds as `user` (its uid and primary gid; its other
    groups too unless `groups` is "clear")."""
    try:
        gid = pwd.getpwnam(user).pw_gid  # its primary group, whatever that group is named
    except KeyError:
        raise RuntimeError(f"no user {user}") from None
    # `test` answers 3 for "no" so that setpriv's own failures (1) are not read as a refusal.
    r = subprocess.run(["setpriv", "--reuid", user, "--regid", str(gid), "--clear-groups" if groups == "clear" else "--init-groups", "sh", "-c",
                        'if test "$@"; then exit 0; else exit 3; fi', "sh", *test_args],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode not in (0, 3):
        raise RuntimeError(f"setpriv as {user} failed (exit {r.returncode}): {r.stderr.strip()}")
    return r.returncode == 0


def _mode(path):
    try:
        st = os.stat(path)
    except OSError as e:
        return f"({e.strerror})"
    return f"(mode {st.st_mode & 0o7777:04o}, owner uid {st.st_uid})"


def blocked(user, path, kind, groups="init", closed=None):
    """None when `user` can use `path` as `kind` ("exec": run the file; "dir": enter and
    list the directory), else a sentence naming the first component that stops it and
    the fix. One setpriv when access works; the walk only when it does not."""
    path = os.path.abspath(path)
    want = ["-x", path] if kind == "exec" else ["-x", path, "-a", "-r", path]
    if _as_user(user, groups, *want):
        return None
    # Walk from the root: the first directory the user cannot enter is the usual cause.
    parts = path.split(os.sep)[1:]
    prefix = ""
    for p in parts[:-1]:
        prefix += os.sep + p
        if not _as_user(user, groups, "-x", prefix):
            if closed is not None:
                closed.add(prefix)
            return (f"user {user} cannot enter {prefix} {_mode(prefix)}, so it cannot reach {path}: "
                    f"run `chmod o+x {prefix}`, or put the build and output directories where every user "
                    f"can enter")
    what = "execute" if kind == "exec" else "enter and read"
    fix = "chmod o+x" if kind == "exec" else "chmod o+rx"
    return (f"user {user} cannot {what} {path} {_mode(path)}: run `{fix} {path}`, or use a build and "
            f"output directory other users can read")


def check(user, execs=(), dirs=(), groups="init"):
    """The sentences for the blocked paths (empty when all are reachable); one for each
    closed directory, not one for every path below it."""
    out, closed = [], set()
    for p, kind in [(e, "exec") for e in execs] + [(d, "dir") for d in dirs]:
        p = os.path.abspath(p)
        if any(p.startswith(c + os.sep) for c in closed):
            continue
        m = blocked(user, p, kind, groups, closed)
        if m:
            out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--user", required=True)
    ap.add_argument("--clear-groups", action="store_true")
    ap.add_argument("--exec", dest="execs", action="append", default=[], metavar="PATH")
    ap.add_argument("--dir", dest="dirs", action="append", default=[], metavar="PATH")
    a = ap.parse_args()
    try:
        msgs = check(a.user, a.execs, a.dirs, "clear" if a.clear_groups else "init")
    except (RuntimeError, OSError) as e:
        print(f"user_access: {e}", file=sys.stderr)
        return 2
    for m in msgs:
        print(f"user_access: {m}", file=sys.stderr)
    return 1 if msgs else 0


if __name__ == "__main__":
    sys.exit(main())
