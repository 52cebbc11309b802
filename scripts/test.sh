#!/usr/bin/env bash
# Runs the whole test suite. Tests start their own redis-server and postgres on free
# ports, so this only makes sure the binaries are installed, and that promtool is at
# hand for the tests of deploy/. Without arguments it then runs the conformance tests
# (tests/conformance: everything about the pipeline, not about Redis itself) again on
# each other backend, a local Redis Cluster of 3 primaries, the embedded store and
# Postgres, and one instance's tests (tests/instance) on the embedded store too; and a
# part of it over TLS, on a standalone Redis and on Postgres (TLS_PART: every path of a
# store, registration, claims, settles, retries, dead letters, replays, cancels, lists,
# leases, retention, ordering keys, batches, the audit log and endpoints' pauses).
# With arguments it passes them to `cargo test` and stops there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
bash scripts/ensure-postgres.sh
PATH="$(bash scripts/ensure-promtool.sh):$PATH"
export PATH
cargo test --locked "$@"
if [ $# -eq 0 ]; then
  # The conformance tests mostly wait for their short schedules: four at a time keep
  # two cores busier than two do, and each still waits for conditions, not for time
  # (CONFORMANCE_THREADS to choose another number).
  PARALLEL=(--test-threads "${CONFORMANCE_THREADS:-4}")
  POSTBACK_TEST_BACKEND=cluster cargo test --locked --test conformance -- "${PARALLEL[@]}"
  POSTBACK_TEST_BACKEND=embedded cargo test --locked --test conformance -- "${PARALLEL[@]}"
  POSTBACK_TEST_BACKEND=embedded cargo test --locked --test instance
  POSTBACK_TEST_BACKEND=postgres cargo test --locked --test conformance -- "${PARALLEL[@]}"
  TLS_PART=(delivery:: dead_letters:: cancel:: browse:: lease:: retention:: ordering:: batch:: audit:: pauses:: resend::)
  POSTBACK_TEST_BACKEND=redis-tls cargo test --locked --test conformance -- "${PARALLEL[@]}" "${TLS_PART[@]}"
  POSTBACK_TEST_BACKEND=postgres-tls cargo test --locked --test conformance -- "${PARALLEL[@]}" "${TLS_PART[@]}"
fi
