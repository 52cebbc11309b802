#!/usr/bin/env bash
# What reaching the store over TLS costs, in one session on this machine: postback-bench
# `burst --batch 1000` (throughput end to end, postback's CPU per delivery and the
# store's) on a fresh standalone Redis and a fresh Postgres, each in clear and over TLS
# (`--tls`: a CA and a server certificate made for the run, verified as `rediss://` and
# `sslmode=verify-full` verify them), REPEATS times interleaved; then postback's counts
# per registration and per delivery (`postback-bench counts`: callgrind instructions and
# allocations, strace system calls), in clear and over TLS on each store. Figures in
# bench-results/tls.tsv and tls-counts.tsv; prints medians side by side, TLS ÷ clear.
#
#   scripts/bench-tls.sh [REPEATS]   (default 3; about 2 minutes per repeat, and 3 for
#                                    the counts)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
out="$(pwd)/bench-results"
mkdir -p "$out"
tsv="$out/tls.tsv"
counts="$out/tls-counts.tsv"
: > "$tsv"
: > "$counts"
bash scripts/ensure-redis.sh
bash scripts/ensure-postgres.sh
command -v valgrind strace openssl >/dev/null || { echo "valgrind, strace and openssl are required" >&2; exit 1; }
cargo build --release --bins >&2

# RESULT lines of postback-bench, labelled $1 (clear or tls), the scenario's name after
# $3 (the store), into file $2.
bench() {
  local label="$1" file="$2" prefix="$3"; shift 3
  target/release/postback-bench "$@" --concurrency "${CONCURRENCY:-64}" |
    awk -v label="$label" -v fields="scenario metric value" -f scripts/results-tsv.awk |
    awk -F'\t' -v OFS='\t' -v p="$prefix" '{ $2 = p $2; print }' | tee -a "$file"
}

for r in $(seq "$repeats"); do
  for store in redis postgres; do
    if (( r % 2 == 1 )); then order="clear tls"; else order="tls clear"; fi
    for mode in $order; do
      flag=""; [ "$mode" = tls ] && flag=--tls
      bench "$mode" "$tsv" "${store}_" burst --batch 1000 --producers 4 --store "$store" $flag
    done
  done
done
for store in redis postgres; do
  bench clear "$counts" "" counts --store "$store" --n "${N:-500}"
  bench tls "$counts" "" counts --store "$store" --n "${N:-500}" --tls
done

echo "burst --batch 1000, $repeats runs each: TLS beside clear"
python3 scripts/side_by_side.py "$tsv" clear tls --spread
echo
echo "counts per registration and per delivery (N=${N:-500}): TLS beside clear"
python3 scripts/side_by_side.py "$counts" clear tls
