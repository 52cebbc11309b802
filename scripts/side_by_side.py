#!/usr/bin/env python3
"""Medians of two labelled sets of figures side by side, as markdown, with the second's
as a ratio to the first's. Reads rows of `label, scenario, metric, value` (tab-separated).
`--sum NAME=A+B` adds, per scenario, a figure NAME: the sum of the medians of A and B,
of those measured for that label. `--spread` adds each label's spread over its runs,
(max - min) / median in %: how much a figure moved from run to run.

    python3 scripts/side_by_side.py bench-results/builds.tsv previous this
"""

import argparse
import statistics
from collections import defaultdict


def load(path):
    figures = defaultdict(list)
    rows = []
    for line in open(path, encoding="utf-8"):
        label, scenario, metric, value = line.rstrip("\n").split("\t")
        figures[(label, scenario, metric)].append(float(value))
        if (scenario, metric) not in rows:
            rows.append((scenario, metric))
    return figures, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tsv")
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--sum", action="append", default=[], metavar="NAME=A+B")
    parser.add_argument("--spread", action="store_true")
    a = parser.parse_args()
    figures, rows = load(a.tsv)

    def med(label, scenario, metric):
        values = figures.get((label, scenario, metric))
        return statistics.median(values) if values else None

    for spec in a.sum:
        name, parts = spec.split("=")
        for scenario in sorted({s for s, _ in rows}):
            for label in (a.first, a.second):
                found = [m for m in (med(label, scenario, p) for p in parts.split("+")) if m is not None]
                if found:
                    figures[(label, scenario, name)] = [sum(found)]
                    if (scenario, name) not in rows:
                        rows.append((scenario, name))

    def spread(label, scenario, metric):
        values = figures.get((label, scenario, metric))
        middle = statistics.median(values) if values else 0
        if not values or len(values) < 2:
            return "—"
        if not middle:
            return "0%" if max(values) == min(values) else "—"
        return f"{(max(values) - min(values)) / middle * 100:.2f}%"

    extra = f" {a.first} spread | {a.second} spread |" if a.spread else ""
    print(f"| scenario | figure | {a.first} | {a.second} | {a.second} / {a.first} |{extra}")
    print("|---|---|---|---|---|" + ("---|---|" if a.spread else ""))
    for scenario, metric in sorted(rows):
        x, y = med(a.first, scenario, metric), med(a.second, scenario, metric)
        show = lambda v: "—" if v is None else f"{v:.1f}"
        digits = 3 if a.spread else 2
        ratio = f"{y / x:.{digits}f}" if x and y is not None else "—"
        line = f"| {scenario} | {metric} | {show(x)} | {show(y)} | {ratio} |"
        if a.spread:
            line += f" {spread(a.first, scenario, metric)} | {spread(a.second, scenario, metric)} |"
        print(line)


if __name__ == "__main__":
    main()
