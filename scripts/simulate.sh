#!/usr/bin/env bash
# Runs COUNT seeds (default 10000) of the deterministic simulation (tests/simulation)
# from FIRST (default 0), optimized, on every core, and prints seeds per second and the
# faults injected by kind. The first seed that breaks a promise stops it with its trace;
# `POSTBACK_SIM_SEED=<seed> cargo test --release --test simulation` replays that one.
#   scripts/simulate.sh [COUNT] [FIRST]
set -euo pipefail
cd "$(dirname "$0")/.."
POSTBACK_SIM_SEEDS="${1:-10000}" POSTBACK_SIM_FIRST="${2:-0}" \
  cargo test --release --locked --test simulation -- --exact every_seed_keeps_every_promise --nocapture
