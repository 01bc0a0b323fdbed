#!/usr/bin/python3
"""Consistency checks of the operations kit under deploy/ (Debian's python3 and python3-yaml).

usage: deploy_check.py check SRC_DIR OUT_RULES
       deploy_check.py names SRC_DIR             the metric names the kit uses, one a line
       deploy_check.py exec UNIT ENV_FILE        the ExecStart of a systemd UNIT with the
                                                 variables of ENV_FILE expanded as systemd does
                                                 (${X}: one word, $X: split on spaces), as
                                                 NUL-terminated words

  - the Grafana dashboard is valid JSON: unique panel ids, panels inside the 24-column grid,
    every query on the dashboard's data source variable;
  - every metric that a dashboard query, a template variable or a rule expression names exists:
    a name of the metrics table (src/metrics/metrics.h, with the suffixes the exporters add),
    a process_* figure, `up`, or a recording rule of shoal.rules.yml;
  - every alert has a promtool test case (shoal.rules.test.yml) and a line in
    docs/operations.md;
  - OUT_RULES receives every dashboard query as a recording rule (Grafana variables replaced),
    for `promtool check rules` to parse.
Prints what it checked; exits 1 with one line per problem.
"""
import json
import re
import sys

import yaml

HIST_SUFFIXES = ("_tp50", "_tp90", "_tp99", "_max", "_count", "_sum", "_bucket")
PROCESS = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_threads",
           "process_open_fds")
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "inf", "nan"}
LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

problems = []


def table_names(header):
    """Exported metric names of the X(id, KIND, help) table in metrics.h."""
    names = set()
    for name, kind in re.findall(r"X\(\s*([a-zA-Z0-9_]+),\s*(COUNTER|GAUGE|HIST)\b", header):
        if kind == "HIST":
            names.update(name + s for s in HIST_SUFFIXES)
        else:
            names.add(name)
    return names


def metric_names(expr):
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label
    names of by/on/... lists, or inside label matchers, ranges and strings."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = LABEL_LIST.sub(" ", e)
    e = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", " ", e)
    out = set()
    for m in IDENT.finditer(e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue
        out.add(word)
    return out


def grafana_vars(expr):
    return (expr.replace("$__rate_interval", "1m").replace("${cache_group}", ".*")
            .replace("$cache_group", ".*").replace("${instance}", ".*")
            .replace("$instance", ".*"))


def exec_line(unit, env_file):
    env = {}
    for line in open(env_file):
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            env[k.strip()] = v.strip()
    lines = [l for l in open(unit) if l.startswith("ExecStart=")]
    if len(lines) != 1:
        raise SystemExit("%s: %d ExecStart lines" % (unit, len(lines)))
    words = []
    for w in lines[0][len("ExecStart="):].split():
        m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", w)
        if m:
            words.append(env.get(m.group(1), ""))
            continue
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            words.extend(env.get(m.group(1), "").split())
            continue
        if "$" in w:
            raise SystemExit("%s: cannot expand %r" % (unit, w))
        words.append(w)
    sys.stdout.write("".join(w + "\0" for w in words))
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "exec":
        return exec_line(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 3 and sys.argv[1] == "names":
        src, out_rules = sys.argv[2], None
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        src, out_rules = sys.argv[2], sys.argv[3]
    else:
        print(__doc__)
        return 2
    known = table_names(open(src + "/src/metrics/metrics.h").read())
    known.update(PROCESS)
    known.add("up")
    if len(known) < 50:
        problems.append("metrics.h: only %d names parsed" % len(known))

    rules = yaml.safe_load(open(src + "/deploy/prometheus/shoal.rules.yml"))
    records, alerts, exprs = set(), [], []
    for g in rules["groups"]:
        for r in g["rules"]:
            if "record" in r:
                records.add(r["record"])
            else:
                alerts.append(r["alert"])
            exprs.append(("rule %s" % r.get("record", r.get("alert")), r["expr"]))
    known |= records

    dash = json.load(open(src + "/deploy/grafana/shoal.json"))
    ids, queries = set(), []
    for p in dash["panels"]:
        if p["id"] in ids:
            problems.append("dashboard: panel id %d repeated" % p["id"])
        ids.add(p["id"])
        gp = p["gridPos"]
        if gp["x"] < 0 or gp["w"] < 1 or gp["x"] + gp["w"] > 24:
            problems.append("dashboard: panel %r outside the grid" % p["title"])
        if p["type"] == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append("dashboard: panel %r not on ${datasource}" % p["title"])
        if not p.get("targets"):
            problems.append("dashboard: panel %r has no query" % p["title"])
        for t in p.get("targets", []):
            queries.append(("panel %r" % p["title"], t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_]+)\)", v["definition"])
        if not m:
            problems.append("dashboard: variable %s: %s" % (v["name"], v["definition"]))
            continue
        queries.append(("variable %s" % v["name"], m.group(1)))

    used = set()
    for where, expr in exprs + queries:
        names = metric_names(expr)
        if not names:
            problems.append("%s: no metric in %r" % (where, expr))
        for n in sorted(names - known):
            problems.append("%s: unknown metric %s" % (where, n))
        used |= names

    if out_rules is None:
        print("\n".join(sorted(used)))
        return 1 if problems else 0

    tests = open(src + "/deploy/prometheus/shoal.rules.test.yml").read()
    ops = open(src + "/docs/operations.md").read()
    for a in alerts:
        if "alertname: %s" % a not in tests:
            problems.append("alert %s has no promtool test" % a)
        if a not in ops:
            problems.append("alert %s is not in docs/operations.md" % a)

    with open(out_rules, "w") as f:
        rec = [{"record": "dashboard:q%d" % i, "expr": grafana_vars(e)}
               for i, (_, e) in enumerate(queries)]
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rec}]}, f)

    for p in problems:
        print("deploy: " + p)
    print("  %d dashboard queries, %d rule expressions, %d alerts; %d metric names used, all "
          "known" % (len(queries), len(exprs), len(alerts), len(used)) if not problems else
          "  %d problems" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
