#!/usr/bin/env bash
# An upgrade as an operator makes it: an earlier build (REV, built in a scratch worktree)
# registers notifications on a Redis and on an embedded store's file and leaves them
# scheduled, retrying, dead and cancelled; it is stopped, and this build is started on
# the same data. Prints each notification as the earlier build left it and as this
# build carries it on (the scheduled one delivered when due, the retrying one on its
# next attempt, the dead one replayed to a URL that answers 200, the cancelled one still
# cancelled), and exits 1 if one did not end as it should.
#
#   scripts/upgrade-run.sh REV
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/upgrade-run.sh REV}"
bash scripts/ensure-redis.sh
out="$(pwd)/bench-results"
mkdir -p "$out"
base="$out/build-$rev"
if [ ! -d "$base" ]; then git worktree add --detach "$base" "$rev" >&2; fi
(cd "$base" && CARGO_TARGET_DIR="$out/target-$rev" cargo build --release --bin postback >&2)
cargo build --release --bin postback >&2
earlier="$out/target-$rev/release/postback"
this="target/release/postback"

work="$(mktemp -d)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
redis_port="$(free_port)"; api_port="$(free_port)"; receiver_port="$(free_port)"
api="http://127.0.0.1:$api_port"
cleanup() {
  kill "${pb_pid:-}" "${receiver_pid:-}" 2>/dev/null || true
  redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# A receiver that answers 200 on /ok and 500 on /fail until $work/heal exists.
cat >"$work/receiver.py" <<'EOF'
import http.server, os, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        healed = os.path.exists(sys.argv[2])
        self.send_response(200 if self.path == "/ok" or healed else 500)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
EOF
python3 "$work/receiver.py" "$receiver_port" "$work/heal" &
receiver_pid=$!
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save "3600 1" --appendonly no \
  --daemonize yes --logfile "$work/redis.log"

# Runs `postback serve` ($1) on the store named by the rest of the environment.
serve() {
  POSTBACK_SERVER_LISTEN="127.0.0.1:$api_port" POSTBACK_SERVER_API_TOKENS=upgrade-token \
  POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS=true POSTBACK_DELIVERY_MAX_IDLE_SLEEP=200ms \
  RUST_LOG=warn "$1" serve >>"$work/postback.log" 2>&1 &
  pb_pid=$!
  for _ in $(seq 100); do curl -fs "$api/readyz" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "postback did not start"; cat "$work/postback.log"; exit 1
}
stop() { kill "$pb_pid"; wait "$pb_pid" 2>/dev/null || true; }
call() { curl -s -H "Authorization: Bearer upgrade-token" -H 'content-type: application/json' "$@"; }
notify() { call -X POST "$api/notify" -d "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
show() { # id → "state attempts"
  call "$api/notifications/$1" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["state"], v["attempts"])'
}
wait_state() { # id state
  for _ in $(seq 150); do [ "$(show "$1" | cut -d' ' -f1)" = "$2" ] && return 0; sleep 0.1; done
  return 1
}

failed=0
run() { # store name, then its environment for both builds
  local name="$1"; shift
  rm -f "$work/heal"
  export "$@"
  serve "$earlier"
  local scheduled retrying dead cancelled
  scheduled="$(notify "{\"url\":\"http://127.0.0.1:$receiver_port/ok\",\"body\":{\"n\":0},\"delay\":\"3s\"}")"
  retrying="$(notify "{\"url\":\"http://127.0.0.1:$receiver_port/fail\",\"body\":{\"n\":1},\"schedule\":[\"4s\",\"4s\"]}")"
  dead="$(notify "{\"url\":\"http://127.0.0.1:$receiver_port/fail\",\"body\":{\"n\":2},\"schedule\":[]}")"
  cancelled="$(notify "{\"url\":\"http://127.0.0.1:$receiver_port/ok\",\"body\":{\"n\":3},\"delay\":\"1h\"}")"
  call -X DELETE "$api/notifications/$cancelled" >/dev/null
  wait_state "$dead" dead
  sleep 0.5
  local before=("$(show "$retrying")" "$(show "$dead")" "$(show "$cancelled")" "$(show "$scheduled")")
  stop
  touch "$work/heal"
  serve "$this"
  wait_state "$scheduled" delivered || true
  wait_state "$retrying" delivered || true
  call -X POST "$api/dead-letters/$dead/replay" -d "{\"url\":\"http://127.0.0.1:$receiver_port/ok\"}" >/dev/null
  wait_state "$dead" delivered || true
  local after=("$(show "$retrying")" "$(show "$dead")" "$(show "$cancelled")" "$(show "$scheduled")")
  stop
  printf '| %s | scheduled | %s | %s |\n' "$name" "${before[3]}" "${after[3]}"
  printf '| %s | retrying | %s | %s |\n' "$name" "${before[0]}" "${after[0]}"
  printf '| %s | dead, then replayed | %s | %s |\n' "$name" "${before[1]}" "${after[1]}"
  printf '| %s | cancelled | %s | %s |\n' "$name" "${before[2]}" "${after[2]}"
  [ "${after[3]}" = "delivered 1" ] && [ "${after[0]}" = "delivered 2" ] \
    && [ "${after[1]}" = "delivered 1" ] && [ "${after[2]}" = "cancelled 0" ] || failed=1
  unset "${@%%=*}"
}

echo "| store | notification | left by $rev (state, attempts) | carried on by this build |"
echo "| --- | --- | --- | --- |"
run redis "POSTBACK_STORE_REDIS_URL=redis://127.0.0.1:$redis_port"
run embedded "POSTBACK_STORE_DATA_DIR=$work/data"
if grep -q panicked "$work/postback.log"; then echo "a build panicked:"; cat "$work/postback.log"; exit 1; fi
exit "$failed"
