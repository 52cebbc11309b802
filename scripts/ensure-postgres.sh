#!/usr/bin/env bash
# Installs Postgres's server binaries (initdb, postgres, pg_isready) from Debian's
# packages when they are missing. The tests start their own servers from them, in
# temporary directories on free ports; nothing is started here.
set -euo pipefail

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "Postgres not found: installing it (apt-get)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
