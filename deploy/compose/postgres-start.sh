#!/bin/sh
# The postgres container's entrypoint under docker compose. Starts Postgres
# (the image's docker-entrypoint.sh, which makes the cluster on the first
# start), then, at every start, over the local socket as the superuser:
# - sets the superuser's (POSTGRES_USER's) password to KANDEV_POSTGRES_PASSWORD;
# - makes or updates each service's role, kandev_<service>, with its
#   password, owning its schema and only that (deploy/postgres/roles.sql);
# then marks itself ready for the healthcheck, which the services wait for.
# The passwords come from /run/kandev/postgres.env, which the `secrets`
# service writes (deploy/compose/init-secrets.sh): a password changed in
# .env takes effect on the next `docker compose up`. Runs at every start
# rather than from /docker-entrypoint-initdb.d, which only runs on an empty
# volume: an existing database gets its roles too, and tables made by the
# superuser (`kandev export`, or the services before they had roles) are
# handed to the services' roles.
set -eu
env_file=/run/kandev/postgres.env
ready=/var/run/postgresql/kandev-roles-ready
rm -f "$ready"

secret() { sed -n "s/^$1=//p" "$env_file"; }
admin_password="$(secret KANDEV_POSTGRES_PASSWORD)"
if [ -z "$admin_password" ]; then
  echo "postgres-start: $env_file has no KANDEV_POSTGRES_PASSWORD" >&2
  exit 1
fi

POSTGRES_PASSWORD="$admin_password" docker-entrypoint.sh "$@" &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true' INT
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM

# Waits for the server until it exits; returns its status.
server_status() {
  while :; do
    if wait "$pid"; then status=0; else status=$?; fi
    kill -0 "$pid" 2>/dev/null || return "$status"
  done
}

# The server for good: the first start's temporary one (initdb scripts)
# listens on the socket only.
until pg_isready -q -h 127.0.0.1 -U "$POSTGRES_USER" -d "$POSTGRES_DB"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    server_status || exit $?
    exit 1
  fi
  sleep 1
done

# The statements, with the passwords, go to psql's standard input: never on
# a command line, never printed.
if ! {
  printf "\\\\set admin_password '%s'\n" "$admin_password"
  printf '%s\n' "SELECT format('ALTER ROLE %I PASSWORD %L', current_user, :'admin_password') \\gexec"
  for svc in task_service agent_manager orchestrator gateway; do
    upper="$(echo "$svc" | tr 'a-z' 'A-Z')"
    printf '\\set role kandev_%s\n\\set schema %s\n\\set password %s\n' \
      "$svc" "$svc" "$(secret "KANDEV_POSTGRES_${upper}_PASSWORD")"
    cat /kandev/roles.sql
  done
} | psql -X -q -v ON_ERROR_STOP=1 -h /var/run/postgresql -U "$POSTGRES_USER" -d "$POSTGRES_DB" >/dev/null
then
  echo "postgres-start: making the services' roles failed; stopping" >&2
  kill -INT "$pid" 2>/dev/null || true
  server_status || true
  exit 1
fi
touch "$ready"
echo "postgres-start: the roles kandev_task_service, kandev_agent_manager, kandev_orchestrator and kandev_gateway are up to date" >&2

server_status || exit $?
