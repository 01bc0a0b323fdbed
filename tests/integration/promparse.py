#!/usr/bin/env python3
"""Strict parser for the Prometheus text exposition format 0.0.4 (standard library only).

usage: promparse.py FILE [--expect-label NAME=VALUE]... [--self-test]

Validates every line of FILE and exits 1 with "FILE:LINE: reason" at the first problem:
  - a line is a comment (# HELP NAME TEXT, # TYPE NAME TYPE, or other # text), blank, or a sample
    NAME[{LABELS}] VALUE [TIMESTAMP];
  - names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* (not __*), label
    values are double-quoted with only \\\\, \\" and \\n escapes, no label repeats in one sample;
  - VALUE is a float as Prometheus reads it (including NaN, +Inf, -Inf); TIMESTAMP an integer;
  - TYPE is one of counter, gauge, histogram, summary, untyped, given at most once per family
    and before that family's first sample; HELP at most once per family;
  - a family's samples are contiguous (no family appears twice), no series is repeated, every
    sample has a TYPE (shoal declares all of them), counters are not negative.
With --expect-label, every sample must carry that label with that value.
On success prints one line per sample, "NAME VALUE" (labels dropped), for the shell to grep.
"""
import math
import re
import sys

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
HELP_RE = re.compile(r"(?:[^\\]|\\[\\n])*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|0[xX][0-9a-fA-F]+)")


class ParseError(Exception):
    pass


def parse_float(s):
    if s in ("NaN", "+Inf", "-Inf", "Inf", "+inf", "-inf", "inf", "nan"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    if not FLOAT_RE.fullmatch(s):
        raise ParseError("bad value %r" % s)
    return float(s) if not s.lower().lstrip("+-").startswith("0x") else float(int(s, 16))


def parse_labels(s, i):
    """Parses {a="b",...} starting at s[i] == '{'; returns (dict, index after '}')."""
    assert s[i] == "{"
    i += 1
    labels = {}
    while True:
        if i < len(s) and s[i] == "}":
            return labels, i + 1
        m = LABEL_RE.match(s, i)
        if not m:
            raise ParseError("bad label name at column %d" % (i + 1))
        name = m.group(0)
        if name.startswith("__"):
            raise ParseError("reserved label name %s" % name)
        if name in labels:
            raise ParseError("label %s repeated" % name)
        i = m.end()
        if i >= len(s) or s[i] != "=":
            raise ParseError("expected '=' after label %s" % name)
        i += 1
        if i >= len(s) or s[i] != '"':
            raise ParseError("label %s: value not quoted" % name)
        i += 1
        val = []
        while True:
            if i >= len(s):
                raise ParseError("label %s: unterminated value" % name)
            c = s[i]
            if c == "\\":
                if i + 1 >= len(s) or s[i + 1] not in '\\"n':
                    raise ParseError("label %s: bad escape" % name)
                val.append("\n" if s[i + 1] == "n" else s[i + 1])
                i += 2
                continue
            if c == "\n":
                raise ParseError("label %s: raw newline" % name)
            if c == '"':
                i += 1
                break
            val.append(c)
            i += 1
        labels[name] = "".join(val)
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        if i < len(s) and s[i] == "}":
            continue
        raise ParseError("expected ',' or '}' after label %s" % name)


def family_of(name, types):
    """The family a sample belongs to: histogram/summary samples carry suffixes."""
    for suf in ("_bucket", "_sum", "_count"):
        if name.endswith(suf):
            base = name[: -len(suf)]
            if types.get(base) in ("histogram", "summary"):
                return base
    return name


def parse(text):
    """Returns a list of (name, labels, value). Raises ParseError with .line set."""
    types, helps, samples = {}, {}, []
    seen_series = set()
    done_families = set()
    current = None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif text:
        raise ParseError("last line does not end with a newline")
    for no, line in enumerate(lines, 1):
        try:
            if line.strip() == "":
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                    if len(parts) < 3 or not NAME_RE.fullmatch(parts[2]):
                        raise ParseError("%s without a valid metric name" % parts[1])
                    name = parts[2]
                    if name in done_families or (current and current != name and name in types):
                        raise ParseError("family %s appears twice" % name)
                    if parts[1] == "TYPE":
                        if len(parts) != 4 or parts[3] not in TYPES:
                            raise ParseError("bad TYPE line")
                        if name in types:
                            raise ParseError("second TYPE for %s" % name)
                        if current == name:
                            raise ParseError("TYPE for %s after its samples" % name)
                        types[name] = parts[3]
                    else:
                        if name in helps:
                            raise ParseError("second HELP for %s" % name)
                        text_ = parts[3] if len(parts) == 4 else ""
                        if not HELP_RE.fullmatch(text_):
                            raise ParseError("bad escape in HELP")
                        helps[name] = text_
                continue
            m = NAME_RE.match(line)
            if not m:
                raise ParseError("sample without a valid metric name")
            name = m.group(0)
            i = m.end()
            labels = {}
            if i < len(line) and line[i] == "{":
                labels, i = parse_labels(line, i)
            rest = line[i:]
            if not rest.startswith(" "):
                raise ParseError("expected a space before the value")
            fields = rest.split(" ")[1:]
            fields = [f for f in fields if f != ""] if rest.strip() else []
            if not 1 <= len(fields) <= 2:
                raise ParseError("expected VALUE [TIMESTAMP]")
            value = parse_float(fields[0])
            if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
                raise ParseError("bad timestamp %r" % fields[1])
            fam = family_of(name, types)
            if fam not in types:
                raise ParseError("sample %s before (or without) its TYPE" % name)
            if fam != current:
                if fam in done_families:
                    raise ParseError("family %s appears twice" % fam)
                if current:
                    done_families.add(current)
                current = fam
            key = (name, tuple(sorted(labels.items())))
            if key in seen_series:
                raise ParseError("series %s%s repeated" % (name, labels))
            seen_series.add(key)
            if types[fam] == "counter" and (value < 0 or math.isnan(value)):
                raise ParseError("counter %s is %r" % (name, value))
            samples.append((name, labels, value))
        except ParseError as e:
            e.line = no
            raise
    return samples


def self_test():
    good = (
        '# HELP a_total Things, with \\\\ and \\n.\n# TYPE a_total counter\n'
        'a_total{x="1",y="q\\"uote"} 3\na_total{x="2"} 4 1700000000\n'
        "# TYPE b gauge\nb -1.5e-3\nb{z=\"\"} NaN\n# TYPE h histogram\n"
        'h_bucket{le="+Inf"} 1\nh_sum 2\nh_count 1\n'
    )
    assert len(parse(good)) == 7
    bad = [
        "# TYPE a counter\na 1\n# TYPE b gauge\nb 1\na 2\n",  # family twice
        "a 1\n",  # no TYPE
        "# TYPE a counter\n# TYPE a counter\na 1\n",
        "# TYPE a counter\na -1\n",
        '# TYPE a gauge\na{x="1} 1\n',
        '# TYPE a gauge\na{x="\\t"} 1\n',
        "# TYPE a gauge\na 1 2 3\n",
        "# TYPE a gauge\na one\n",
        '# TYPE a gauge\na{x="1",x="2"} 1\n',
        '# TYPE a gauge\na{1x="1"} 1\n',
        "# TYPE a gauge\na 1\na 2\n",
        "# TYPE a gauge\na 1",
        "# TYPE a gaug\na 1\n",
        "# TYPE a gauge\na1\n",
        "# HELP a x\\y\n# TYPE a gauge\na 1\n",  # bad HELP escape
    ]
    for b in bad:
        try:
            parse(b)
        except ParseError:
            continue
        raise AssertionError("accepted: %r" % b)
    print("promparse self-test ok")


def main(argv):
    if "--self-test" in argv:
        self_test()
        return 0
    path, expect = None, {}
    it = iter(argv[1:])
    for a in it:
        if a == "--expect-label":
            k, _, v = next(it).partition("=")
            expect[k] = v
        elif path is None:
            path = a
        else:
            print("usage: promparse.py FILE [--expect-label NAME=VALUE]...", file=sys.stderr)
            return 2
    if path is None:
        print("usage: promparse.py FILE [--expect-label NAME=VALUE]...", file=sys.stderr)
        return 2
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        samples = parse(text)
        for name, labels, _ in samples:
            for k, v in expect.items():
                if labels.get(k) != v:
                    raise ParseError("sample %s has %s=%r, expected %r" % (name, k, labels.get(k), v))
    except ParseError as e:
        print("%s:%s: %s" % (path, getattr(e, "line", "?"), e), file=sys.stderr)
        return 1
    if not samples:
        print("%s: no samples" % path, file=sys.stderr)
        return 1
    out = []
    for name, _, value in samples:
        out.append("%s %r" % (name, value))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
