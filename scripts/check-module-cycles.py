#!/usr/bin/env python3
"""Module cycles: for every crate of the workspace, the graph of its modules and the
imports between them, and every loop in it (issue 37: "no module imports, directly or
around a loop, a module that imports it").

A module is a file under a crate's `src/` (`x.rs` or `x/mod.rs`, children in `x/`) or an
inline `mod x { ... }`. Module A imports module B when code of A names an item of B by a
path that reaches B inside the crate: `use crate::b::Item`, `crate::b::f()`,
`super::Item`, `self::b::Item`, `b::f()` for a child `b` or a module imported by `use`.
An edge goes to the deepest module the path reaches (`crate::gc::retention::Keep` is an
import of `gc::retention`, not of `gc`). So a child naming its parent's items imports its
parent, and a parent naming its child's items (a `pub use` included) imports its child;
declaring `mod child;` is not an import, nor is a `use` of a module that no path then goes
through. Not counted: comments (doc comments and their examples included), string and
char literals, `#[cfg(test)]` and `#[test]` items (test modules), `$crate` in macros,
`pub(in path)` visibilities, and the crates' `tests/`, `benches/` and `examples/`
directories and the workspace's `tests` crate. Paths starting with `::` or with a name that
is neither a child module nor a module imported by `use` are other crates'.

Usage: scripts/check-module-cycles.py [WORKSPACE_DIR] [--graph] [--self-test]
Prints each cycle with the file:line of every edge (the first place; `+N` more places),
and exits 1 when there is any. `--graph` prints every crate's edges as well;
`--self-test` checks the checker on a small made-up workspace first.
"""

import os
import re
import sys
import tomllib

# Each cycle is printed with its edges; a dense knot has very many loops, so the listing
# stops after this many per strongly connected component (the count says how many more).
MAX_CYCLES_PER_KNOT = 200


# ---------------------------------------------------------------- tokens

class Tok:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind, text, line):
        self.kind, self.text, self.line = kind, text, line

    def __repr__(self):
        return f"{self.kind}:{self.text}@{self.line}"


IDENT_START = re.compile(r"[A-Za-z_]")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NUMBER = re.compile(r"[0-9][0-9A-Za-z_]*(\.[0-9][0-9A-Za-z_]*)?")


def tokenize(src):
    """Identifiers, `::` and single punctuation; comments, strings, chars, numbers and
    lifetimes are dropped (literals leave a `lit` token so that paths do not run across
    them)."""
    toks, i, line, n = [], 0, 1, len(src)
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += src[i] == "\n"
                    i += 1
        elif m := re.compile(r'(b|c|br|cr|r)?(#*)"').match(src, i) if c in 'bcr"' else None:
            prefix, hashes = m.group(1) or "", m.group(2)
            raw = "r" in prefix
            if hashes and not raw:  # `b#"` is not a literal; treat `b` as an identifier
                m = None
            if m is None:
                j = IDENT.match(src, i).end()
                toks.append(Tok("ident", src[i:j], line))
                i = j
                continue
            start_line, i = line, m.end()
            if raw:
                end = '"' + hashes
                j = src.find(end, i)
                j = n if j < 0 else j
                line += src.count("\n", i, j)
                i = j + len(end)
            else:
                while i < n and src[i] != '"':
                    if src[i] == "\\":
                        i += 1
                    line += i < n and src[i] == "\n"
                    i += 1
                i += 1
            toks.append(Tok("lit", "", start_line))
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime / label ('a, 'static).
            if i + 1 < n and src[i + 1] == "\\":
                j = i + 3
                while j < n and src[j] != "'":
                    j += 1 + (src[j] == "\\")
                toks.append(Tok("lit", "", line))
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                toks.append(Tok("lit", "", line))
                i += 3
            else:
                m = IDENT.match(src, i + 1)
                i = m.end() if m else i + 1
        elif c == "r" and src.startswith("r#", i) and IDENT_START.match(src, i + 2 if i + 2 < n else i):
            j = IDENT.match(src, i + 2).end()
            toks.append(Tok("ident", src[i + 2:j], line))
            i = j
        elif IDENT_START.match(c):
            j = IDENT.match(src, i).end()
            toks.append(Tok("ident", src[i:j], line))
            i = j
        elif c.isdigit():
            i = NUMBER.match(src, i).end()
            toks.append(Tok("lit", "", line))
        elif src.startswith("::", i):
            toks.append(Tok("punct", "::", line))
            i += 2
        else:
            toks.append(Tok("punct", c, line))
            i += 1
    return toks


# ---------------------------------------------------------------- modules

class Module:
    def __init__(self, path, file, child_dir, parent):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.child_dir = child_dir  # where `mod x;` of this module finds x.rs / x/mod.rs
        self.parent = parent
        self.children = {}  # name -> Module
        self.uses = []  # (segments tuple, line, via_use)
        self.aliases = {}  # name -> segments tuple (a `use` whose path may be a module)

    def name(self):
        return "crate" if not self.path else "::".join(self.path)


def is_test_attr(attr_toks):
    """`#[test]`, `#[cfg(test)]`, `#[cfg(all(test, ...))]`: compiled only for tests."""
    words = [t.text for t in attr_toks]
    if words == ["test"]:
        return True
    if words[:1] != ["cfg"]:
        return False
    rest = words[1:]
    return rest[:3] == ["(", "test", ")"] or rest[:4] == ["(", "all", "(", "test"]


ITEM_WORDS = {"fn", "impl", "struct", "enum", "mod", "use", "const", "static", "type",
              "trait", "pub", "unsafe", "async", "extern", "macro_rules", "union", "let"}


def skip_item(toks, i):
    """The index after the item starting at `i`: its `;` or its first `{...}` block at
    bracket depth 0 (a `use` ends at its `;`; a field or match arm at its `,`)."""
    depth, is_use = 0, False
    j = i
    in_list = toks[i].text not in ITEM_WORDS if i < len(toks) else False
    while j < len(toks) and toks[j].kind == "ident" and toks[j].text in ("pub", "use", "crate", "in", "super", "self"):
        is_use |= toks[j].text == "use"
        j += 1
    while j < len(toks):
        t = toks[j].text if toks[j].kind == "punct" else None
        if t in ("(", "["):
            depth += 1
        elif t in (")", "]"):
            depth -= 1
        elif t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0 and not is_use:
                return j + 1
            if depth < 0:
                return j  # the enclosing block ends: the item was an expression
        elif t == ";" and depth == 0:
            return j + 1
        elif t == "," and depth == 0 and in_list:
            return j + 1  # a field or a match arm
        j += 1
    return j


def parse_use_tree(toks, i, prefix, out, line):
    """Parses a use tree at `i` under `prefix`; appends (segments, alias, line); returns the
    index after it."""
    segs = list(prefix)
    while i < len(toks):
        t = toks[i]
        if t.kind == "ident":
            segs.append(t.text)
            i += 1
            if i < len(toks) and toks[i].text == "::":
                i += 1
                continue
            alias = segs[-1]
            if i + 1 < len(toks) and toks[i].text == "as":
                alias = toks[i + 1].text
                i += 2
            if segs and segs[-1] == "self":
                segs.pop()
                alias = alias if alias != "self" else (segs[-1] if segs else None)
            out.append((tuple(segs), alias, t.line))
            return i
        if t.text == "::" and not segs:  # a leading `::`: another crate
            segs.append("::")
            i += 1
            continue
        if t.text == "*":
            out.append((tuple(segs) + ("*",), None, t.line))
            return i + 1
        if t.text == "{":
            i += 1
            while i < len(toks) and toks[i].text != "}":
                if toks[i].text == ",":
                    i += 1
                    continue
                i = parse_use_tree(toks, i, segs, out, toks[i].line)
            return i + 1
        return i + 1
    return i


def scan_module(mod, toks, i, end_at_brace, registry):
    """Walks the tokens of one module (a file, or an inline module's block) recording its
    paths, child module declarations and use aliases; returns the index after it."""
    attrs, depth = [], 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "punct" and t.text == "#" and i + 1 < len(toks) and toks[i + 1].text in ("[", "!"):
            j = i + 1 + (toks[i + 1].text == "!")
            k, d = j, 0
            while k < len(toks):
                if toks[k].text == "[":
                    d += 1
                elif toks[k].text == "]":
                    d -= 1
                    if d == 0:
                        break
                k += 1
            inner = toks[j + 1:k]
            if toks[i + 1].text != "!":
                attrs.append(inner)
            i = k + 1
            continue
        if any(is_test_attr(a) for a in attrs):
            attrs = []
            i = skip_item(toks, i)
            continue
        path_attr = next((a for a in attrs if a and a[0].text == "path"), None)
        attrs = []
        if t.kind == "punct":
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                if depth == 0 and end_at_brace:
                    return i + 1
                depth -= 1
            i += 1
            continue
        if t.kind != "ident":
            i += 1
            continue
        if t.text == "mod" and i + 2 < len(toks) and toks[i + 1].kind == "ident":
            name, nxt = toks[i + 1].text, toks[i + 2].text
            if nxt == ";":
                child = registry.child_file(mod, name, path_attr)
                if child:
                    mod.children[name] = child
                i += 3
                continue
            if nxt == "{":
                child = Module(mod.path + (name,), mod.file, os.path.join(mod.child_dir, name), mod)
                mod.children[name] = child
                registry.modules.append(child)
                i = scan_module(child, toks, i + 3, True, registry)
                continue
        if t.text == "use":
            out = []
            i = parse_use_tree(toks, i + 1, (), out, t.line)
            for segs, alias, line in out:
                if segs and segs[-1] != "*" and alias and alias != "_":
                    mod.aliases[alias] = segs
                mod.uses.append((segs, line, True))
            continue
        if t.text == "pub" and i + 2 < len(toks) and toks[i + 1].text == "(" and toks[i + 2].text == "in":
            while i < len(toks) and toks[i].text != ")":
                i += 1
            continue
        prev = toks[i - 1] if i else None
        if prev is not None and (prev.text == "::" or prev.text == "$" or prev.text == "."):
            i += 1
            continue
        if i + 1 < len(toks) and toks[i + 1].text == "::":
            segs, j = [t.text], i + 1
            while j + 1 < len(toks) and toks[j].text == "::" and toks[j + 1].kind == "ident":
                segs.append(toks[j + 1].text)
                j += 2
            mod.uses.append((tuple(segs), t.line, False))
            i = j
            continue
        i += 1
    return i


class Crate:
    def __init__(self, name, root_file):
        self.name = name
        self.modules = []
        self.missing = []
        src_dir = os.path.dirname(root_file)
        self.root = Module((), root_file, src_dir, None)
        self.modules.append(self.root)
        self.load(self.root)

    def child_file(self, mod, name, path_attr):
        if path_attr:
            lits = [t for t in path_attr if t.kind == "lit"]
            if lits:  # a `#[path]` module: its file is not found by name
                self.missing.append(f"{mod.file}: #[path] on mod {name} is not followed")
            return None
        for cand in (os.path.join(mod.child_dir, name + ".rs"),
                     os.path.join(mod.child_dir, name, "mod.rs")):
            if os.path.isfile(cand):
                base = os.path.basename(cand)
                child_dir = os.path.dirname(cand) if base == "mod.rs" else cand[:-3]
                child = Module(mod.path + (name,), cand, child_dir, mod)
                self.modules.append(child)
                self.load(child)
                return child
        self.missing.append(f"{mod.file}: mod {name}: no file")
        return None

    def load(self, mod):
        with open(mod.file, encoding="utf-8") as f:
            toks = tokenize(f.read())
        scan_module(mod, toks, 0, False, self)

    # ---- resolution

    def resolve(self, mod, segs, seen=None):
        """(the deepest module of this crate that `segs`, written in `mod`, reaches, the
        number of segments left after it); (None, 0) when the path is another crate's or
        starts at a local item that is not a module."""
        seen = seen or set()
        if not segs or segs[0] in ("::", "$"):
            return None, 0
        first, rest = segs[0], list(segs[1:])
        if first == "crate":
            cur = self.root
        elif first in ("super", "self"):
            cur = mod if first == "self" else mod.parent
            while cur is not None and rest and rest[0] == "super":
                cur, rest = cur.parent, rest[1:]
            if cur is None:
                return None, 0
        elif first in mod.children:
            cur = mod.children[first]
        elif first in mod.aliases and (first, mod.name()) not in seen:
            seen.add((first, mod.name()))
            cur, left = self.resolve(mod, mod.aliases[first], seen)
            if cur is None or left:
                return None, 0  # an alias of an item (its `use` is the edge), or foreign
        else:
            return None, 0
        while rest and rest[0] in cur.children:
            cur, rest = cur.children[rest[0]], rest[1:]
        return cur, len(rest)

    def edges(self):
        """(from, to) -> [(file, line)], without self-edges."""
        out = {}
        for m in self.modules:
            for segs, line, via_use in m.uses:
                glob = bool(segs) and segs[-1] == "*"
                target, left = self.resolve(m, segs[:-1] if glob else segs)
                if target is None or target is m:
                    continue
                if via_use and not glob and left == 0:
                    continue  # `use` of a module: counted where a path goes through it
                out.setdefault((m.name(), target.name()), []).append((m.file, line))
        return out


# ---------------------------------------------------------------- cycles

def sccs(nodes, adj):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


def cycles_in(comp, adj, limit):
    """Elementary cycles of one strongly connected component, each from its smallest node,
    in a stable order; at most `limit` (and the total count, up to a large cap)."""
    nodes = sorted(comp)
    rank = {v: i for i, v in enumerate(nodes)}
    found, total = [], 0
    for s in nodes:
        path, stack = [s], [iter(sorted(w for w in adj.get(s, ()) if w in rank and rank[w] >= rank[s]))]
        on_path = {s}
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                on_path.discard(path.pop())
                continue
            if nxt == s:
                total += 1
                if len(found) < limit:
                    found.append(list(path))
                if total > 100_000:
                    return found, total
                continue
            if nxt in on_path:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(sorted(w for w in adj.get(nxt, ()) if w in rank and rank[w] >= rank[s])))
    return found, total


# ---------------------------------------------------------------- workspace

def crate_roots(ws):
    with open(os.path.join(ws, "Cargo.toml"), "rb") as f:
        members = tomllib.load(f).get("workspace", {}).get("members", [])
    for member in members:
        if member == "tests" or member.startswith("tests/"):
            continue  # the end-to-end tests' crate
        d = os.path.join(ws, member)
        with open(os.path.join(d, "Cargo.toml"), "rb") as f:
            manifest = tomllib.load(f)
        pkg = manifest.get("package", {}).get("name", member)
        roots = []
        lib = manifest.get("lib", {}).get("path", "src/lib.rs")
        roots.append(("lib", lib))
        bins = [b.get("path") for b in manifest.get("bin", []) if b.get("path")]
        roots += [("bin", b) for b in bins or ["src/main.rs"]]
        bin_dir = os.path.join(d, "src", "bin")
        if os.path.isdir(bin_dir):
            for e in sorted(os.listdir(bin_dir)):
                p = os.path.join("src/bin", e, "main.rs") if os.path.isdir(os.path.join(bin_dir, e)) else os.path.join("src/bin", e)
                if p.endswith(".rs"):
                    roots.append(("bin", p))
        seen = set()
        for kind, rel in roots:
            path = os.path.normpath(os.path.join(d, rel))
            if os.path.isfile(path) and path not in seen:
                seen.add(path)
                yield f"{pkg} ({kind} {os.path.relpath(path, ws)})", path


SELF_TEST = {
    "Cargo.toml": '[workspace]\nmembers = ["k", "tests"]\n',
    "tests/Cargo.toml": '[package]\nname = "t"\n',
    "tests/src/lib.rs": "mod a; mod b;",
    "k/Cargo.toml": '[package]\nname = "k"\n',
    "k/src/lib.rs": """
        //! Declaring is not importing: `crate::a::X` in a comment is not one either.
        mod a;
        mod b;
        mod c;
        mod d;
        pub mod e;
        mod in_line { pub fn f() { super::b::g(); } }
        /* block /* nested */ c::h() */
        fn s() -> &'static str { "crate::d::X" }
        fn ch() -> char { '\\'' }
        #[cfg(test)]
        mod tests { use crate::a::X; fn t() { crate::c::h(); } }
    """,
    "k/src/a.rs": "use crate::b::Y; pub struct X;",
    "k/src/b.rs": "pub struct Y; pub fn g() { let _ = r#\"super::a::X\"#; crate::in_line::f(); }",
    "k/src/c.rs": "#[test] fn t() { crate::d::Z; }\npub fn h() {}",
    "k/src/d.rs": "use crate::e;\npub struct Z;\nfn f() { e::inner::Q; }",
    "k/src/e/mod.rs": "pub mod inner;\npub use self::inner::Q;",
    "k/src/e/inner.rs": "pub struct Q; fn f() { super::super::c::h(); }",
}

SELF_TEST_EDGES = {
    ("a", "b"), ("b", "in_line"), ("in_line", "b"), ("d", "e::inner"),
    ("e", "e::inner"), ("e::inner", "c"),
}


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELF_TEST.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        crates = [Crate(label, root) for label, root in crate_roots(d)]
        assert len(crates) == 1, [c.name for c in crates]
        got = set(crates[0].edges())
        if got != SELF_TEST_EDGES:
            print(f"self-test failed:\n  extra {got - SELF_TEST_EDGES}\n  missing {SELF_TEST_EDGES - got}")
            return False
    return True


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    show_graph = "--graph" in argv
    if "--self-test" in argv and not self_test():
        return 2
    ws = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    n_cycles, n_knots, problems = 0, 0, []
    for label, root in crate_roots(ws):
        crate = Crate(label, root)
        problems += [os.path.relpath(p, ws) if os.path.exists(p) else p for p in crate.missing]
        edges = crate.edges()
        adj = {}
        for (a, b) in edges:
            adj.setdefault(a, set()).add(b)
        if show_graph:
            for (a, b), where in sorted(edges.items()):
                f, l = where[0]
                print(f"{label}: {a} -> {b}  {os.path.relpath(f, ws)}:{l}")
        for comp in sccs(sorted({m.name() for m in crate.modules}), adj):
            if len(comp) < 2:
                continue
            n_knots += 1
            found, total = cycles_in(comp, adj, MAX_CYCLES_PER_KNOT)
            n_cycles += total
            print(f"{label}: {len(comp)} modules in a knot, {total} cycles: {', '.join(sorted(comp))}")
            for cyc in found:
                parts = []
                for a, b in zip(cyc, cyc[1:] + cyc[:1]):
                    where = edges[(a, b)]
                    f, l = where[0]
                    more = f" +{len(where) - 1}" if len(where) > 1 else ""
                    parts.append(f"{a} -> {b} ({os.path.relpath(f, ws)}:{l}{more})")
                print("  cycle: " + "; ".join(parts))
            if total > len(found):
                print(f"  ... {total - len(found)} more cycles in this knot")
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    if n_cycles:
        print(f"module cycles: {n_cycles} cycles in {n_knots} knots")
        return 1
    print("module cycles: none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
