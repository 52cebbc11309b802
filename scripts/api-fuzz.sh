#!/usr/bin/env bash
# Fuzzes the HTTP API from its own OpenAPI document with schemathesis (from PyPI)
# against a throwaway Redis and postback (scripts/with-postback.sh): requests for every
# route (examples, fuzzing, and stateful sequences that follow ids from one answer to
# the next). Fails on any 5xx, an answer that does not match the document, an accepted
# request the document says is invalid, or a panic in postback's log.
#
#   scripts/api-fuzz.sh [MAX_EXAMPLES]     # per route; default 100
#   SEED=42 scripts/api-fuzz.sh            # another seed (default 1, so CI repeats)
set -euo pipefail
cd "$(dirname "$0")/.."
examples="${1:-100}"

venv="target/schemathesis-venv"
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==4.32.5"
fi
report="$(mktemp -d)"
trap 'rm -rf "$report"' EXIT

# Deliveries of what the fuzzer registers are held back (one per host an hour) and may
# go only to public addresses.
# `positive_data_acceptance` is left out: the document cannot say everything the API
# checks (a schedule name must be configured, a callback must be a public address…),
# so it would flag correct refusals. `use_after_free` is left out too: `DELETE
# /notifications/{id}` cancels, and the cancelled notification stays readable (its
# state says `cancelled`) until retention deletes it, as the API documents. The coverage phase is left out because this
# schemathesis release fails inside it on the document's `oneOf` schemas.
POSTBACK_DELIVERY_RATE_LIMIT=1/h scripts/with-postback.sh bash -c '
  "$0/bin/schemathesis" run "$POSTBACK_URL/openapi.json" \
    --header "Authorization: Bearer $POSTBACK_TOKEN" \
    --checks all --exclude-checks positive_data_acceptance,use_after_free \
    --phases examples,fuzzing,stateful \
    --max-examples "$1" --seed "${SEED:-1}" --workers 2 \
    --no-color --report-dir "$2"' "$venv" "$examples" "$report"
