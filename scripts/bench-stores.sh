#!/usr/bin/env bash
# postback on its two stores in one session: a standalone Redis and the embedded store,
# the same scenarios (burst, retry, delayed, backlog of 10,000 and 100,000 pending)
# repeated REPEATS times, interleaved. Prints the medians as a markdown table, with the
# embedded store's figures as a ratio to Redis's. CPU per delivery is postback's own
# plus, on Redis, Redis's (the embedded store's work is inside postback).
#
#   scripts/bench-stores.sh [REPEATS] [N]     (default 3 repeats of 20,000 notifications)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
n="${2:-20000}"
out="$(pwd)/bench-results"
mkdir -p "$out"
tsv="$out/stores.tsv"
: > "$tsv"
bash scripts/ensure-redis.sh
cargo build --release --bins >&2

# RESULT lines of one postback-bench run, filed under the store $1.
run() {
  local store="$1"; shift
  target/release/postback-bench "$@" --store "$store" --n "$n" |
    awk -v label="$store" -v fields="scenario metric value" -f scripts/results-tsv.awk |
    tee -a "$tsv"
}

for _ in $(seq "$repeats"); do
  for store in redis embedded; do
    for scenario in burst retry delayed; do run "$store" "$scenario"; done
    run "$store" backlog --backlog 10000,100000
  done
done

python3 - "$tsv" <<'PY'
import statistics, sys
from collections import defaultdict
figures = defaultdict(list)
rows = []
for line in open(sys.argv[1]):
    store, scenario, metric, value = line.rstrip("\n").split("\t")
    figures[(store, scenario, metric)].append(float(value))
    if (scenario, metric) not in rows:
        rows.append((scenario, metric))
def med(store, scenario, metric):
    values = figures.get((store, scenario, metric))
    return statistics.median(values) if values else None
for scenario in {s for s, _ in rows}:
    own, redis = med("redis", scenario, "postback_cpu_per_delivery"), med("redis", scenario, "redis_cpu_per_delivery")
    if own is not None and redis is not None:
        figures[("redis", scenario, "cpu_per_delivery_with_store")] = [own + redis]
        figures[("embedded", scenario, "cpu_per_delivery_with_store")] = figures[("embedded", scenario, "postback_cpu_per_delivery")]
        rows.append((scenario, "cpu_per_delivery_with_store"))
print("| scenario | figure | Redis | embedded | embedded / Redis |")
print("|---|---|---|---|---|")
for scenario, metric in sorted(rows):
    r, e = med("redis", scenario, metric), med("embedded", scenario, metric)
    show = lambda v: "—" if v is None else f"{v:.1f}"
    ratio = f"{e / r:.2f}" if r and e is not None else "—"
    print(f"| {scenario} | {metric} | {show(r)} | {show(e)} | {ratio} |")
PY
