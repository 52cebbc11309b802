#!/usr/bin/env bash
# Runs the whole test suite. Tests start their own redis-server on free ports, so this
# only makes sure the binary is installed. Without arguments it then runs the core
# pipeline's tests (delivery, dead letters, cancellation, delivery policy, retention) a
# second time on a local Redis Cluster of 3 primaries; with arguments it passes them to
# `cargo test` and stops there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo test --locked "$@"
if [ $# -eq 0 ]; then
  POSTBACK_TEST_BACKEND=cluster cargo test --locked \
    --test delivery --test dead_letters --test cancel --test policy --test retention
fi
