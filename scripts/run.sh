#!/usr/bin/env bash
# Runs postback on this machine with nothing else installed: builds and starts
# `postback serve`, keeping notifications in the embedded store under ./data. To run it
# on Redis instead, set POSTBACK_STORE_REDIS_URL (for example to redis://127.0.0.1:6379
# after `scripts/ensure-redis.sh --running`). Arguments go to `serve`.
#
# With the shipped config/postback.toml (no --config, no POSTBACK_CONFIG), it sets up a
# trial, each unless the environment says otherwise: the API token `dev-token`
# (POSTBACK_SERVER_API_TOKENS), callbacks to private addresses allowed, so that a
# receiver on this machine can be tried (POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS; the
# built-in default, for production, is false), and a portal secret, so that
# `postback portal-link` works (POSTBACK_SERVER_PORTAL_SECRET). Deliveries are not
# signed until a signing secret or key is configured (the start-up log says so).
#
# With a configuration of your own (`scripts/run.sh --config my.toml`), the file says
# everything: nothing is set for you, and POSTBACK_* variables still override it.
set -euo pipefail
cd "$(dirname "$0")/.."
own_config="${POSTBACK_CONFIG:-}"
for arg in "$@"; do
  case "$arg" in --config | --config=*) own_config=yes ;; esac
done
if [ -n "$own_config" ]; then
  exec cargo run --release --bin postback -- serve "$@"
fi
export POSTBACK_SERVER_API_TOKENS="${POSTBACK_SERVER_API_TOKENS:-dev-token}"
export POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS="${POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS:-true}"
export POSTBACK_SERVER_PORTAL_SECRET="${POSTBACK_SERVER_PORTAL_SECRET:-dev portal secret of scripts/run.sh, not for production}"
exec cargo run --release --bin postback -- serve --config config/postback.toml "$@"
