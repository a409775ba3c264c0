#!/usr/bin/env python3
"""Fail when a crate's modules import each other in a circle.

Usage: scripts/module-graph.py [--dot] [SRC_DIR ...]

SRC_DIR is a crate's source directory (holding lib.rs or main.rs, or bin/).
Without one: src, server/src, client/src, history/src, integrations/rmcp/src and every
other integrations/**/src holding a lib.rs or main.rs (fuzz/ is not read),
relative to the repository root. Standard library only.

Crates. Each SRC_DIR is one crate root (lib.rs, or main.rs); besides, under
SRC_DIR/bin/, each directory holding a main.rs (a binary with several
modules) is a crate root of its own, and so is each single-file binary. A
crate's files are the .rs files under its root directory, minus bin/ for a
library root.

Nodes are the crate's top-level modules: `src/a.rs`, `src/a/mod.rs` and
every file under `src/a/` belong to `a`, and so does an inline `mod a { }`
of the root file. The root file itself (lib.rs, main.rs) is no node: it
declares every module, and its `pub use` lines only re-export.

Edges: `a -> b` when code of `a` names an item of `b` through
  * `crate::b::...` (in a `use` or anywhere in code; `$crate::b` in a
    macro defined in `a` counts too);
  * `crate::{b, c::d}` groups, nested braces included;
  * `super::...` (and `super::super::...`), resolved from the module where
    it is written: `use super::*;` in `src/a.rs`'s `mod tests` is `a`
    itself, `super::b` at the top of `src/a.rs` is `b`;
  * `self::...` in an inline module of the root file;
  * `crate::X` where X is an item the root file re-exports (`pub use
    b::X;`): that is `b`'s item, so the edge goes to `b`;
  * a string `"crate::b::f"` inside an attribute (`#[serde(with =
    "crate::b::f")]`): the compiler resolves it like code.
An edge from a module to itself (inside one top-level module) does not
count. Comments (`//`, `///`, `//!`, nested `/* */`), string, byte-string,
raw-string and char literals are blanked before reading, so a path in a doc
example or a message is not an edge. `pub(in crate::b)` is a visibility,
not an edge.

Output: one line per crate, `client/src: 9 modules, 14 edges, no cycle`;
for a crate with a cycle, every strongly connected component of more than
one module, with each of its edges and an example reference (file:line).
Exit status 1 if any crate has a cycle, 2 on a usage error, else 0.

--dot prints the graphs in Graphviz dot instead (the edges of a cycle in
red); the summary lines then go to stderr and the exit status is the same.
"""

import argparse
import bisect
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIRS = ["src", "server/src", "client/src", "history/src", "integrations/rmcp/src"]
ROOT_FILES = ("lib.rs", "main.rs")


# ---------------------------------------------------------------- lexing


def is_ident(ch):
    return ch.isalnum() or ch == "_"


def blank(text):
    """Replaces comments and literals by spaces, newlines kept.

    Returns (code, attr_strings): the text with every comment, string and
    char literal blanked (same length, same line breaks), and the
    (offset, content) of each string literal that sits inside an attribute
    (`#[...]` or `#![...]`).
    """
    out = list(text)
    attr_strings = []
    n = len(text)
    i = 0
    attr_depth = 0  # bracket depth inside an attribute, 0 outside

    def wipe(start, end):
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        ch = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if ch == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            wipe(i, end)
            i = end
            continue
        if ch == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
            continue
        # Raw strings: r"..", r#".."#, br"..", cr#".."# (not raw idents r#x).
        if ch == "r" and (i == 0 or not is_ident(text[i - 1]) or (
                text[i - 1] in "bc" and (i == 1 or not is_ident(text[i - 2])))):
            j = i + 1
            while j < n and text[j] == "#":
                j += 1
            if j < n and text[j] == '"':
                hashes = j - i - 1
                close = '"' + "#" * hashes
                end = text.find(close, j + 1)
                end = n if end < 0 else end + len(close)
                content = text[j + 1:end - len(close)]
                if attr_depth:
                    attr_strings.append((i, content))
                wipe(i, end)
                i = end
                continue
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            if attr_depth:
                attr_strings.append((i, text[i + 1:end - 1]))
            wipe(i, end)
            i = end
            continue
        if ch == "'":
            # A char literal ('x', '\n', '\u{..}', b'x'), or a lifetime/label.
            if nxt == "\\":
                j = i + 1
                while j < n and text[j] != "'" and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                wipe(i, j + 1)
                i = j + 1
                continue
            if i + 2 < n and text[i + 2] == "'" and nxt != "\n":
                wipe(i, i + 3)
                i += 3
                continue
            i += 1
            continue
        if ch == "#":
            m = re.compile(r"#\s*!?\s*\[").match(text, i)
            if m and not attr_depth:
                attr_depth = 1
                i = m.end()
                continue
        if attr_depth:
            if ch == "[":
                attr_depth += 1
            elif ch == "]":
                attr_depth -= 1
        i += 1
    return "".join(out), attr_strings


TOKEN = re.compile(r"\$crate\b|r#[A-Za-z_]\w*|[A-Za-z_]\w*|::|\S")


def tokenize(code, base=0):
    """[(token, offset)] of blanked code; raw identifiers lose their r#."""
    tokens = []
    for m in TOKEN.finditer(code):
        tok = m.group()
        if tok.startswith("r#"):
            tok = tok[2:]
        tokens.append((tok, base + m.start()))
    return tokens


# ------------------------------------------------------------- use trees


def parse_tree(tokens, i, prefix, out, first=None):
    """Parses a use tree (or a path in code) at tokens[i].

    Appends each leaf as (segments, alias, first) to `out`: a glob's last
    segment is "*"; `first` is the index of the token of the leaf's first
    segment after the prefix given at the top. Stops at the first token
    that continues no path (`;`, `(`, `<`, ...). Returns the index after
    the tree.
    """
    n = len(tokens)
    if i < n and tokens[i][0] == "{":
        i += 1
        while i < n and tokens[i][0] != "}":
            if tokens[i][0] == ",":
                i += 1
                continue
            j = parse_tree(tokens, i, prefix, out, first)
            if j == i:  # not a tree: skip to the next item
                depth = 0
                while j < n:
                    t = tokens[j][0]
                    if t == "{":
                        depth += 1
                    elif t == "}":
                        if depth == 0:
                            break
                        depth -= 1
                    elif t == "," and depth == 0:
                        break
                    j += 1
            i = j
        return i + 1 if i < n else i
    if i < n and tokens[i][0] == "*":
        out.append((prefix + ["*"], None, i if first is None else first))
        return i + 1
    if i < n and re.match(r"[A-Za-z_]", tokens[i][0]):
        segs = prefix + [tokens[i][0]]
        first = i if first is None else first
        i += 1
        if i + 1 < n and tokens[i][0] == "::" and tokens[i + 1][0] in ("{", "*"):
            return parse_tree(tokens, i + 1, segs, out, first)
        if i + 1 < n and tokens[i][0] == "::" and re.match(r"[A-Za-z_]", tokens[i + 1][0]):
            return parse_tree(tokens, i + 1, segs, out, first)
        alias = None
        if i + 1 < n and tokens[i][0] == "as" and re.match(r"[A-Za-z_]", tokens[i + 1][0]):
            alias = tokens[i + 1][0]
            i += 2
        out.append((segs, alias, first))
        return i
    return i


# ------------------------------------------------------------- crates


class Crate:
    def __init__(self, label, root_dir, root_file, files):
        self.label = label          # as printed: "client/src"
        self.root_dir = root_dir    # absolute directory of the root file
        self.root_file = root_file  # absolute path of lib.rs / main.rs
        self.files = files          # absolute paths of the crate's .rs files
        self.modules = set()
        self.reexports = {}         # root name -> top-level module
        self.edges = {}             # (a, b) -> [(file, line)]
        self.warnings = []


def rel(path):
    return os.path.relpath(path, os.getcwd())


def module_path(crate, path):
    """The module path of a file: src/a/b.rs -> [a, b], src/a/mod.rs -> [a]."""
    if path == crate.root_file:
        return []
    parts = os.path.relpath(path, crate.root_dir).split(os.sep)
    parts[-1] = parts[-1][:-3]  # .rs
    if parts[-1] == "mod":
        parts.pop()
    return parts


def crates_of(src_dir, label):
    """The crate roots in a source directory (see the module docs)."""
    found = []
    roots = [f for f in ROOT_FILES if os.path.isfile(os.path.join(src_dir, f))]
    bin_dir = os.path.join(src_dir, "bin")
    for root in roots:
        files = []
        for dirpath, dirnames, filenames in os.walk(src_dir):
            if dirpath == src_dir and "bin" in dirnames:
                dirnames.remove("bin")
            dirnames.sort()
            files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".rs")]
        # With both lib.rs and main.rs, the other root is no module.
        files = [f for f in files if f == os.path.join(src_dir, root)
                 or os.path.dirname(f) != src_dir or os.path.basename(f) not in ROOT_FILES]
        name = label if len(roots) == 1 else f"{label} ({root})"
        found.append(Crate(name, src_dir, os.path.join(src_dir, root), files))
    if os.path.isdir(bin_dir):
        for entry in sorted(os.listdir(bin_dir)):
            path = os.path.join(bin_dir, entry)
            sub = f"{label}/bin/{entry}"
            if os.path.isdir(path) and os.path.isfile(os.path.join(path, "main.rs")):
                files = []
                for dirpath, dirnames, filenames in os.walk(path):
                    dirnames.sort()
                    files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".rs")]
                found.append(Crate(sub, path, os.path.join(path, "main.rs"), files))
            elif entry.endswith(".rs") and os.path.isfile(path):
                found.append(Crate(sub, bin_dir, path, [path]))
    return found


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def analyse(crate):
    sources = {}
    for path in crate.files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        code, attr_strings = blank(text)
        sources[path] = (text, code, attr_strings)
        if re.search(r"#\s*\[\s*path\s*=", code):
            crate.warnings.append(f"{rel(path)}: #[path] is not followed; its module may be misnamed")

    # Nodes: files' top-level modules, and the root's `mod` declarations.
    for path in crate.files:
        mp = module_path(crate, path)
        if mp:
            crate.modules.add(mp[0])
    root_tokens = tokenize(sources[crate.root_file][1])
    depth = 0
    for k, (tok, _) in enumerate(root_tokens):
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
        elif tok == "mod" and depth == 0 and k + 2 < len(root_tokens) \
                and re.match(r"[A-Za-z_]", root_tokens[k + 1][0]) and root_tokens[k + 2][0] in (";", "{"):
            crate.modules.add(root_tokens[k + 1][0])

    # Names the root re-exports: `pub use b::X;` makes `crate::X` b's.
    depth = 0
    for k, (tok, _) in enumerate(root_tokens):
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
        elif tok == "use" and depth == 0:
            leaves = []
            j = k + 1
            if j < len(root_tokens) and root_tokens[j][0] == "::":
                continue  # an external crate
            parse_tree(root_tokens, j, [], leaves)
            for segs, alias, _ in leaves:
                if segs and segs[0] in ("crate", "self"):
                    segs = segs[1:]
                if len(segs) < 2 or segs[0] not in crate.modules or segs[-1] == "*":
                    continue
                name = alias or (segs[-2] if segs[-1] == "self" else segs[-1])
                if name not in crate.modules:
                    crate.reexports[name] = segs[0]

    for path in crate.files:
        scan_file(crate, path, *sources[path])


def resolve(crate, base, rest):
    """The top-level module `base + rest` lies in, if any."""
    if base:
        return base[0]
    if not rest or rest[0] in ("*", "self"):
        return None
    name = rest[0]
    if name in crate.modules:
        return name
    return crate.reexports.get(name)


def scan_file(crate, path, text, code, attr_strings):
    file_mp = module_path(crate, path)
    tokens = tokenize(code)

    # The module path at each token: the file's, plus open inline modules.
    stack, depth, mps = [], 0, []
    pending_mod = None
    for k, (tok, _) in enumerate(tokens):
        mps.append(file_mp + [name for name, _ in stack])
        if tok == "mod" and k + 2 < len(tokens) and tokens[k + 2][0] == "{" \
                and re.match(r"[A-Za-z_]", tokens[k + 1][0]):
            pending_mod = tokens[k + 1][0]
        elif tok == "{":
            depth += 1
            if pending_mod is not None:
                stack.append((pending_mod, depth))
                pending_mod = None
        elif tok == "}":
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1

    def refs(toks, at_mp, offset_of):
        """Edges of every crate-relative path in toks."""
        k, n = 0, len(toks)
        while k < n:
            tok = toks[k][0]
            if tok not in ("crate", "$crate", "super", "self") or (k > 0 and toks[k - 1][0] == "::"):
                k += 1
                continue
            mp = at_mp(k)
            start = k
            if tok == "super":
                base = mp[:-1] if mp else None
                while k + 2 < n and toks[k + 1][0] == "::" and toks[k + 2][0] == "super":
                    base = base[:-1] if base else None
                    k += 2
            elif tok == "self":
                base = mp
            else:
                base = []
            if k + 1 >= n or toks[k + 1][0] != "::":
                k += 1
                continue
            # `pub(in crate::b)` is a visibility.
            if start >= 3 and toks[start - 1][0] == "in" and toks[start - 2][0] == "(" \
                    and toks[start - 3][0] == "pub":
                k += 2
                continue
            leaves = []
            end = parse_tree(toks, k + 2, [], leaves)
            if base is None:
                crate.warnings.append(f"{rel(path)}:{line_of(text, offset_of(start))}: super:: above the crate root")
            elif mp:
                for segs, _, first in leaves:
                    target = resolve(crate, base, segs)
                    if target is not None and target != mp[0]:
                        # Where the module is named: the crate-relative
                        # segment, or the `super`/`self` for a relative path.
                        at = first if not base else start
                        where = (rel(path), line_of(text, offset_of(at)))
                        seen = crate.edges.setdefault((mp[0], target), [])
                        if where not in seen:
                            seen.append(where)
            k = max(end, k + 2)

    refs(tokens, lambda k: mps[k], lambda k: tokens[k][1])

    # Paths in attribute strings, at the module path of where they sit.
    offsets = [off for _, off in tokens]
    for offset, content in attr_strings:
        if not re.fullmatch(r"\s*(crate|super|self)\s*::[\w:\s{},*]*", content):
            continue
        k = bisect.bisect_left(offsets, offset)
        mp = mps[k] if k < len(mps) else file_mp
        refs(tokenize(content), lambda _k, mp=mp: mp, lambda _k, offset=offset: offset)


# ------------------------------------------------------------- graphs


def sccs(nodes, edges):
    """Tarjan's strongly connected components, each sorted."""
    succ = {v: sorted(b for (a, b) in edges if a == v) for v in nodes}
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def report(crate, dot):
    nodes = crate.modules | {m for e in crate.edges for m in e}
    cycles = [c for c in sccs(nodes, crate.edges) if len(c) > 1]
    cycles.sort()
    log = sys.stderr if dot else sys.stdout
    for warning in crate.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    summary = f"{crate.label}: {len(nodes)} modules, {len(crate.edges)} edges"
    if not cycles:
        print(f"{summary}, no cycle", file=log)
    else:
        print(f"{summary}, {len(cycles)} cycle{'s' if len(cycles) > 1 else ''}:", file=log)
        for comp in cycles:
            members = set(comp)
            print(f"  cycle: {' <-> '.join(comp)}", file=log)
            for (a, b) in sorted(crate.edges):
                if a in members and b in members:
                    where = crate.edges[(a, b)]
                    more = f" (+{len(where) - 1} more)" if len(where) > 1 else ""
                    print(f"    {a} -> {b}  at {where[0][0]}:{where[0][1]}{more}", file=log)
    if dot:
        in_cycle = {(a, b) for comp in cycles for (a, b) in crate.edges
                    if a in comp and b in comp}
        print(f'digraph "{crate.label}" {{')
        print("  node [shape=box];")
        for v in sorted(nodes):
            print(f'  "{v}";')
        for (a, b) in sorted(crate.edges):
            colour = " [color=red]" if (a, b) in in_cycle else ""
            print(f'  "{a}" -> "{b}"{colour};')
        print("}")
    return bool(cycles)


def default_dirs():
    dirs = [os.path.join(REPO, d) for d in DEFAULT_DIRS]
    for dirpath, dirnames, _ in os.walk(os.path.join(REPO, "integrations")):
        dirnames[:] = sorted(d for d in dirnames if d not in ("target", "fuzz") and not d.startswith("."))
        if os.path.basename(dirpath) == "src" and any(
                os.path.isfile(os.path.join(dirpath, f)) for f in ROOT_FILES):
            if os.path.abspath(dirpath) not in dirs:
                dirs.append(os.path.abspath(dirpath))
            dirnames[:] = []
    return dirs


def main():
    parser = argparse.ArgumentParser(
        description="Fail when a crate's modules import each other in a circle.")
    parser.add_argument("dirs", nargs="*", metavar="SRC_DIR",
                        help="crate source directories (default: every crate of the repository)")
    parser.add_argument("--dot", action="store_true", help="print the graphs in Graphviz dot")
    args = parser.parse_args()

    if args.dirs:
        dirs = [(os.path.abspath(d), d.rstrip("/")) for d in args.dirs]
    else:
        dirs = [(d, rel(d)) for d in default_dirs()]
    any_cycle = False
    for src_dir, label in dirs:
        crates = crates_of(src_dir, label) if os.path.isdir(src_dir) else []
        if not crates:
            print(f"{label}: no lib.rs, main.rs or bin/ here: not a crate source directory",
                  file=sys.stderr)
            return 2
        for crate in crates:
            analyse(crate)
            any_cycle |= report(crate, args.dot)
    return 1 if any_cycle else 0


if __name__ == "__main__":
    sys.exit(main())
