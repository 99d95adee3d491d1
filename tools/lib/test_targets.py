#!/usr/bin/env python3
"""Prints the ninja targets that a configured build's tests need, one a line: each test's
program and its declared `depends` (ninja builds what those link). tools/test builds only
these in the sanitizer builds, whose other programs (benchmarks, man pages) no test runs.

    test_targets.py BUILD-DIR [--suite NAME]... [--no-suite NAME]...

The suite options select tests as `meson test` does (a test in any --suite, none in a
--no-suite). A test that runs a program it does not declare finds it missing in such a
build: declare it in the test's `depends`.
"""
import argparse
import json
import os
import sys


def suite_names(test):
    # meson records "project:suite"; the options name the suite alone (as meson test takes it)
    return {s.split(':', 1)[-1] for s in test['suite']}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('build')
    ap.add_argument('--suite', action='append', default=[])
    ap.add_argument('--no-suite', action='append', default=[])
    a = ap.parse_args()
    info = os.path.join(a.build, 'meson-info')
    try:
        with open(os.path.join(info, 'intro-tests.json')) as f:
            tests = json.load(f)
        with open(os.path.join(info, 'intro-targets.json')) as f:
            targets = {t['id']: t for t in json.load(f)}
    except OSError as e:
        sys.exit(f'test_targets.py: {a.build} is not a configured meson build: {e}')
    out = set()
    for t in tests:
        names = suite_names(t)
        if a.suite and not names & set(a.suite):
            continue
        if names & set(a.no_suite):
            continue
        for dep in t['depends']:
            if dep not in targets:
                sys.exit(f'test_targets.py: test {t["name"]} depends on {dep}, not a target of {a.build}')
            for path in targets[dep]['filename']:
                out.add(os.path.relpath(path, os.path.abspath(a.build)))
    print('\n'.join(sorted(out)))


if __name__ == '__main__':
    main()
