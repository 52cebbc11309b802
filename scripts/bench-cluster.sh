#!/usr/bin/env bash
# postback on a local Redis Cluster (3 primaries), beside a standalone Redis, in one
# session: the burst with 1, 2 and 3 instances sharing the cluster; the burst with 1, 3,
# 12 and 48 shards (what claiming across more shards costs Redis); an idle instance on
# 12 shards. Every case is repeated REPEATS times, interleaved; the medians are printed
# as a markdown table, with throughput as a ratio to the standalone Redis's.
#
#   scripts/bench-cluster.sh [REPEATS] [N]     (default 3 repeats of 10,000 notifications)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
n="${2:-10000}"
out="$(pwd)/bench-results"
mkdir -p "$out"
tsv="$out/cluster.tsv"
: > "$tsv"
bash scripts/ensure-redis.sh
cargo build --release --bins >&2

# RESULT lines of one postback-bench run, filed under the label $1.
run() {
  local label="$1"; shift
  target/release/postback-bench "$@" --n "$n" --concurrency 64 |
    awk -v label="$label" -v fields="scenario metric value" -f scripts/results-tsv.awk |
    tee -a "$tsv"
}

for _ in $(seq "$repeats"); do
  run "standalone" burst
  for k in 1 2 3; do run "cluster, $k instance(s)" burst --cluster 3 --instances "$k"; done
  for s in 1 3 12 48; do run "cluster, $s shard(s)" burst --cluster 3 --shards "$s"; done
  run "cluster, idle, 12 shards" idle --cluster 3
done

python3 - "$tsv" <<'PY'
import statistics, sys
from collections import defaultdict
figures = defaultdict(list)
labels = []
for line in open(sys.argv[1]):
    label, scenario, metric, value = line.rstrip("\n").split("\t")
    figures[(label, metric)].append(float(value))
    if label not in labels:
        labels.append(label)
med = lambda label, metric: statistics.median(figures[(label, metric)]) if figures.get((label, metric)) else None
base = med("standalone", "e2e_throughput")
print("| case | e2e /s (ratio to standalone) | delivery-only /s | Redis commands per delivery | Redis CPU per delivery (us) |")
print("|---|---|---|---|---|")
for label in labels:
    if "idle" in label:
        continue
    e2e = med(label, "e2e_throughput")
    print(f"| {label} | {e2e:.0f} ({e2e / base:.2f}) | {med(label, 'delivery_only_throughput'):.0f} "
          f"| {med(label, 'redis_commands_per_delivery'):.1f} | {med(label, 'redis_cpu_per_delivery'):.1f} |")
idle = med("cluster, idle, 12 shards", "redis_commands_per_second")
print(f"\nIdle instance on 12 shards: {idle:.1f} Redis commands a second (script calls and what they run inside).")
PY
