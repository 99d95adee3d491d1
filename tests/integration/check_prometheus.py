#!/usr/bin/env python3
"""Checks that standard input is valid Prometheus text exposition format (version 0.0.4),
as a node exporter's textfile collector requires: metric and label names, label-value
escapes, numeric values, at most one HELP and TYPE per family and before its samples,
families not interleaved, no duplicate series, counters not negative.
Also parses it with prometheus_client when that is installed.
Usage: check_prometheus.py [--require NAME]... < metrics.prom    Exit: 0 valid, 1 not."""
import math
import re
import sys

METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_labels(s, pos, line_no):
    """Parses {a="b",...} starting at s[pos] == '{'; returns (frozenset of pairs, next pos)."""
    pairs = []
    pos += 1
    while True:
        if pos < len(s) and s[pos] == "}":
            return frozenset(pairs), pos + 1
        m = LABEL.match(s, pos)
        if not m:
            raise ValueError(f"line {line_no}: bad label name at column {pos + 1}")
        name = m.group(0)
        if name.startswith("__"):
            raise ValueError(f"line {line_no}: label name {name} is reserved")
        pos = m.end()
        if s[pos:pos + 2] != '="':
            raise ValueError(f"line {line_no}: expected =\" after label {name}")
        pos += 2
        value = []
        while True:
            if pos >= len(s):
                raise ValueError(f"line {line_no}: unterminated label value")
            c = s[pos]
            if c == "\\":
                nxt = s[pos + 1:pos + 2]
                if nxt not in ("\\", '"', "n"):
                    raise ValueError(f"line {line_no}: bad escape \\{nxt} in label value")
                value.append("\n" if nxt == "n" else nxt)
                pos += 2
            elif c == '"':
                pos += 1
                break
            elif c == "\n":
                raise ValueError(f"line {line_no}: newline in label value")
            else:
                value.append(c)
                pos += 1
        if any(p[0] == name for p in pairs):
            raise ValueError(f"line {line_no}: label {name} given twice")
        pairs.append((name, "".join(value)))
        if pos < len(s) and s[pos] == ",":
            pos += 1
        elif pos < len(s) and s[pos] == "}":
            continue
        else:
            raise ValueError(f"line {line_no}: expected , or }} after label {name}")


def parse_value(text, line_no):
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"line {line_no}: value {text!r} is not a number") from None


def family_of(name, types):
    """The family a sample belongs to (histogram/summary samples carry suffixes)."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
            return base
    return name


def check(text):
    if text and not text.endswith("\n"):
        raise ValueError("the last line does not end with a newline")
    types, helps, series = {}, set(), set()
    seen_families, current = set(), None
    samples = 0
    for no, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                if len(parts) < 3 or not METRIC.fullmatch(parts[2]):
                    raise ValueError(f"line {no}: {parts[1]} without a valid metric name")
                name = parts[2]
                if name in seen_families and name != current:
                    raise ValueError(f"line {no}: {parts[1]} for {name} after its samples")
                if parts[1] == "HELP":
                    if name in helps:
                        raise ValueError(f"line {no}: second HELP for {name}")
                    helps.add(name)
                    help_text = parts[3] if len(parts) > 3 else ""
                    if re.search(r"\\[^\\n]", help_text.replace("\\\\", "")):
                        raise ValueError(f"line {no}: bad escape in HELP of {name}")
                else:
                    if name in types:
                        raise ValueError(f"line {no}: second TYPE for {name}")
                    if len(parts) < 4 or parts[3] not in TYPES:
                        raise ValueError(f"line {no}: bad TYPE for {name}")
                    types[name] = parts[3]
            continue
        if not line.strip():
            raise ValueError(f"line {no}: empty line")
        m = METRIC.match(line)
        if not m:
            raise ValueError(f"line {no}: bad metric name")
        name, pos = m.group(0), m.end()
        labels = frozenset()
        if pos < len(line) and line[pos] == "{":
            labels, pos = parse_labels(line, pos, no)
        rest = line[pos:].split(" ")
        if not rest or rest[0] != "" or len(rest) not in (2, 3):
            raise ValueError(f"line {no}: expected ' value [timestamp]' after the series")
        value = parse_value(rest[1], no)
        if len(rest) == 3 and not re.fullmatch(r"-?[0-9]+", rest[2]):
            raise ValueError(f"line {no}: bad timestamp")
        fam = family_of(name, types)
        if fam != current:
            if fam in seen_families:
                raise ValueError(f"line {no}: samples of {fam} are not contiguous")
            seen_families.add(fam)
            current = fam
        if types.get(fam) == "counter" and not (value >= 0 or math.isnan(value)):
            raise ValueError(f"line {no}: counter {name} is negative")
        key = (name, labels)
        if key in series:
            raise ValueError(f"line {no}: duplicate series {name}{dict(labels)}")
        series.add(key)
        samples += 1
    return samples, {n for n, _ in series}


def main():
    required = []
    args = sys.argv[1:]
    while args:
        if args[0] == "--require" and len(args) > 1:
            required.append(args[1])
            args = args[2:]
        else:
            print(__doc__, file=sys.stderr)
            return 2
    text = sys.stdin.read()
    try:
        samples, names = check(text)
    except ValueError as e:
        print(f"invalid exposition text: {e}", file=sys.stderr)
        return 1
    missing = [r for r in required if r not in names]
    if missing:
        print(f"missing metrics: {', '.join(missing)}", file=sys.stderr)
        return 1
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        parsed = "prometheus_client not installed"
    else:
        try:
            n = sum(len(f.samples) for f in text_string_to_metric_families(text))
        except Exception as e:  # the library raises plain ValueError and others
            print(f"prometheus_client rejects it: {e}", file=sys.stderr)
            return 1
        parsed = f"prometheus_client parsed {n} samples"
    print(f"valid: {samples} samples in {len({n for n in names})} series names ({parsed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
