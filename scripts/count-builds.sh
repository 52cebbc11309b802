#!/usr/bin/env bash
# Two builds of postback compared by counts that repeat from run to run, where times move
# with the machine (scripts/bench-builds.sh compares times): per registration and per
# delivery, postback's instructions and allocations (callgrind), its system calls
# (strace), and the store's Redis commands or Postgres statements, on the embedded store,
# Redis and Postgres (`postback-bench counts`). A build is a commit (built in a scratch
# worktree) or the path of a `postback` binary; B defaults to this checkout's build. Both
# are driven by this build's harness, REPEATS times each (default 2), alternating which
# goes first. Prints the medians side by side with B / A, and each build's spread
# ((max - min) / median over its runs, in %): how much a count moves from run to run.
# The same build twice (`scripts/count-builds.sh this this`) shows that alone.
#
#   scripts/count-builds.sh A [B] [REPEATS] [STORES]   (STORES: embedded,redis,postgres;
#                                                      N=500 registrations per phase)
set -euo pipefail
cd "$(dirname "$0")/.."
a="${1:?usage: scripts/count-builds.sh A [B] [REPEATS] [STORES]}"
b="${2:-this}"
repeats="${3:-2}"
stores="${4:-embedded,redis,postgres}"
n="${N:-500}"
out="$(pwd)/bench-results"
mkdir -p "$out"
tsv="$out/counts.tsv"
: > "$tsv"
bash scripts/ensure-redis.sh
bash scripts/ensure-postgres.sh
command -v valgrind strace >/dev/null || { echo "valgrind and strace are required" >&2; exit 1; }

# Prints the directory holding build $1's postback beside this build's harness, building
# a commit first (in this checkout's target directory, whose dependencies it shares).
place() {
  local build="$1" dir
  dir="$out/counts-$(printf '%s' "$build" | tr -c 'A-Za-z0-9._-' '_')"
  mkdir -p "$dir"
  if [ "$build" = this ]; then
    cargo build --release --bins >&2
    cp target/release/postback "$dir/"
  elif [ -f "$build" ]; then
    cp "$build" "$dir/postback"
  else
    local tree="$out/build-$build"
    [ -d "$tree" ] || git worktree add --detach "$tree" "$build" >&2
    (cd "$tree" && CARGO_TARGET_DIR="$OLDPWD/target" cargo build --release --bin postback >&2)
    cp target/release/postback "$dir/"
  fi
  echo "$dir"
}

dir_a="$(place "$a")"
dir_b="$(place "$b")"
# This build's harness last, so that a commit's build has not replaced it.
cargo build --release --bins >&2
cp target/release/postback-bench "$dir_a/"
cp target/release/postback-bench "$dir_b/"

run() {
  local label="$1" dir="$2" store="$3"
  "$dir/postback-bench" counts --store "$store" --n "$n" --concurrency "${CONCURRENCY:-64}" |
    awk -v label="$label" -v fields="scenario metric value" -f scripts/results-tsv.awk |
    tee -a "$tsv"
}

for r in $(seq "$repeats"); do
  for store in ${stores//,/ }; do
    if (( r % 2 == 1 )); then
      run A "$dir_a" "$store"; run B "$dir_b" "$store"
    else
      run B "$dir_b" "$store"; run A "$dir_a" "$store"
    fi
  done
done

echo "A: $a   B: $b   ($repeats runs each, $n per phase)"
python3 scripts/side_by_side.py "$tsv" A B --spread
