#!/usr/bin/env python3
"""Fail when the documentation cites a repository path that does not exist.

Files read:
  * every Markdown file of the repository (README.md, BENCHMARKS.md,
    docs/**/*.md, the crates' READMEs and notes), and
  * the `//!` and `///` doc comments of every `.rs` file under src/, server/,
    client/, integrations/, benches/, loom-tests/, fuzz/, examples/, tests/,
    and
  * the comments (`# ...`, whole-line or after a value; a `#` inside a
    string is not one) of every Cargo.toml (the workspace's, its members',
    and those of the crates outside it: fuzz/, python/).
  Files are those git knows (tracked, or new and not ignored), so target/,
  node_modules/ and other build output are never read. Fenced code blocks
  (``` or ~~~) are skipped: they hold commands and code, not citations.

A citation is the text of an inline code span (`like/this.rs`) or the target
of a Markdown link ([text](like/this.md), [label]: like/this.md). A Cargo.toml
comment cites paths in plain words too (`# The example server
(examples/progress_server.rs).`), so there each word outside a code span that
holds a `/` or ends in a known extension is also a citation, stripped of the
brackets, quotes and punctuation around it and of a possessive `'s`
(`src/lib.rs's` cites src/lib.rs). Every citation is taken after:
  * cutting a `#anchor`, a `::item` path (`error.rs::ApiError::into_response`
    cites `error.rs`) and a line suffix (`:12`, `:12:5`, `:12-40`, `:12,30`);
  * trimming trailing punctuation (`.,;:!?)`) and a leading `./`.

It is checked only if all of these hold (each rule names what it excludes):
  1. no whitespace: a code span with a space is a command or an expression.
     Of a command, only the words holding a `/` and ending in a known
     extension are checked, each as a citation of its own
     (`python3 benches/results/plot.py collect` cites benches/results/plot.py);
  2. no `://`: a URL (`https://...`, `redis://HOST:PORT`, `unix:///path`);
  3. it does not start with `/`, `~` or `$`: an absolute path (`/proc/PID/statm`,
     `/dev/null`, `/tmp/x`), a home or environment path, or an HTTP route
     (`/metrics`, `/session/{id}/events`);
  4. only the characters of this repository's file names: letters, digits,
     `. _ - + /`. Anything else marks a placeholder, glob, key or expression:
     `{id}`, `<dir>/r.sock`, `*.rs`, Redis keys (`gapless:{s}:events`),
     `emit/1t/*`, `a=b`, a JSON-RPC method written as `{"method":"a/b"}`;
  5. it looks like a repository path: its first component is `.` or `..`, or
     a top-level entry of the repository (`src`, `server`, `docs`, `.ci`, ...;
     entries git knows, so never `target`) or of the citing file's crate
     (`tests`, `benches`, ... beside the nearest Cargo.toml), or it ends in a
     known file extension (EXTENSIONS below). This leaves out MIME types
     (`text/event-stream`, `application/json`), prose pairs (`read/write`),
     bench ids (`emit/1t`) and module names (`history`), whose first word
     names no entry; a bare extension (`.rs`) names no file and is left out;
  6. its first component does not name a tree outside this repository: a
     published package as cargo or pip unpacks it (`redis-1.8.1/src/cmd.rs`,
     `rmcp-3.11.0/src/...`), or a single capital letter, which a document
     defines as an abbreviation for such a tree before using it
     (integrations/rmcp/DESIGN-NOTES.md: "`R` = the rmcp-3.11.0 crate
     source"; no entry of this repository is one capital letter).

A checked citation passes if, as a file or a directory, it exists relative to
the repository root, to the citing file's directory, or to the citing file's
crate root (the nearest directory above it holding a Cargo.toml). A bare file
name (no `/`) also passes when exactly one file in the repository has that
name (`ring.rs` for src/ring.rs); a bare name that several files share
(`follower.rs`, `lib.rs`) must be cited by its path.

Each failure prints `FILE:LINE: cites PATH, which does not exist` (with, for
a bare name several files share, how many it names); the exit status is then
1. A clean run prints how many citations it checked, in how many files.
Python 3 standard library only, no allow-list; well under a second.
Run from anywhere: python3 scripts/check-doc-paths.py (CI: .ci/run).
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXTENSIONS = (
    ".rs", ".md", ".toml", ".sh", ".py", ".lua", ".lock", ".yml", ".json",
    ".csv", ".log", ".txt", ".svg",
)
RUST_DIRS = (
    "src", "server", "client", "integrations", "benches", "loom-tests", "fuzz",
    "examples", "tests",
)
PATH_CHARS = re.compile(r"^[A-Za-z0-9._+/-]+$")
LINE_SUFFIX = re.compile(r":\d+(?:\s*[-,:]\s*\d+)*$")
TRAILING = ".,;:!?)"
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
# Rule 6: `name-1.2.3` (a package's source as cargo or pip unpacks it) or a
# single capital letter (a document's abbreviation for such a tree).
FOREIGN = re.compile(r"^(?:[A-Z]|[A-Za-z][A-Za-z0-9_.+]*(?:-[A-Za-z][A-Za-z0-9_+]*)*-\d+(?:\.\d+)+)$")
DOC_LINE = re.compile(r"^\s*//([/!])(?!/)(.*)$")
# A plain word of a Cargo.toml comment: what surrounds a path in prose.
WORD_EDGES = "([{<\"'" + TRAILING + "]}>"


def repository_files():
    """Every file git knows here (tracked, or new and not ignored) that exists."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, check=True, capture_output=True,
        ).stdout.decode("utf-8", "surrogateescape")
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        # No git (an unpacked archive): walk the tree, minus build output.
        names = []
        for top, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in (".git", "target", "node_modules")]
            rel = os.path.relpath(top, ROOT)
            names += [os.path.normpath(os.path.join(rel, f)) for f in files]
    return sorted({n for n in names if os.path.isfile(os.path.join(ROOT, n))})


def crate_root(rel_file, manifests):
    """The nearest directory at or above rel_file's holding a Cargo.toml."""
    d = os.path.dirname(rel_file)
    while True:
        if d in manifests:
            return d
        if not d:
            return ""
        d = os.path.dirname(d)


def is_manifest(rel_file):
    return os.path.basename(rel_file) == "Cargo.toml"


def toml_comments(lines):
    """Each line's comment text (after its `#`), "" for a line without one.

    A `#` inside a TOML string ("basic", 'literal', or a multi-line one of
    either kind, which may run over several lines) starts no comment.
    """
    out, quote = [], None  # quote: the delimiter of the string still open
    for line in lines:
        comment, i = "", 0
        while i < len(line):
            if quote:
                if quote[0] == '"' and line[i] == "\\":
                    i += 2
                    continue
                if line.startswith(quote, i):
                    i, quote = i + len(quote), None
                    continue
                i += 1
            elif line[i] == "#":
                comment = line[i + 1:]
                break
            elif line[i] in "\"'":
                quote = line[i] * 3 if line.startswith(line[i] * 3, i) else line[i]
                i += len(quote)
            else:
                i += 1
        if quote and len(quote) == 1:
            quote = None  # a one-line string never runs past its line
        out.append(comment)
    return out


def doc_text(rel_file, text):
    """The text readers see, line for line, with everything else blanked.

    Keeps line numbers; a blank line ends a paragraph, so a code span never
    runs across one. Fenced code blocks are blanked.
    """
    lines = text.split("\n")
    if rel_file.endswith(".rs"):
        lines = [(m.group(2) if m else "") for m in map(DOC_LINE.match, lines)]
    elif is_manifest(rel_file):
        return toml_comments(lines)
    in_fence, fence = False, None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if m and (not in_fence or m.group(1) == fence):
            in_fence, fence = not in_fence, m.group(1)
            lines[i] = ""
        elif in_fence:
            lines[i] = ""
    return lines


def paragraphs(lines):
    """(first line number, text) for each run of non-blank lines."""
    start, block = None, []
    for n, line in enumerate(lines + [""], 1):
        if line.strip():
            if start is None:
                start = n
            block.append(line)
        elif block:
            yield start, "\n".join(block)
            start, block = None, []


def citations(lines, plain_words=False):
    """(line number, raw citation) for every code span and link target, and
    with plain_words (a Cargo.toml's comments) every path-like plain word."""
    for start, para in paragraphs(lines):
        found = []
        for m in CODE_SPAN.finditer(para):
            found.append((m.start(2), m.group(2).strip()))
        # Link targets outside code spans.
        bare = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), para)
        for m in INLINE_LINK.finditer(bare):
            found.append((m.start(1), m.group(1)))
        for m in REFERENCE_DEF.finditer(bare):
            found.append((m.start(1), m.group(1)))
        if plain_words:
            for m in re.finditer(r"\S+", bare):
                word = m.group(0).strip(WORD_EDGES)
                if word.endswith("'s"):
                    word = word[:-2]
                if "/" in word or word.endswith(EXTENSIONS):
                    found.append((m.start(), word))
        for offset, raw in found:
            yield start + para.count("\n", 0, offset), raw


def normalize(raw):
    """The path a raw citation names, or None when it names no path."""
    p = raw.strip()
    if "://" in p:
        return None                                   # rule 2
    p = p.split("#", 1)[0].split("::", 1)[0]
    p = LINE_SUFFIX.sub("", p.rstrip(TRAILING)).rstrip(TRAILING)
    if not p or re.search(r"\s", p):
        return None                                   # rule 1
    while p.startswith("./"):
        p = p[2:]
    if not p or p[0] in "/~$":
        return None                                   # rule 3
    if not PATH_CHARS.match(p):
        return None                                   # rule 4
    return p


def command_words(raw):
    """In a code span holding a command, the words that are surely paths."""
    if not re.search(r"\s", raw.strip()):
        return []
    words = [w.strip("'\"") for w in raw.split()]
    return [w for w in words if "/" in w and w.endswith(EXTENSIONS) and "://" not in w]


def main():
    files = repository_files()
    file_set = set(files)
    dir_set = {""}
    for f in files:
        d = os.path.dirname(f)
        while d and d not in dir_set:
            dir_set.add(d)
            d = os.path.dirname(d)
    manifests = {os.path.dirname(f) for f in files if os.path.basename(f) == "Cargo.toml"}
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    top_entries = {}  # directory -> names of its entries ("" is the root)

    def entries(d):
        if d not in top_entries:
            prefix = d + "/" if d else ""
            top_entries[d] = {
                f[len(prefix):].split("/", 1)[0] for f in files if f.startswith(prefix)
            }
        return top_entries[d]

    def exists(rel):
        rel = os.path.normpath(rel)
        if rel.startswith(".."):
            return False
        rel = "" if rel == "." else rel
        return rel in file_set or rel in dir_set

    readers = [
        f for f in files
        if f.endswith(".md")
        or (f.endswith(".rs") and f.split("/", 1)[0] in RUST_DIRS)
        or is_manifest(f)
    ]
    checked, failures = 0, []
    for rel_file in readers:
        with open(os.path.join(ROOT, rel_file), encoding="utf-8", errors="replace") as fh:
            lines = doc_text(rel_file, fh.read())
        here = os.path.dirname(rel_file)
        crate = crate_root(rel_file, manifests)
        for line_no, raw in citations(lines, plain_words=is_manifest(rel_file)):
            path = normalize(raw)
            paths = [path] if path else [p for p in map(normalize, command_words(raw)) if p]
            for path in paths:
                first = path.split("/", 1)[0]
                stem = os.path.basename(path.rstrip("/"))
                has_ext = stem.endswith(EXTENSIONS) and stem not in EXTENSIONS
                if not (first in (".", "..") or first in entries("") or first in entries(crate) or has_ext):
                    continue                          # rule 5
                if "/" in path and FOREIGN.match(first):
                    continue                          # rule 6
                checked += 1
                if any(exists(os.path.join(base, path)) for base in ("", here, crate)):
                    continue
                same_name = by_name.get(path, ()) if "/" not in path else ()
                if len(same_name) == 1:
                    continue
                why = f" here (it names {len(same_name)} files: cite one by its path)" if same_name else ""
                failures.append(f"{rel_file}:{line_no}: cites {path}, which does not exist{why}")
    for line in failures:
        print(line)
    if failures:
        print(f"{len(failures)} of {checked} citations in {len(readers)} files name no path here")
        return 1
    print(f"checked {checked} citations in {len(readers)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
