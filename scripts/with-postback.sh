#!/usr/bin/env bash
# Runs a command against a throwaway redis-server and `postback serve` (debug build),
# both on free ports, and stops them afterwards. The command finds the API at
# $POSTBACK_URL with the token $POSTBACK_TOKEN; postback's log is $POSTBACK_LOG.
# POSTBACK_* settings in the environment reach postback as usual. Fails when postback
# panicked, whatever the command's result.
#
#   scripts/with-postback.sh COMMAND [ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo build --locked -q --bin postback

work="$(mktemp -d)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
redis_port="$(free_port)"; api_port="$(free_port)"
cleanup() {
  kill "${pb_pid:-}" 2>/dev/null || true
  redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save "3600 1" --appendonly no \
  --daemonize yes --logfile "$work/redis.log"
export POSTBACK_TOKEN=throwaway-token POSTBACK_URL="http://127.0.0.1:$api_port" POSTBACK_LOG="$work/postback.log"
POSTBACK_SERVER_LISTEN="127.0.0.1:$api_port" \
POSTBACK_SERVER_API_TOKENS="$POSTBACK_TOKEN" \
POSTBACK_STORE_REDIS_URL="redis://127.0.0.1:$redis_port" \
RUST_LOG="${RUST_LOG:-warn}" \
  target/debug/postback serve >"$POSTBACK_LOG" 2>&1 &
pb_pid=$!
for _ in $(seq 100); do
  curl -fs "$POSTBACK_URL/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done

status=0
"$@" || status=$?
if grep -q "panicked" "$POSTBACK_LOG"; then
  echo "postback panicked:" >&2
  grep -A5 "panicked" "$POSTBACK_LOG" >&2
  status=1
fi
exit "$status"
