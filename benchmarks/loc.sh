#!/usr/bin/env bash
# Production lines of code, per top-level module of src/, and the Lua lines.
#
# Rust: every *.rs file under src/, grouped by its first path component
# (src/core.rs goes with src/core/; src/bin is its own row), counting lines
# that hold code after comments (doc comments included) are taken out.
# Left out: blank and comment-only lines; items under #[cfg(test)] or
# #[cfg(fuzzing)] (the `mod tests { ... }` blocks); files under
# src/core/core_tests/ or src/core/model/ (the cfg(fuzzing) model) and
# files named *_tests.rs.
# Lua: the text of raw-string scripts (r#"..."# holding redis.call, KEYS[
# or ARGV[) in those production files, and any *.lua file under src/,
# without blank lines and `--` comment lines. Script text is counted as
# Lua only, not as Rust.
#
# Usage: benchmarks/loc.sh [SRC_DIR]   (default: src of this checkout)
set -euo pipefail

cd "$(dirname "$0")/.."
src="${1:-src}"

exec python3 - "$src" <<'PY'
import os
import signal
import re
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)
SRC = sys.argv[1].rstrip("/")
LUA_HINT = re.compile(r"redis\.call|redis\.pcall|KEYS\[|ARGV\[")
SKIP_ATTR = re.compile(r"#\s*\[\s*cfg\s*\(\s*(test|fuzzing)\s*\)\s*\]")


def excluded(rel):
    parts = rel.split("/")
    if rel.startswith("core/core_tests/") or rel.startswith("core/model/"):
        return True
    return parts[-1].endswith("_tests.rs")


def clean(text):
    """Comments out, string contents replaced by 'S' (newlines kept), Lua
    raw strings blanked; returns (cleaned text, Lua lines)."""
    out = []
    lua = []
    i, n = 0, len(text)

    def ident(c):
        return c.isalnum() or c == "_"

    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "/" and nxt == "*":
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
            continue
        prev = text[i - 1] if i else ""
        raw = None
        if c == "r" and not ident(prev):
            raw = i
        elif c == "b" and nxt == "r" and not ident(prev):
            raw = i + 1
        if raw is not None:
            m = re.match(r'r(#*)"', text[raw:])
            if m:
                hashes = m.group(1)
                start = raw + len(m.group(0))
                end = text.find('"' + hashes, start)
                end = n if end < 0 else end
                body = text[start:end]
                out.append(text[i:start])
                if LUA_HINT.search(body):
                    lua.extend(body.split("\n"))
                    out.append("\n" * body.count("\n"))
                else:
                    out.append(re.sub(r"[^\n]", "S", body))
                out.append('"' + hashes)
                i = end + 1 + len(hashes)
                continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", "S", text[i + 1:j]) + '"')
            i = j + 1
            continue
        if c == "'":
            if nxt == "\\":
                j = text.find("'", i + 3)
                out.append("'S'")
                i = j + 1
                continue
            if i + 2 < n and text[i + 2] == "'":
                out.append("'S'")
                i += 3
                continue
        out.append(c)
        i += 1
    return "".join(out), lua


def drop_cfg_items(code):
    """Blanks every item under #[cfg(test)] / #[cfg(fuzzing)]."""
    while True:
        m = SKIP_ATTR.search(code)
        if not m:
            return code
        i = m.end()
        # Further attributes of the same item.
        while True:
            k = i
            while k < len(code) and code[k].isspace():
                k += 1
            if code.startswith("#[", k):
                depth, k = 0, k + 1
                while k < len(code):
                    if code[k] == "[":
                        depth += 1
                    elif code[k] == "]":
                        depth -= 1
                        if depth == 0:
                            k += 1
                            break
                    k += 1
                i = k
            else:
                break
        # The item: up to its `;` or its matching `}`.
        depth, k = 0, i
        while k < len(code):
            ch = code[k]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            elif ch == ";" and depth == 0:
                k += 1
                break
            k += 1
        span = code[m.start():k]
        code = code[:m.start()] + re.sub(r"[^\n]", " ", span) + code[k:]


def lua_count(lines):
    return sum(
        1 for line in lines if line.strip() and not line.strip().startswith("--")
    )


rust = {}
files = {}
lua_rows = []
for root, dirs, names in os.walk(SRC):
    dirs.sort()
    for name in sorted(names):
        path = os.path.join(root, name)
        rel = os.path.relpath(path, SRC)
        if excluded(rel):
            continue
        if name.endswith(".lua"):
            with open(path, encoding="utf-8") as f:
                lua_rows.append((rel, lua_count(f.read().split("\n"))))
            continue
        if not name.endswith(".rs"):
            continue
        with open(path, encoding="utf-8") as f:
            code, lua = clean(f.read())
        code = drop_cfg_items(code)
        count = sum(1 for line in code.split("\n") if line.strip())
        top = rel.split("/")[0]
        module = top[:-3] if top.endswith(".rs") and top != "lib.rs" else top
        if "/" in rel and top != "bin":
            module += "/"
        rust[module] = rust.get(module, 0) + count
        files[module] = files.get(module, 0) + 1
        if lua:
            lua_rows.append((rel, lua_count(lua)))

# src/core.rs beside src/core/: one row.
for name in list(rust):
    if not name.endswith("/") and name + "/" in rust:
        rust[name + "/"] += rust.pop(name)
        files[name + "/"] += files.pop(name)

lib = {k: v for k, v in rust.items() if k != "bin"}
width = max(len(k) for k in rust) + 2
print("Rust, production lines (no tests, no fuzzing model, no comments or blank lines)")
print(f"{'module':<{width}} {'files':>5} {'lines':>7}")
for name in sorted(lib, key=lambda k: (-lib[k], k)):
    print(f"{name:<{width}} {files[name]:>5} {lib[name]:>7}")
print(f"{'library total':<{width}} {sum(files[k] for k in lib):>5} {sum(lib.values()):>7}")
if "bin" in rust:
    print(f"{'bin (CLI)':<{width}} {files['bin']:>5} {rust['bin']:>7}")
print(f"{'all Rust':<{width}} {sum(files.values()):>5} {sum(rust.values()):>7}")
print()
print("Lua, script lines (no blank lines, no -- comments)")
lw = max([len(r) for r, _ in lua_rows] + [12]) + 2
for rel, count in lua_rows:
    print(f"{rel:<{lw}} {count:>7}")
print(f"{'Lua total':<{lw}} {sum(c for _, c in lua_rows):>7}")
PY
