#!/usr/bin/env python3
"""The dependency policy of deny.toml, checked from `cargo metadata --locked` with no
tool to build first: every crate (dependencies of every kind, for every platform) under
a licence expression the allow-list satisfies, from crates.io or this repository only,
and no wildcard version requirement in postback's own manifest. Crates in two versions
are listed, not refused. Exits 1 naming each crate that breaks the policy.

    scripts/check-deps.py
"""

import json
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def tokens(expression):
    # Old manifests write `MIT/Apache-2.0` for `MIT OR Apache-2.0`.
    spaced = expression.replace("/", " OR ").replace("(", " ( ").replace(")", " ) ")
    return spaced.split()


def allowed(expression, allow):
    """Whether the SPDX `expression` is satisfied by licences in `allow`: OR takes
    either side, AND needs both, `X WITH Y` is allowed as written."""
    words = tokens(expression)
    at = 0

    def peek():
        return words[at] if at < len(words) else None

    def take():
        nonlocal at
        at += 1
        return words[at - 1]

    def term():
        if peek() == "(":
            take()
            value = either()
            if take() != ")":
                raise ValueError("unbalanced parentheses")
            return value
        name = take()
        if peek() == "WITH":
            take()
            name = f"{name} WITH {take()}"
        return name in allow

    def both():
        value = term()
        while peek() == "AND":
            take()
            value = term() and value
        return value

    def either():
        value = both()
        while peek() == "OR":
            take()
            value = both() or value
        return value

    value = either()
    if at != len(words):
        raise ValueError(f"cannot read `{expression}`")
    return value


def main():
    policy = tomllib.loads((ROOT / "deny.toml").read_text())
    allow = set(policy["licenses"]["allow"])
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--locked", "--format-version", "1"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout
    )
    problems = []
    versions = defaultdict(set)
    for p in metadata["packages"]:
        crate = f"{p['name']} {p['version']}"
        versions[p["name"]].add(p["version"])
        if p["source"] not in (None, CRATES_IO):
            problems.append(f"{crate}: from {p['source']}, not crates.io")
        if p["source"] is None:
            continue
        try:
            ok = bool(p["license"]) and allowed(p["license"], allow)
        except ValueError as e:
            ok, p["license"] = False, f"{p['license']} ({e})"
        if not ok:
            problems.append(f"{crate}: licence `{p['license']}` is not in deny.toml's allow-list")
    manifest = (ROOT / "Cargo.toml").read_text()
    for line in manifest.splitlines():
        if re.search(r'(^|[{,\s])version\s*=\s*"\*"|=\s*"\*"\s*$', line):
            problems.append(f"Cargo.toml: a wildcard version: {line.strip()}")
    twice = sorted(f"{n} ({', '.join(sorted(v))})" for n, v in versions.items() if len(v) > 1)
    if twice:
        print(f"in two versions or more (allowed): {'; '.join(twice)}")
    for problem in problems:
        print(f"dependency policy: {problem}", file=sys.stderr)
    print(f"{len(metadata['packages'])} crates checked against deny.toml: "
          f"{'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
