#!/usr/bin/env bash
# The reference pages (README.md, CONTRIBUTING.md, docs/*.md, docs/clients/*.md) say what is
# true today; how it got there goes to dated logs in docs/notes/. A page that grows back into
# a log shows it by its dates, its commit hashes and its length, so each page has a budget of
# each. Dates inside a link or path to a dated note (notes/2026-11-27-x.md) do not count.
# performance.md dates each of its tables' runs: its date budget is two per table.
# Usage: check_reference_docs.sh [SOURCE_ROOT]    Exit: 0 every page within budget, 1 otherwise.
set -u
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
exec python3 - "$root" <<'EOF'
import glob, os, re, sys

root = sys.argv[1]
DATES, HASHES, LINES = 10, 2, 750
# Pages with a budget of their own: (dates, hashes, lines); None = the default. 'tables' for
# dates means two per Markdown table of the page.
OWN = {
    'docs/performance.md': ('tables', None, 300),
    'docs/compatibility.md': (None, None, 500),
    'docs/fault-campaigns.md': (None, None, 300),
}

pages = ['README.md', 'CONTRIBUTING.md'] + sorted(
    glob.glob('docs/*.md', root_dir=root) + glob.glob('docs/clients/*.md', root_dir=root))

# An ISO date not part of a dated file name (notes/2026-11-27-performance-history.md).
date_re = re.compile(r'(?<![\w/-])(?:19|20)\d\d-[01]\d-[0-3]\d(?![\w-])')
# A commit hash: 7 to 40 lower-case hex digits standing alone, with a letter and a digit in
# it (so neither 1048576 nor 'deadbeef' nor the ffffffff of 0x8_ffffffff counts).
hash_re = re.compile(r'(?<![\w.:/-])[0-9a-f]{7,40}(?![\w-])')
table_sep = re.compile(r'^\|[-:| ]+\|\s*$')

bad = []
for page in pages:
    path = os.path.join(root, page)
    if not os.path.isfile(path):
        if page == 'CONTRIBUTING.md':
            bad.append(f'{page}: missing')
        continue
    with open(path, encoding='utf-8') as fh:
        lines = fh.read().split('\n')
    if lines and lines[-1] == '':
        lines.pop()
    dates = [d for line in lines for d in date_re.findall(line)]
    hashes = [h for line in lines for h in hash_re.findall(line)
              if re.search('[a-f]', h) and re.search('[0-9]', h)]
    tables = sum(1 for line in lines if table_sep.match(line))
    own = OWN.get(page, (None, None, None))
    date_budget = 2 * tables if own[0] == 'tables' else (own[0] or DATES)
    hash_budget = own[1] if own[1] is not None else HASHES
    line_budget = own[2] or LINES
    for what, n, budget, examples in (('ISO dates', len(dates), date_budget, dates),
                                      ('commit hashes', len(hashes), hash_budget, hashes),
                                      ('lines', len(lines), line_budget, [])):
        if n > budget:
            shown = f" ({', '.join(sorted(set(examples))[:6])}{', ...' if len(set(examples)) > 6 else ''})" if examples else ''
            bad.append(f'{page}: {n} {what}, budget {budget}: {n - budget} over{shown}')

for b in bad:
    print('FAIL:', b, file=sys.stderr)
if bad:
    print('A reference page says what is true today; move the history (dated runs, A/B tables '
          'against commits, superseded figures) to a dated log docs/notes/YYYY-MM-DD-*.md and '
          'link it (CONTRIBUTING.md).', file=sys.stderr)
    sys.exit(1)
print(f'ok: {len(pages)} reference pages within their budgets of dates, commit hashes and lines')
EOF
