#!/usr/bin/env bash
# Fuzzes the HTTP API from its own OpenAPI document with schemathesis (from PyPI):
# starts a throwaway redis-server and `postback serve`, generates requests for every
# route (examples, fuzzing, and stateful sequences that follow ids from one answer to
# the next), and fails on any 5xx, an answer that does not match the document, an
# accepted request the document says is invalid, or a panic in postback's log.
#
#   scripts/api-fuzz.sh [MAX_EXAMPLES]     # per route; default 100
#   SEED=42 scripts/api-fuzz.sh            # another seed (default 1, so CI repeats)
set -euo pipefail
cd "$(dirname "$0")/.."
examples="${1:-100}"
bash scripts/ensure-redis.sh

venv="target/schemathesis-venv"
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==4.32.5"
fi
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

redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save "" --appendonly no \
  --daemonize yes --logfile "$work/redis.log"
# Deliveries of what the fuzzer registers are held back (one per host an hour) and may
# go only to public addresses.
POSTBACK_SERVER_LISTEN="127.0.0.1:$api_port" \
POSTBACK_SERVER_API_TOKENS=fuzz-token \
POSTBACK_STORE_REDIS_URL="redis://127.0.0.1:$redis_port" \
POSTBACK_DELIVERY_RATE_LIMIT=1/h \
RUST_LOG=warn \
  target/debug/postback serve >"$work/postback.log" 2>&1 &
pb_pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$api_port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done

status=0
# `positive_data_acceptance` is left out: the document cannot say everything the API
# checks (a schedule name must be configured, a callback must be a public address…),
# so it would flag correct refusals. The coverage phase is left out because this
# schemathesis release fails inside it on the document's `oneOf` schemas.
"$venv/bin/schemathesis" run "http://127.0.0.1:$api_port/openapi.json" \
  --header "Authorization: Bearer fuzz-token" \
  --checks all --exclude-checks positive_data_acceptance \
  --phases examples,fuzzing,stateful \
  --max-examples "$examples" --seed "${SEED:-1}" --workers 2 \
  --no-color --report-dir "$work/report" || status=$?

if grep -q "panicked" "$work/postback.log"; then
  echo "postback panicked:" >&2
  grep -A5 "panicked" "$work/postback.log" >&2
  status=1
fi
exit "$status"
