#!/usr/bin/env bash
# pg-boss (bench/pgboss) in the burst of the peer comparator (../shared/peers), to be put
# beside postback on Postgres: a fresh Postgres started as postback-bench starts one
# (initdb in a temporary directory, a free port, Postgres's defaults: fsync and synchronous
# commit on), the peers' receiver, the worker (CONCURRENCY jobs in flight, its own
# transactions committed with synchronous_commit off as postback's claims and settles are;
# woken by NOTIFY as jobs are created with PGBOSS_NOTIFY=1), then the producer:
#   batch    insert() in chunks of 1,000, 4 in flight (scenario burst_batch, beside /notify/batch)
#   single   one send() per job, CONCURRENCY in flight (scenario burst, beside POST /notify)
# It waits until every id got a 200 (a run that stalls fails, with no figures) and prints one
# line per figure,
#   RESULT peer=pgboss scenario=.. run=.. metric=.. value=.. unit=..
# appended to $TSV when set: the peers' figures, worker_cpu and postgres_cpu over the run
# (from the producer's start to the last delivery; Postgres's as postback-bench counts it:
# the postmaster with what it reaped, and its live backends), and both per delivery in µs
# under postback-bench's names.
#
#   scripts/pgboss.sh MODE [RUN]      MODE: batch|single; RUN: the repeat number (1)
#
# Knobs (env): N (20000), CONCURRENCY (64), RUN_TIMEOUT_S (300), TSV, PGBOSS_NOTIFY, PEER_RECEIVER (a built
#   peer-receiver; without it, one is built once, at low priority, in a copy of the peers'
#   receiver in /tmp/postback-peer-receiver).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?MODE: batch|single}"
run="${2:-1}"
case "$mode" in
  batch) scenario=burst_batch ;;
  single) scenario=burst ;;
  *) echo "MODE must be batch or single" >&2; exit 2 ;;
esac
n="${N:-20000}"
bench="$(pwd)/bench/pgboss"
tmp=""
pids=()
pg_launcher=""

log() { echo "[pgboss.sh] $*" >&2; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

result() { # scenario metric value unit
  printf 'RESULT peer=pgboss scenario=%s run=%s metric=%s value=%s unit=%s\n' "$1" "$run" "$2" "$3" "$4"
  if [ -n "${TSV:-}" ]; then printf 'pgboss\t%s\t%s\t%s\t%s\t%s\n' "$1" "$run" "$2" "$3" "$4" >> "$TSV"; fi
}

# Signals $1 with $2, then SIGKILLs it when it is still there after 10 s.
stop() {
  local pid="$1" sig="$2"
  kill "-$sig" "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[i]}" TERM; done
  if [ -n "$pg_launcher" ]; then stop_postgres; fi
  if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The newest of Debian's /usr/lib/postgresql/<version>/bin.
pg_bin() {
  local postgres
  postgres="$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -1)"
  [ -n "$postgres" ] || { log "no /usr/lib/postgresql/<version>/bin/postgres (scripts/ensure-postgres.sh)"; exit 1; }
  dirname "$postgres"
}

# Runs a Postgres program, as the postgres user when root.
as_server() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

postmaster() { head -1 "$tmp/data/postmaster.pid" 2>/dev/null; }

# Fast shutdown (backends ended, shared memory released), then the launcher it ran under.
stop_postgres() {
  local pm
  if pm="$(postmaster)" && [ -n "$pm" ]; then stop "$pm" INT; fi
  stop "$pg_launcher" TERM
}

# Through the server's own socket in the temporary directory: never another server.
psql_q() { "$(pg_bin)/psql" -X -A -t -q -h "$tmp" -U postgres -p "$pg_port" -d postgres -c "$1"; }

start_postgres() { # sets pg_port
  local bin
  bin="$(pg_bin)"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$tmp"; fi
  as_server "$bin/initdb" -A trust -U postgres -E UTF8 -D "$tmp/data" >/dev/null
  pg_port="$(free_port)"
  as_server "$bin/postgres" -D "$tmp/data" -p "$pg_port" -k "$tmp" \
    -c listen_addresses=127.0.0.1 -c max_connections=200 >"$tmp/postgres.log" 2>&1 &
  pg_launcher=$!
  for _ in $(seq 200); do
    psql_q 'SELECT 1' >/dev/null 2>&1 && return
    kill -0 "$pg_launcher" 2>/dev/null || break
    sleep 0.1
  done
  log "postgres did not start on port $pg_port"; cat "$tmp/postgres.log" >&2; exit 1
}

# Clock ticks of the server so far: the postmaster with what it reaped, and its live backends.
postgres_ticks() {
  local pm child ticks
  pm="$(postmaster)"
  ticks="$(proc_ticks "$pm" 11 12 13 14)"
  for child in $(ps -o pid= --ppid "$pm"); do ticks=$((ticks + $(proc_ticks "$child" 11 12))); done
  echo "$ticks"
}

# The sum of the fields $2.. (counted from 0 after the command name) of /proc/$1/stat.
proc_ticks() {
  local stat fields sum=0 i
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }
  read -r -a fields <<< "${stat##*) }"
  for i in "${@:2}"; do sum=$((sum + fields[i])); done
  echo "$sum"
}

receiver_bin() {
  if [ -n "${PEER_RECEIVER:-}" ]; then echo "$PEER_RECEIVER"; return; fi
  local dir=/tmp/postback-peer-receiver
  if [ ! -x "$dir/target/release/peer-receiver" ]; then
    log "building the peers' receiver in $dir"
    rm -rf "$dir"
    cp -r ../shared/peers/receiver "$dir"
    chmod -R u+w "$dir"
    (cd "$dir" && nice -n 19 cargo build --release -q >&2)
  fi
  echo "$dir/target/release/peer-receiver"
}

start_receiver() { # sets recv_port
  local bin
  bin="$(receiver_bin)"
  recv_port="$(free_port)"
  "$bin" --port "$recv_port" >"$tmp/receiver.out" 2>"$tmp/receiver.err" &
  pids+=("$!")
  for _ in $(seq 50); do curl -sf --max-time 2 "http://127.0.0.1:$recv_port/count" >/dev/null && return; sleep 0.1; done
  log "receiver did not start"; exit 1
}

start_worker() { # sets worker_pid
  node "$bench/worker.js" >"$tmp/worker.out" 2>"$tmp/worker.err" &
  worker_pid=$!
  pids+=("$worker_pid")
  for _ in $(seq 600); do
    grep -q '^ready$' "$tmp/worker.out" && return
    kill -0 "$worker_pid" 2>/dev/null || break
    sleep 0.1
  done
  log "the worker did not start"; cat "$tmp/worker.err" >&2; exit 1
}

# How many ids the receiver answered 2xx, or nothing when it does not answer.
ids_ok() {
  { curl -sf --max-time 5 "http://127.0.0.1:$recv_port/count" || true; } |
    sed -n 's/.*"ids_ok":\([0-9]*\).*/\1/p'
}

# Waits until every id got a 200; fails after no progress for 60 s, or RUN_TIMEOUT_S.
wait_delivered() {
  local deadline=$((SECONDS + ${RUN_TIMEOUT_S:-300})) last=-1 stalled=$SECONDS ok
  while :; do
    ok="$(ids_ok)"; ok="${ok:-0}"
    [ "$ok" -ge "$n" ] && return
    [ "$ok" != "$last" ] && { last="$ok"; stalled=$SECONDS; }
    if [ $((SECONDS - stalled)) -ge 60 ] || [ "$SECONDS" -ge "$deadline" ]; then
      log "gave up waiting: $ok/$n ids delivered; no figures from this run"; return 1
    fi
    sleep 0.5
  done
}

# The figures, as "metric value unit" lines, from the producer's line, the receiver's stats
# and the CPU clock ticks the worker and Postgres used over the run.
figures() { # producer.json stats.json worker_ticks postgres_ticks
  python3 - "$n" "$(getconf CLK_TCK)" "$@" <<'PY'
import json, sys

n, hz, producer, stats, worker, postgres = sys.argv[1:]
prod = json.load(open(producer))
stats = json.load(open(stats))
ok = stats["ids_ok"]
span = (stats["last_ok_ms"] - prod["first_enqueue_ms"]) / 1000 if stats.get("last_ok_ms") else float("nan")
cpu = {"worker": int(worker) / int(hz), "postgres": int(postgres) / int(hz)}
print(f"enqueue_rate {prod['enqueue_rate']} jobs/s")
print(f"delivered_ids {ok}/{n} ids")
print(f"duplicates {stats['duplicates']} req")
print(f"first_enqueue_to_last_200 {span:.2f} s")
print(f"e2e_throughput {ok / span:.1f} jobs/s")
for who, seconds in cpu.items():
    print(f"{who}_cpu {seconds:.2f} cpu-s")
    print(f"{who}_cpu_per_delivery {seconds * 1e6 / max(ok, 1):.1f} us")
PY
}

main() {
  [ -d "$bench/node_modules/pg-boss" ] || (cd "$bench" && npm ci --no-audit --no-fund >&2)
  tmp="$(mktemp -d /tmp/pgboss-bench.XXXXXX)"
  start_postgres
  start_receiver
  export DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/postgres" \
    TARGET_URL="http://127.0.0.1:$recv_port/hook" N="$n" SCENARIO=burst CONCURRENCY="${CONCURRENCY:-64}"
  log "$mode run $run: N=$n C=$CONCURRENCY postgres=:$pg_port receiver=:$recv_port"
  start_worker

  local worker0 postgres0 worker_ticks postgres_ticks
  worker0="$(proc_ticks "$worker_pid" 11 12)"; postgres0="$(postgres_ticks)"
  timeout 600 node "$bench/producer.js" "$mode" > "$tmp/producer.json"
  wait_delivered
  worker_ticks=$(($(proc_ticks "$worker_pid" 11 12) - worker0))
  postgres_ticks=$(($(postgres_ticks) - postgres0))
  sleep 2 # catch late duplicates
  curl -sf --max-time 10 "http://127.0.0.1:$recv_port/stats" > "$tmp/stats.json"

  figures "$tmp/producer.json" "$tmp/stats.json" "$worker_ticks" "$postgres_ticks" |
    while read -r metric value unit; do result "$scenario" "$metric" "$value" "$unit"; done
  if [ -s "$tmp/worker.err" ]; then tail -5 "$tmp/worker.err" | sed 's/^/[worker] /' >&2; fi
}

main
