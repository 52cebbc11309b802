#!/usr/bin/env bash
# Runs postback on this machine: installs and starts Redis if needed, then builds and
# starts `postback serve` with config/postback.toml. Extra arguments go to `serve`.
# The API token is $POSTBACK_SERVER_API_TOKENS, or `dev-token` when unset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh --running
export POSTBACK_SERVER_API_TOKENS="${POSTBACK_SERVER_API_TOKENS:-dev-token}"
exec cargo run --release --bin postback -- serve --config config/postback.toml "$@"
