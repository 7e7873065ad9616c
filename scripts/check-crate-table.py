#!/usr/bin/env python3
"""The crate table of docs/ARCHITECTURE.md against the manifests (issue 37: the
architecture document checked claim by claim, and kept so).

The table ("| crate | depends on |") lists, for each library crate, the workspace crates
it depends on (`[dependencies]` with a `path`, by their names in the code). This checks
that every crate of the workspace with a `src/lib.rs` has a row, and that each row names
exactly its crate's workspace dependencies; for `cli` (the binary, whose row ends with
"and the crates below `store` it names") that the crates named are among its
dependencies. Exits 1 naming each difference.

Usage: scripts/check-crate-table.py [WORKSPACE_DIR]
"""

import os
import re
import sys
import tomllib


def workspace_deps(crate_dir):
    """Workspace crates `crate_dir` depends on (not dev or build), by their directory
    names (as the table names them; the binary imports two under other names)."""
    with open(os.path.join(crate_dir, "Cargo.toml"), "rb") as f:
        manifest = tomllib.load(f)
    out = set()
    for name, spec in manifest.get("dependencies", {}).items():
        if isinstance(spec, dict) and "path" in spec:
            out.add(os.path.basename(os.path.normpath(spec["path"])))
    return out


def table_rows(doc):
    """Crate name → (names in its row, whether the row is the binary's open-ended one)."""
    rows = {}
    for line in doc.splitlines():
        m = re.match(r"^\| `([a-z0-9_-]+)`[^|]*\| (.*) \|$", line)
        if not m:
            continue
        crate, deps = m.group(1), m.group(2)
        names = set(re.findall(r"`([a-z0-9_-]+)`", deps))
        names.discard("s3")  # a feature named in a remark, not a crate
        rows[crate] = (names, "it names" in deps)
    return rows


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "docs", "ARCHITECTURE.md")) as f:
        rows = table_rows(f.read())
    problems = []
    crates = sorted(
        d for d in os.listdir(root)
        if os.path.isfile(os.path.join(root, d, "Cargo.toml"))
        and (os.path.isfile(os.path.join(root, d, "src", "lib.rs")) or d == "cli")
        and d not in ("tests", "testutil")
    )
    for crate in crates:
        actual = workspace_deps(os.path.join(root, crate))
        if crate not in rows:
            problems.append(f"{crate}: no row in the table (depends on {sorted(actual)})")
            continue
        listed, open_ended = rows[crate]
        missing = sorted(actual - listed)
        extra = sorted(listed - actual)
        if extra:
            problems.append(f"{crate}: the table names {extra}, which it does not depend on")
        if missing and not open_ended:
            problems.append(f"{crate}: depends on {missing}, which the table omits")
    for crate in sorted(set(rows) - set(crates)):
        problems.append(f"{crate}: a row for a crate the workspace does not have")
    for p in problems:
        print(f"crate table: {p}")
    print(f"Crate table: {len(crates)} crates, {len(problems)} differences")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
