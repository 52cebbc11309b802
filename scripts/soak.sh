#!/usr/bin/env bash
# The soaks (tests/soak.rs), in a release build, for longer than the test suite runs
# them: the ledger (mixed traffic against receivers that fail at random, an instance and
# Redis restarted mid-run, then an exact ledger) for SECONDS, and the simulation's
# checker against Redis, a Redis Cluster and Postgres, instances killed (`kill -9`) and
# stopped (SIGSTOP) at random, for SECONDS each.
#
#   scripts/soak.sh [SECONDS]     # default 600
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
bash scripts/ensure-postgres.sh
POSTBACK_SOAK_SECONDS="${1:-600}" POSTBACK_CHECKED_SOAK_SECONDS="${1:-600}" \
  cargo test --locked --release --test soak -- --nocapture 2>&1 |
  grep -E "^test |soak of|checked soak|panicked|differ|receiver saw|drains|left:|right:|test result"
