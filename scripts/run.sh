#!/usr/bin/env bash
# Runs postback on this machine with nothing else installed: builds and starts
# `postback serve` with config/postback.toml, keeping notifications in the embedded
# store under ./data. To run it on Redis instead, set POSTBACK_STORE_REDIS_URL (for
# example to redis://127.0.0.1:6379 after `scripts/ensure-redis.sh --running`). Extra
# arguments go to `serve`. The API token is $POSTBACK_SERVER_API_TOKENS, or `dev-token`
# when unset. So that you can try it against a receiver on this machine, callbacks to
# private addresses are allowed unless POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS says
# otherwise (the built-in default, for production, is false).
set -euo pipefail
cd "$(dirname "$0")/.."
export POSTBACK_SERVER_API_TOKENS="${POSTBACK_SERVER_API_TOKENS:-dev-token}"
export POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS="${POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS:-true}"
exec cargo run --release --bin postback -- serve --config config/postback.toml "$@"
