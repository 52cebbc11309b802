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

python3 scripts/side_by_side.py "$tsv" redis embedded \
  --sum cpu_per_delivery_with_store=postback_cpu_per_delivery+redis_cpu_per_delivery
