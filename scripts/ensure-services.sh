#!/usr/bin/env bash
# Starts PostgreSQL and Redis on loopback if they are not answering (the machine normally runs both).
set -uo pipefail
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  echo "starting redis-server on 127.0.0.1:6379"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
if [ "${NEED_POSTGRES:-1}" = 1 ] && ! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  echo "starting PostgreSQL on 127.0.0.1:5432"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
for i in $(seq 50); do
  (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break; sleep 0.1
done
