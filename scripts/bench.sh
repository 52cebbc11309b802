#!/usr/bin/env bash
# Measures postback beside BullMQ in one session, on this machine: the peer comparator of
# ../shared/peers (copied to a scratch directory, since shared/ is read-only) runs its
# baseline (redis-benchmark, wrk on its receiver) and BullMQ's burst, retry and delayed
# scenarios; postback-bench runs the same scenarios, the burst also through
# `POST /notify/batch`, and its own (isolation, idle, backlog, fleet); and the machine's
# own limits (`postback-bench limits`: `wrk` to the peers' receiver, and `wrk` as the
# producer of `POST /notify`), to which postback's CPU per unit is compared.
# Every scenario is repeated REPEATS times, interleaved, and the figures end up in
# bench-results/results.tsv; scripts/bench_summary.py prints medians and the ratios that
# BENCHMARKS.md reports.
#
#   scripts/bench.sh [REPEATS]        (default 3; about 3 minutes per repeat, plus the backlog
#                                     and the fleet, about 4 minutes each)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
out="$(pwd)/bench-results"
mkdir -p "$out"
tsv="$out/results.tsv"
: > "$tsv"

bash scripts/ensure-redis.sh
peers="$(mktemp -d)/peers"
cp -r ../shared/peers "$peers"
chmod -R u+w "$peers"
(cd "$peers" && ./run.sh setup >&2)
cargo build --release --bins >&2

# RESULT lines of postback-bench, filed under repeat $1.
postback() {
  local run="$1"; shift
  target/release/postback-bench "$@" --concurrency "${CONCURRENCY:-64}" |
    awk -v run="$run" -v fields="peer scenario run metric value unit" -f scripts/results-tsv.awk |
    tee -a "$tsv"
}

for r in $(seq "$repeats"); do
  (cd "$peers" && TSV="$tsv" ./run.sh baseline "$r")
  for sc in burst retry delayed; do
    (cd "$peers" && TSV="$tsv" ./run.sh bullmq "$sc" "$r")
    postback "$r" "$sc"
  done
  postback "$r" limits --peer-receiver "$peers/receiver/target/release/peer-receiver"
  postback "$r" burst --batch 1000 --producers 4
  postback "$r" isolation
  postback "$r" idle
done
postback 1 backlog
postback 1 fleet
python3 scripts/bench_summary.py "$tsv"
