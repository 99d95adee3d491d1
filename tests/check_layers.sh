#!/usr/bin/env bash
# The layers of nicemu/ hold (docs/architecture.md): the daemon's control layer
# (nicemu/daemon/control/) sits above its engines and below the node, so no file in control/
# includes node.h, and no engine folder (cdm/ bte/ remote/ transport/ ce/) includes control/
# or node.h; nothing under nicemu/ includes a client library's header (ugni/, dmapp/, pmi/,
# udreg/, tools/), which sit above it.
# Usage: check_layers.sh [SOURCE_ROOT] [--graph]
#   --graph also prints which folder of nicemu/ includes which.
# Exit: 0 the layers hold, 1 otherwise (each offending include named with its file and line).
set -u
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
exec python3 - "$root" "${2:-}" <<'EOF'
import os, re, sys
from collections import defaultdict

root, graph = sys.argv[1], sys.argv[2] == '--graph'
engines = ('cdm', 'bte', 'remote', 'transport', 'ce')
client_dirs = ('ugni', 'dmapp', 'pmi', 'udreg', 'tools')
# The client libraries' public headers, included by bare name (gni_pub.h, dmapp.h, ...).
client_headers = {}
for d in client_dirs:
    inc = os.path.join(root, d, 'include')
    if os.path.isdir(inc):
        for n in os.listdir(inc):
            client_headers[n] = d

def folder(path):
    # nicemu/daemon/control/x.h -> daemon/control; nicemu/daemon/node.h -> daemon; nicemu/abi/x.h -> abi
    parts = path.split('/')[1:-1]
    return '/'.join(parts[:2]) if parts[:1] == ['daemon'] else (parts[0] if parts else '.')

include = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
errors, edges = [], defaultdict(set)
for d, dirs, names in os.walk(os.path.join(root, 'nicemu')):
    dirs.sort()
    for n in sorted(names):
        if not n.endswith(('.h', '.hpp', '.c', '.cpp', '.cc', '.in')):
            continue
        path = os.path.relpath(os.path.join(d, n), root)
        here = folder(path)
        with open(os.path.join(root, path), errors='replace') as f:
            lines = f.read().split('\n')
        for no, line in enumerate(lines, 1):
            m = include.match(line)
            if not m:
                continue
            target = m.group(2)
            where = f'{path}:{no}: {line.strip()}'
            top = target.split('/')[0]
            if top in client_dirs or (target in client_headers and '/' not in target):
                errors.append(f'{where}: nicemu/ is below the client libraries and tools; it may not include '
                              f'{client_headers.get(target, top)}/')
            if not target.startswith('nicemu/'):
                continue
            there = folder(target)
            if there != here:
                edges[here].add(there)
            if here == 'daemon/control' and target == 'nicemu/daemon/node.h':
                errors.append(f'{where}: control/ is the layer below the node; a handler gets its services '
                              f'passed in, it does not include node.h')
            if here in tuple('daemon/' + e for e in engines) and (
                    target == 'nicemu/daemon/node.h' or target.startswith('nicemu/daemon/control/')):
                errors.append(f'{where}: the engines sit below control/ and the node; an engine may not include '
                              f'{target}')

if graph:
    for src in sorted(edges):
        print(f'{src} -> {" ".join(sorted(edges[src]))}')
for e in errors:
    print(e, file=sys.stderr)
if errors:
    print(f'check_layers: {len(errors)} include(s) cross the layers the wrong way', file=sys.stderr)
    sys.exit(1)
print('check_layers: the layers of nicemu/ hold')
EOF
