#!/usr/bin/env python3
"""Lists the functions longer than a limit (default 80 lines, counted from the `fn` line to
the line of its closing brace) in crates/*/src/**/*.rs, tests (`#[cfg(test)]` items such as
`mod tests`) left out. Prints `path:line name lines` for each; exit 1 if there is any.

    python3 scripts/long-functions.py [--limit N] [crates/NAME …]
"""
import argparse
import pathlib
import re
import sys

FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
CFG_TEST = re.compile(r"#\[cfg\(test\)\]")


def raw_string_end(text: str, i: int) -> int:
    """`text[i]` is the `r` of a raw string `r#…"…"#…`: the index just past it, or -1 if
    this `r` does not open one."""
    j = i + 1
    while j < len(text) and text[j] == "#":
        j += 1
    if j >= len(text) or text[j] != '"':
        return -1
    close = '"' + "#" * (j - i - 1)
    end = text.find(close, j + 1)
    return len(text) if end < 0 else end + len(close)


def quoted_end(text: str, i: int, quote: str) -> int:
    """`text[i]` opens a `quote`-delimited literal with backslash escapes: the index just past
    its closing quote."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
        elif text[j] == quote:
            return j + 1
        else:
            j += 1
    return len(text)


def block_comment_end(text: str, i: int) -> int:
    """`text[i:i+2]` is `/*`: the index just past the matching `*/` (they nest in Rust)."""
    depth, j = 0, i
    while j < len(text):
        if text.startswith("/*", j):
            depth += 1
            j += 2
        elif text.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    return len(text)


def char_literal_end(text: str, i: int) -> int:
    """`text[i]` is a `'`: the index just past the char literal it opens, or -1 if it is a
    lifetime or a label (`'a`, `'outer:`)."""
    if text.startswith("\\", i + 1):
        return quoted_end(text, i, "'")
    if i + 2 < len(text) and text[i + 2] == "'" and text[i + 1] != "\n":
        return i + 3
    return -1


def literal_end(text: str, i: int) -> int:
    """The index just past the comment, string or char literal starting at `text[i]`, or -1
    if none starts there."""
    c = text[i]
    prev = text[i - 1] if i > 0 else " "
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text.startswith("/*", i):
        return block_comment_end(text, i)
    if c == '"':
        return quoted_end(text, i, '"')
    if c == "'":
        return char_literal_end(text, i)
    if prev.isalnum() or prev == "_":
        return -1  # inside an identifier: `br"…"` etc. are caught at their first letter
    if c == "r":
        return raw_string_end(text, i)
    if c == "b" and text.startswith("r", i + 1):
        return raw_string_end(text, i + 1)
    if c == "b" and text.startswith('"', i + 1):
        return quoted_end(text, i + 1, '"')
    if c == "b" and text.startswith("'", i + 1):
        return quoted_end(text, i + 1, "'")
    return -1


def blank(text: str) -> str:
    """`text` with everything but its newlines turned into spaces."""
    return re.sub(r"[^\n]", " ", text)


def mask(text: str) -> str:
    """`text` with every comment, string and char literal blanked (newlines kept), so that
    braces and `fn` in them no longer count."""
    out, i = [], 0
    while i < len(text):
        end = literal_end(text, i)
        if end < 0:
            out.append(text[i])
            i += 1
        else:
            out.append(blank(text[i:end]))
            i = end
    return "".join(out)


def body_span(code: str, start: int):
    """The `{`…`}` span of the item whose header starts at `code[start]`: (open, close)
    indices, or None if the header ends with `;` first (a declaration without a body)."""
    depth = 0
    for j in range(start, len(code)):
        c = code[j]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth == 0:
            return None
        elif c == "{":
            return j, matching_brace(code, j)
    return None


def matching_brace(code: str, open_at: int) -> int:
    """The index of the `}` closing the `{` at `code[open_at]` (the end of `code` if none)."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def without_tests(code: str) -> str:
    """`code` with every `#[cfg(test)]` item (such as `mod tests { … }`) blanked."""
    for m in reversed(list(CFG_TEST.finditer(code))):
        span = body_span(code, m.end())
        if span is not None:
            end = span[1] + 1
            code = code[: m.start()] + blank(code[m.start() : end]) + code[end:]
    return code


def long_functions(path: pathlib.Path, limit: int):
    """(line, name, lines) of each function in `path` longer than `limit` lines."""
    code = without_tests(mask(path.read_text()))
    for m in FN.finditer(code):
        span = body_span(code, m.end())
        if span is None:
            continue
        first = code.count("\n", 0, m.start()) + 1
        lines = code.count("\n", m.start(), span[1]) + 1
        if lines > limit:
            yield first, m.group(1), lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=80, help="most lines allowed (80)")
    parser.add_argument("crates", nargs="*", type=pathlib.Path)
    args = parser.parse_args()
    roots = args.crates or sorted(pathlib.Path("crates").iterdir())
    found = 0
    for crate in roots:
        for path in sorted((crate / "src").rglob("*.rs")):
            for line, name, lines in long_functions(path, args.limit):
                found += 1
                print(f"{path}:{line} {name} {lines}")
    if found == 0:
        print(f"no function over {args.limit} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
