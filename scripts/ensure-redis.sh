#!/usr/bin/env bash
# Installs redis-server from Debian's packages when it is missing. The same binary runs
# the sentinels of the Sentinel tests (`redis-server <file> --sentinel`): Debian's
# redis-sentinel package adds only a service around it, and is not needed.
# With --running, also makes sure a Redis answers at $REDIS_HOST:$REDIS_PORT
# (default 127.0.0.1:6379), starting one with the append-only file on under ./data/redis.
set -euo pipefail

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found: installing it (apt-get)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

if [ "${1:-}" = "--running" ]; then
  host="${REDIS_HOST:-127.0.0.1}"; port="${REDIS_PORT:-6379}"
  if ! redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then
    dir="$(pwd)/data/redis"; mkdir -p "$dir"
    echo "starting redis-server on $host:$port (data in $dir, append-only file on)" >&2
    redis-server --daemonize yes --bind "$host" --port "$port" --dir "$dir" \
      --appendonly yes --appendfsync everysec --save "" --maxmemory-policy noeviction \
      --logfile "$dir/redis.log"
    for _ in $(seq 50); do redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  fi
fi
