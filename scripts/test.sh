#!/usr/bin/env bash
# Runs the whole test suite. Tests start their own redis-server on free ports, so this
# only makes sure the binary is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo test --locked "$@"
