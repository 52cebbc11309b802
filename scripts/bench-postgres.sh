#!/usr/bin/env bash
# postback on Postgres beside postback on Redis and BullMQ, and beside pg-boss, in one
# session on this machine: BullMQ's burst (addBulk, ../shared/peers), and postback's burst
# through POST /notify/batch (1,000 per request, 4 in flight) on a fresh Redis and on a
# fresh Postgres (its defaults: fsync and synchronous commit on), and one POST /notify at
# a time on Postgres; then pg-boss's burst on a fresh Postgres the same way
# (scripts/pgboss.sh: insert() in chunks of 1,000, 4 in flight, and one send() at a time,
# 64 in flight); repeated REPEATS times, interleaved. Then, once, the backlog on
# Postgres: what a burst costs beside 10,000 and BACKLOG pending notifications, and the
# bytes per pending one. Prints the medians and the ratios BENCHMARKS.md reports, and
# postback on Postgres beside pg-boss: end to end, CPU per delivery, and Postgres's CPU
# per delivery beside Redis's.
#
#   scripts/bench-postgres.sh [REPEATS] [BACKLOG]   (default 3 and 1,000,000)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
backlog="${2:-1000000}"
out="$(pwd)/bench-results"
mkdir -p "$out"
tsv="$out/postgres.tsv"
: > "$tsv"

bash scripts/ensure-redis.sh
bash scripts/ensure-postgres.sh
peers="$(mktemp -d)/peers"
cp -r ../shared/peers "$peers"
chmod -R u+w "$peers"
(cd "$peers" && ./run.sh setup >&2)
cargo build --release --bins >&2

# RESULT lines of postback-bench on the store $1, filed as postback-$1 under repeat $2.
postback() {
  local store="$1" run="$2"; shift 2
  target/release/postback-bench "$@" --store "$store" --concurrency "${CONCURRENCY:-64}" |
    awk -v label="postback-$store" -v run="$run" -v fields="scenario run metric value unit" \
      -f scripts/results-tsv.awk | tee -a "$tsv"
}

for r in $(seq "$repeats"); do
  (cd "$peers" && TSV="$tsv" ./run.sh bullmq burst "$r")
  postback redis "$r" burst --batch 1000 --producers 4
  postback postgres "$r" burst --batch 1000 --producers 4
  postback postgres "$r" burst
  for mode in batch single; do
    PEER_RECEIVER="$peers/receiver/target/release/peer-receiver" TSV="$tsv" scripts/pgboss.sh "$mode" "$r"
  done
done
postback postgres 1 backlog --backlog "10000,$backlog"

python3 - "$tsv" "$backlog" <<'PY'
import statistics, sys
from collections import defaultdict

figures = defaultdict(list)
for line in open(sys.argv[1], encoding="utf-8"):
    peer, scenario, _run, metric, value, _unit = line.rstrip("\n").split("\t")
    try:
        figures[(peer, scenario, metric)].append(float(value))
    except ValueError:
        pass  # a count such as `20000/20000`

def med(peer, scenario, metric):
    values = figures.get((peer, scenario, metric))
    return statistics.median(values) if values else float("nan")

bullmq = med("bullmq", "burst", "e2e_throughput")
print("| | registrations per second | end to end | vs BullMQ `addBulk` end to end |")
print("|---|---|---|---|")
print(f"| BullMQ `addBulk` | {med('bullmq', 'burst', 'enqueue_rate'):,.0f} /s | {bullmq:,.0f} /s | 1.00 |")
for peer, scenario, name in [
    ("postback-redis", "burst_batch", "postback on Redis, `/notify/batch`"),
    ("postback-postgres", "burst_batch", "postback on Postgres, `/notify/batch`"),
    ("postback-postgres", "burst", "postback on Postgres, `POST /notify`"),
]:
    e2e = med(peer, scenario, "e2e_throughput")
    print(f"| {name} | {med(peer, scenario, 'enqueue_rate'):,.0f} /s | {e2e:,.0f} /s | {e2e / bullmq:.2f} |")

def claim_cost(scenario):
    return med("postback-postgres", scenario, "postgres_cpu_per_delivery") + \
        med("postback-postgres", scenario, "postback_cpu_per_delivery")

small, large = claim_cost("backlog_10000"), claim_cost(f"backlog_{sys.argv[2]}")
print()
print(f"CPU per delivery (postback + Postgres) of a burst beside 10,000 pending: {small:.0f} us; "
      f"beside {int(sys.argv[2]):,}: {large:.0f} us ({large / small:.2f}x)")
for scenario in ("backlog_10000", f"backlog_{sys.argv[2]}"):
    per = med("postback-postgres", scenario, "postgres_bytes_per_pending")
    over = med("postback-postgres", scenario, "postgres_bytes_per_pending_over_body")
    print(f"{scenario}: {per:,.0f} bytes per pending notification in the schema ({over:,.0f} beyond its body)")

print()
print("| burst | postback on Postgres | pg-boss | postback ÷ pg-boss | goal |")
print("|---|---|---|---|---|")
for scenario, name, goal in [
    ("burst_batch", "batch (`/notify/batch`; `insert`)", "≥ 3"),
    ("burst", "one at a time (`POST /notify`; `send`)", "≥ 2"),
]:
    ours, theirs = med("postback-postgres", scenario, "e2e_throughput"), med("pgboss", scenario, "e2e_throughput")
    print(f"| {name}, end to end | {ours:,.0f} /s | {theirs:,.0f} /s | {ours / theirs:.2f} | {goal} |")
    for whose, ours_metric, theirs_metric in [
        ("postback / the worker", "postback_cpu_per_delivery", "worker_cpu_per_delivery"),
        ("Postgres", "postgres_cpu_per_delivery", "postgres_cpu_per_delivery"),
    ]:
        ours, theirs = med("postback-postgres", scenario, ours_metric), med("pgboss", scenario, theirs_metric)
        print(f"| {name}, CPU per delivery of {whose} | {ours:.0f} us | {theirs:.0f} us | {ours / theirs:.2f} | |")

postgres = med("postback-postgres", "burst_batch", "postgres_cpu_per_delivery")
redis = med("postback-redis", "burst_batch", "redis_cpu_per_delivery")
print()
print(f"Postgres's CPU per delivery under postback (`/notify/batch`): {postgres:.0f} us, "
      f"{postgres / redis:.2f}x Redis's under postback on Redis ({redis:.0f} us; goal ≤ 2)")
PY
