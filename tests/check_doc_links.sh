#!/usr/bin/env bash
# Every relative Markdown link in the tree's *.md files must name an existing file (and, for a
# link into a Markdown page, an existing heading), and every "docs/<page>.md" path written in
# the tree's sources, scripts and pages must exist: pages move, and the pointers to them rot.
# Usage: check_doc_links.sh [SOURCE_ROOT]     Exit: 0 all resolve, 1 otherwise.
set -u
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
exec python3 - "$root" <<'EOF'
import os, re, subprocess, sys

root = sys.argv[1]
try:
    files = subprocess.run(['git', '-C', root, 'ls-files'], capture_output=True, text=True,
                           check=True).stdout.split('\n')
except (OSError, subprocess.CalledProcessError):
    # Not a git checkout (a source tarball): walk it, skipping build trees.
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(('.', 'build', 'obj-'))]
        files += [os.path.relpath(os.path.join(d, n), root) for n in names]
files = [f for f in files if f and os.path.isfile(os.path.join(root, f))]

def slug(title):
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens.
    title = re.sub(r'[`*_]', '', title.strip().lower())
    title = re.sub(r'[^\w\- ]', '', title)
    return title.replace(' ', '-')

anchors = {}
def anchors_of(path):
    if path not in anchors:
        seen, out = {}, set()
        in_code = False
        with open(path, encoding='utf-8') as fh:
            for line in fh:
                if line.startswith('```'):
                    in_code = not in_code
                m = None if in_code else re.match(r'#{1,6} (.*)', line)
                if m:
                    s = slug(m.group(1))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    out.add(s if n == 0 else f'{s}-{n}')
        anchors[path] = out
    return anchors[path]

bad = []
link = re.compile(r'\]\(([^)\s]+)\)')
for f in files:
    if not f.endswith('.md'):
        continue
    path = os.path.join(root, f)
    in_code = False
    with open(path, encoding='utf-8') as fh:
        for no, line in enumerate(fh, 1):
            if line.startswith('```'):
                in_code = not in_code
            if in_code:
                continue
            for target in link.findall(line):
                if re.match(r'[a-z]+:', target):
                    continue  # http:, https:, mailto:
                name, _, frag = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(path), name)) if name else path
                if not os.path.exists(dest):
                    bad.append(f'{f}:{no}: link to missing {target}')
                elif frag and dest.endswith('.md') and frag not in anchors_of(dest):
                    bad.append(f'{f}:{no}: no heading for #{frag} in {os.path.relpath(dest, root)}')

mention = re.compile(r'(?<![\w/.-])docs/[\w./-]+\.md')
for f in files:
    if f.startswith(('debian/changelog',)) or f.endswith(('.png', '.gz', '.bin')):
        continue
    try:
        with open(os.path.join(root, f), encoding='utf-8') as fh:
            text = fh.read()
    except (UnicodeDecodeError, OSError):
        continue
    for no, line in enumerate(text.split('\n'), 1):
        for p in mention.findall(line):
            if not os.path.exists(os.path.join(root, p)):
                bad.append(f'{f}:{no}: names missing {p}')

for b in bad:
    print('FAIL:', b, file=sys.stderr)
if bad:
    sys.exit(1)
print(f'ok: the links of {sum(f.endswith(".md") for f in files)} Markdown files and every docs/*.md path resolve')
EOF
