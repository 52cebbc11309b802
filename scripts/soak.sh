#!/usr/bin/env bash
# The soak: mixed traffic against receivers that fail at random, with an instance and
# Redis restarted mid-run, then an exact ledger (tests/soak.rs). The test suite runs it
# for one minute; this runs it for longer, in a release build.
#
#   scripts/soak.sh [SECONDS]     # default 600
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
POSTBACK_SOAK_SECONDS="${1:-600}" cargo test --locked --release --test soak -- --nocapture 2>&1 |
  grep -E "^test |soak of|panicked|differ|receiver saw|drains|left:|right:|test result"
