#!/usr/bin/env python3
"""Lists module dependency cycles inside each crate: module A uses module B when A's code
(not its comments or tests) names `crate::B`. Exit 1 if a crate has a cycle.

    python3 scripts/module-cycles.py [crates/NAME …]
"""
import pathlib
import re
import sys


def modules(src: pathlib.Path) -> dict:
    mods = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "mod":
            parts = parts[:-1]
        if parts in (["lib"], ["main"]) or not parts:
            continue
        top = parts[0]
        mods.setdefault(top, "")
        text = f.read_text()
        # Tests may use anything; a cycle is about the code itself.
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
        # Comments name modules without using them.
        text = re.sub(r"//[^\n]*", "", text)
        mods[top] += text
    return mods


def deps(mods: dict) -> dict:
    out = {}
    for name, text in mods.items():
        used = set()
        for m in re.finditer(r"\bcrate::(\w+)", text):
            used.add(m.group(1))
        # `use crate::{a, b::c}` groups
        for g in re.finditer(r"\bcrate::\{([^}]*)\}", text):
            for item in re.split(r"[,\s]+", g.group(1)):
                used.add(item.split("::")[0])
        out[name] = {u for u in used if u in mods and u != name}
    return out


def cycles(graph: dict) -> list:
    found, index, low, stack, on, counter = [], {}, {}, [], set(), [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def main() -> int:
    roots = [pathlib.Path(a) for a in sys.argv[1:]] or sorted(pathlib.Path("crates").iterdir())
    bad = 0
    for crate in roots:
        src = crate / "src"
        if not src.is_dir():
            continue
        for comp in cycles(deps(modules(src))):
            bad += 1
            print(f"{crate.name}: modules in a cycle: {' <-> '.join(comp)}")
    if bad == 0:
        print("no module cycles")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
