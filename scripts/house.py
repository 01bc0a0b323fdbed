#!/usr/bin/env python3
"""The house rules of src/ (docs/architecture.md, issue 25), checked on every test run.

  scripts/house.py            check; exit 1 listing every breach not in scripts/house-debt.txt,
                              and every debt entry that no longer breaches (delete it)
  scripts/house.py --list     print every breach, debt or not, one per line (debt file format)

The rules:
  layer    a file includes only headers of its own folder or of a folder below it in LAYERS
  cycle    no include circle between modules (a module is FILE.c with FILE.h)
  func     no function in a .c file longer than MAX_FUNC lines (opening to closing brace)
  file     no .c file longer than MAX_FILE lines
  getenv   only the configuration layer (src/common/config.c) reads the environment
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")
DEBT = os.path.join(ROOT, "scripts", "house-debt.txt")

# Lowest first: a folder may include itself and anything before it, nothing after it.
LAYERS = [
    "common", "event", "metrics", "wire", "net", "store", "cache", "group", "transport",
    "client", "server", "node", "fuse", "lib", "cli",
]
MAX_FUNC = 80
MAX_FILE = 1200
CONFIG_LAYER = {"common/config.c"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
GETENV = re.compile(r"\b(secure_)?getenv\s*\(")


def sources():
    for d, _, files in os.walk(SRC):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, f), SRC)


def strip_comments(text):
    """Comments and string literals blanked (newlines kept), so line numbers stay true."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, lines) of each function: Linux brace style puts a function's braces in column 0."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        if line != "{":
            continue
        k = i - 1
        while k > 0 and lines[k - 1].strip() and not lines[k - 1].rstrip().endswith((";", "}")) \
                and not lines[k - 1].startswith("#"):
            k -= 1
        head = " ".join(lines[k:i])
        m = re.search(r"([A-Za-z_]\w*)\s*\(", head)
        if not m or "=" in head.split("(")[0]:
            continue
        name = m.group(1)
        j = i + 1
        while j < len(lines) and lines[j] != "}":
            j += 1
        found.append((name, j - i + 1))
    return found


def breaches():
    out = []
    graph = {}
    for rel in sources():
        text = open(os.path.join(SRC, rel), encoding="utf-8").read()
        folder = rel.split("/")[0]
        module = os.path.splitext(rel)[0]
        for inc in INCLUDE.findall(text):
            if not os.path.exists(os.path.join(SRC, inc)):
                continue
            tfolder = inc.split("/")[0]
            if folder in LAYERS and tfolder in LAYERS and \
                    LAYERS.index(tfolder) > LAYERS.index(folder):
                out.append(f"layer {rel} -> {inc}")
            target = os.path.splitext(inc)[0]
            if target != module:
                graph.setdefault(module, set()).add(target)
        code = strip_comments(text)
        if rel.endswith(".c"):
            nlines = text.count("\n")
            if nlines > MAX_FILE:
                out.append(f"file {rel}")
            for name, n in functions(code):
                if n > MAX_FUNC:
                    out.append(f"func {rel}:{name}")
        if rel not in CONFIG_LAYER and GETENV.search(code):
            out.append(f"getenv {rel}")
    for scc in cycles(graph):
        out.append("cycle " + " ".join(sorted(scc)))
    return out


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, res, counter = {}, {}, set(), [], [], [0]
    nodes = set(graph) | {t for ts in graph.values() for t in ts}

    def visit(v0):
        work = [(v0, iter(sorted(graph.get(v0, ()))))]
        index[v0] = low[v0] = counter[0]
        counter[0] += 1
        stack.append(v0)
        on.add(v0)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        res.append(comp)
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on:
                low[v] = min(low[v], index[w])

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return res


def main():
    found = breaches()
    if "--list" in sys.argv:
        print("\n".join(found))
        return 0
    debt = set()
    if os.path.exists(DEBT):
        for line in open(DEBT, encoding="utf-8"):
            line = line.strip()
            if line and not line.startswith("#"):
                debt.add(line)
    new = [b for b in found if b not in debt]
    paid = sorted(debt - set(found))
    for b in new:
        print(f"house: breach: {b}")
    for b in paid:
        print(f"house: no longer a breach, delete from scripts/house-debt.txt: {b}")
    print(f"house: {len(found)} breaches, {len(debt)} in the debt list, {len(new)} new, "
          f"{len(paid)} paid")
    return 1 if new or paid else 0


if __name__ == "__main__":
    sys.exit(main())
