#!/usr/bin/env bash
# postback beside an earlier build of itself, in one session: REV (a commit) is built in
# a scratch worktree, and both builds run the same scenarios (burst, batch burst, retry,
# delayed, backlog) REPEATS times, both driven by this build's harness (postback-bench
# runs the `postback` beside it), so that the ratios are postback's alone. Each scenario
# runs for both builds back to back, each build first in every other repeat (an even
# number of repeats balances them). Prints the medians as a markdown table, with this
# build's figures as a ratio to REV's: what a change did, told apart from what the
# machine did that day. REV must start with the settings this harness gives postback
# (`postback-bench`'s `Postback`).
#
#   scripts/bench-builds.sh REV [REPEATS] [BACKLOG]   (default 4 repeats; backlog sizes
#                                                      10000,100000, once per repeat)
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/bench-builds.sh REV [REPEATS] [BACKLOG]}"
repeats="${2:-4}"
backlog="${3:-10000,100000}"
out="$(pwd)/bench-results"
mkdir -p "$out"
tsv="$out/builds.tsv"
: > "$tsv"
bash scripts/ensure-redis.sh

base="$out/build-$rev"
if [ ! -d "$base" ]; then git worktree add --detach "$base" "$rev" >&2; fi
(cd "$base" && CARGO_TARGET_DIR="$out/target-$rev" cargo build --release --bin postback >&2)
cargo build --release --bins >&2
previous="$out/previous-$rev"
mkdir -p "$previous"
cp "$out/target-$rev/release/postback" target/release/postback-bench "$previous/"

# RESULT lines of one postback-bench run, filed under the build $1 (`previous`, `this`).
run() {
  local build="$1"; shift
  local bench=target/release/postback-bench
  [ "$build" = previous ] && bench="$previous/postback-bench"
  "$bench" "$@" --concurrency "${CONCURRENCY:-64}" |
    awk -v label="$build" -v fields="scenario metric value" -f scripts/results-tsv.awk |
    tee -a "$tsv"
}

# Both builds run each scenario back to back, the first of the two alternating from one
# repeat to the next: the machine drifts over minutes, and the second of two runs in a
# row is slower more often than not, so neither build may always come second.
scenarios=(burst retry delayed "burst --batch 1000 --producers 4" "backlog --backlog $backlog")
for r in $(seq "$repeats"); do
  order=(previous this)
  if (( r % 2 == 0 )); then order=(this previous); fi
  for scenario in "${scenarios[@]}"; do
    # shellcheck disable=SC2086 # a scenario is its name and its options, split here
    for build in "${order[@]}"; do run "$build" $scenario; done
  done
done

python3 scripts/side_by_side.py "$tsv" previous this
