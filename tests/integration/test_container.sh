#!/usr/bin/env bash
# nicemu's container image and the CI recipe in it (docs/containers.md, docs/ci.md): the
# image's default command (the demo, daemons started by its entry point) must pass; then
# tools/ci-action-run runs action.yml and the example client workflow
# (examples/ci/gni-client.yml: build with module load PrgEnv-gnu + cc, tests with aprun on 2
# emulated nodes, then with pkg-config and nicemu-run: two verified runs) step by step in
# the image, as written.
# The image is not built here (tools/package and mmdebstrap take many minutes): the test
# uses the image `tools/container build` left (TAG, default nicemu:latest) and skips
# without podman or without that image.
# Usage: test_container.sh SOURCE_ROOT [TAG]     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
ROOT=${1:?usage: $0 SOURCE_ROOT [TAG]}
TAG=${2:-nicemu:latest}
need_cmd podman python3
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml needed (./tools/setup --container)"
podman image exists "$TAG" || skip "no image $TAG (tools/container build)"
test_init test_container

if timeout -k 5 300 "$ROOT/tools/container" run --tag "$TAG" >"$TMP/demo.log" 2>&1 &&
   grep -qx 'nicemu container demo: passed' "$TMP/demo.log"; then
  pass "podman run $TAG: the demo ($(grep -o 'ran in [0-9.]* s' "$TMP/demo.log"))"
else
  fail "podman run $TAG: the demo"; show_log "$TMP/demo.log"
fi

# The action installs the .debs the image was built from when they are here (its `debs`
# path, the same dpkg step a runner takes), else uses what the image holds.
with=(--with install=none)
ls "$ROOT"/build-deb/nicemu_*.deb >/dev/null 2>&1 && with=(--with install=debs --with debs=/debs)
if timeout -k 5 300 "$ROOT/tools/ci-action-run" --image "$TAG" "${with[@]}" "$ROOT/examples/ci/gni-client.yml" \
     >"$TMP/ci.log" 2>&1 &&
   grep -q 'gni-client.yml: every step passed' "$TMP/ci.log" &&
   [ "$(grep -c 'demo passed: every token arrived in order, every byte verified' "$TMP/ci.log")" -eq 2 ]; then
  pass "tools/ci-action-run action.yml + examples/ci/gni-client.yml (${with[*]})"
else
  fail "tools/ci-action-run examples/ci/gni-client.yml"; show_log "$TMP/ci.log"
fi
finish container
