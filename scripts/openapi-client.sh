#!/usr/bin/env bash
# The API document as client generators see it: validates a running instance's
# /openapi.json with openapi-spec-validator, generates a Python client from it with
# openapi-python-client (both from PyPI), and uses that client against a throwaway
# Redis and postback (scripts/with-postback.sh) to register, read, list and replay
# (tests/openapi/client_session.py).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(pwd)/target/openapi-client-venv"
if [ ! -x "$venv/bin/openapi-python-client" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "openapi-spec-validator==0.9.0" "openapi-python-client==0.29.1"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The receiver listens on loopback.
POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS=true scripts/with-postback.sh bash -c '
  set -euo pipefail
  venv="$0" work="$1" root="$2"
  curl -sf "$POSTBACK_URL/openapi.json" > "$work/openapi.json"
  "$venv/bin/openapi-spec-validator" "$work/openapi.json"
  (cd "$work" && "$venv/bin/openapi-python-client" generate --path openapi.json --meta none \
    --output-path client --config "$root/tests/openapi/generator.yaml" --fail-on-warning >/dev/null)
  PYTHONPATH="$work" "$venv/bin/python" tests/openapi/client_session.py
' "$venv" "$work" "$(pwd)"
