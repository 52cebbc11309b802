#!/usr/bin/env bash
# The review page end to end in headless Chromium (tests/ui/review.mjs) against a
# throwaway Redis and postback. Installs what a fresh machine lacks: Chromium from
# Debian's packages, and playwright-core from npm (tests/ui/package-lock.json). Saves a
# screenshot of each view under docs/ (SCREENSHOTS=DIR to put them elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what is missing: a Node.js from elsewhere (nodesource) conflicts with Debian's npm.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
# The merchant's page shows Python code that verifies a delivery; the test runs it.
python3 -c 'import cryptography' 2>/dev/null || missing+=(python3-cryptography)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (apt-get)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
(cd tests/ui && npm ci --no-audit --no-fund --silent)
export SCREENSHOTS="${SCREENSHOTS:-$(pwd)/docs}"
mkdir -p "$SCREENSHOTS"
# The receiver listens on loopback; the portal secret signs the merchant's links the test
# opens (`postback portal-link` asks the instance for them).
export POSTBACK_SERVER_PORTAL_SECRET="ui-test portal secret, 32 bytes or more"
# A signing key, whose public key the merchant's page shows (generated: never a fixed one).
cargo build --locked -q --bin postback
POSTBACK_SIGNING_KEYS="$(target/debug/postback signing-key new 2>/dev/null | head -n1)"
export POSTBACK_SIGNING_KEYS
POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS=true scripts/with-postback.sh node tests/ui/review.mjs
