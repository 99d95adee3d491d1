#!/usr/bin/env bash
# docs/configuration.md must be what the parameter table renders today (tools/gen-docs).
# Usage: check_configuration_doc.sh NICEMU_BINARY DOC     Exit: 0 current, 1 stale.
set -u
if ! diff -u "$2" <("$1" --help-config=markdown); then
  echo "FAIL: $2 is stale: run tools/gen-docs and commit the result" >&2
  exit 1
fi
echo "ok: $2 matches the parameter table"
