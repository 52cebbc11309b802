#!/usr/bin/env bash
# Makes sure `promtool` (which checks the alert rules and the metrics exposition) is at
# hand: the one on PATH, or else the one in Debian's `prometheus` package, unpacked into
# target/tools without installing the package (which would start a Prometheus server).
# Prints the directory to put on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
tools="$(pwd)/target/tools"
if command -v promtool >/dev/null 2>&1; then
  dirname "$(command -v promtool)"
  exit 0
fi
if [ ! -x "$tools/usr/bin/promtool" ]; then
  echo "promtool not found: unpacking it from Debian's prometheus package into $tools" >&2
  mkdir -p "$tools"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  (cd "$tools" && { apt-get download prometheus >/dev/null 2>&1 || { $SUDO apt-get update -qq && apt-get download prometheus >/dev/null; }; })
  dpkg-deb -x "$tools"/prometheus_*.deb "$tools"
  rm -f "$tools"/prometheus_*.deb
fi
echo "$tools/usr/bin"
