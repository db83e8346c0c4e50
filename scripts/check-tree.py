#!/usr/bin/env python3
"""Checks the shape of the tree, as scripts/test.sh runs it:

- no Rust source file over 600 lines outside tests (integration tests, `tests.rs`
  modules and the loom models may be longer): split such a file by concern;
- no import circle between the modules of a crate: an edge is a `crate::`, `super::`
  or `self::` path (comments and `#[cfg(test)]` code aside) from one module to another
  that is not its ancestor (a child module may use its parent's items).

Exits 1 and says what is wrong, else prints one line and exits 0.
"""
import os
import re
import sys

MAX_LINES = 600
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# Every member of the workspace but the loom models (checked for length only).
CRATES = [
    m
    for m in re.search(r"members\s*=\s*\[([^\]]*)\]", open(os.path.join(ROOT, "Cargo.toml")).read()).group(1)
    .replace('"', "").replace(" ", "").split(",")
    if m and m != "loom-tests"
]


def rust_files(top):
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if x != "target"]
        for f in files:
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def is_test(path):
    rel = os.path.relpath(path, ROOT).split(os.sep)
    return "tests" in rel[:-1] or rel[-1] == "tests.rs" or rel[0] == "loom-tests"


def long_files():
    out = []
    for crate in CRATES + ["loom-tests"]:
        for f in rust_files(os.path.join(ROOT, crate)):
            n = sum(1 for _ in open(f, encoding="utf-8"))
            if n > MAX_LINES and not is_test(f):
                out.append(f"{os.path.relpath(f, ROOT)}: {n} lines (at most {MAX_LINES} outside tests)")
    return out


def module_of(src, f):
    parts = os.path.relpath(f, src)[:-3].split(os.sep)
    if parts[-1] in ("lib", "mod", "main"):
        parts = parts[:-1]
    return tuple(parts)


def edges(src):
    mods = {module_of(src, f): f for f in rust_files(src) if not os.path.relpath(f, src).startswith("bin")}
    graph = {}
    for m, f in mods.items():
        text = open(f, encoding="utf-8").read().split("#[cfg(test)]")[0]
        text = re.sub(r"//.*", "", text)
        targets = set()

        def base_of(head):
            return () if head == "crate" else (m[:-1] if head == "super" else m)

        for path in re.findall(r"\b((?:crate|super|self)(?:::[A-Za-z_]\w*)+)", text):
            parts = path.split("::")
            cur, i = base_of(parts[0]), 1
            while i < len(parts) and parts[i] == "super":
                cur, i = cur[:-1], i + 1
            for p in parts[i:]:
                if cur + (p,) not in mods:
                    break
                cur = cur + (p,)
            targets.add(cur)
        for head, names in re.findall(r"\b(crate|super)::\{([^}]*)\}", text):
            for name in re.split(r"[,\s]+", names):
                t = base_of(head) + (name.split("::")[0],)
                if t in mods:
                    targets.add(t)
        graph[m] = {t for t in targets if t != m and m[: len(t)] != t}
    return graph


def cycles(graph):
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted("::".join(x) or "<crate root>" for x in comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main():
    problems = long_files()
    for crate in CRATES:
        for c in cycles(edges(os.path.join(ROOT, crate, "src"))):
            problems.append(f"{crate}: modules that import each other in a circle: {', '.join(c)}")
    if problems:
        print("tree check failed:\n  " + "\n  ".join(problems))
        return 1
    print(f"tree check: no file over {MAX_LINES} lines outside tests, no import circle in {', '.join(CRATES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
