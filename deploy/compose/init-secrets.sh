#!/bin/sh
# The secrets Kandev's services share under docker compose, made on the
# first `docker compose up` and kept in the kandev-secrets volume: the
# service token, the NATS password of each service, the Postgres password of
# each service's role and of the superuser, and the key of users' stored
# secrets. A variable set in the environment (.env) wins and is kept;
# otherwise the kept value is reused; otherwise a new one is made.
#
# Writes to $KANDEV_SECRETS_DIR (default /run/kandev):
#   <service>.toml   that service's KANDEV_CONFIG (mode 0400, owned by the
#                    uid its image runs as): service token, NATS login,
#                    database_url with its Postgres role and password
#   nats.env         the four NATS passwords, for nats-server (root, 0600)
#   postgres.env     the superuser's and the four roles' Postgres passwords,
#                    for the postgres container (root, 0600;
#                    deploy/compose/postgres-start.sh)
#   values/          what is kept (root, 0700)
# KANDEV_SECRETS_CHOWN=0 skips the chown (a check run as a plain user).
set -eu
dir="${KANDEV_SECRETS_DIR:-/run/kandev}"
umask 077
mkdir -p "$dir/values"
chmod 0755 "$dir"

# A letter first: nats-server reads a value that looks like a number as one.
random() { printf 'k%s' "$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')"; }

# value NAME: the environment's value, else the kept one, else a new one.
value() {
  file="$dir/values/$1"
  eval "given=\${$1:-}"
  if [ -n "$given" ]; then
    case "$given" in
      *'"'* | *'\'* | *"
"*) echo "init-secrets: $1 must not contain quotes, backslashes or newlines" >&2; exit 1 ;;
    esac
    printf '%s' "$given" > "$file"
  elif [ ! -s "$file" ]; then
    random > "$file"
  fi
  cat "$file"
}

token="$(value KANDEV_SERVICE_TOKEN)"
key="$(value KANDEV_SECRETS_KEY)"
: > "$dir/nats.env.tmp"
# The Postgres superuser's (POSTGRES_USER kandev): only the postgres
# container's start and operators use it, never the services.
echo "KANDEV_POSTGRES_PASSWORD=$(value KANDEV_POSTGRES_PASSWORD)" > "$dir/postgres.env.tmp"
for svc in task-service agent-manager orchestrator gateway; do
  upper="$(echo "$svc" | tr 'a-z-' 'A-Z_')"
  var="KANDEV_NATS_${upper}_PASSWORD"
  password="$(value "$var")"
  echo "$var=$password" >> "$dir/nats.env.tmp"
  # Its Postgres role, kandev_<service> (deploy/postgres/roles.sql): the
  # password goes into a URL as it is.
  pg_var="KANDEV_POSTGRES_${upper}_PASSWORD"
  eval "given=\${$pg_var:-}"
  case "$given" in
    *[!A-Za-z0-9._~-]*) echo "init-secrets: $pg_var may hold only letters, digits and . _ ~ -" >&2; exit 1 ;;
  esac
  if [ -n "$given" ] && [ ${#given} -lt 16 ]; then
    echo "init-secrets: $pg_var must have at least 16 characters" >&2; exit 1
  fi
  pg_password="$(value "$pg_var")"
  echo "$pg_var=$pg_password" >> "$dir/postgres.env.tmp"
  role="kandev_$(echo "$svc" | tr '-' '_')"
  {
    echo "# Made by deploy/compose/init-secrets.sh; set the variables in .env instead of editing."
    echo "service_token = \"$token\""
    echo "nats_user = \"$svc\""
    echo "nats_password = \"$password\""
    echo "database_url = \"postgres://$role:$pg_password@postgres:5432/kandev\""
    if [ "$svc" = agent-manager ]; then echo "secrets_key = \"$key\""; fi
  } > "$dir/$svc.toml.tmp"
  # The uid each image runs as (dockerfiles/*/Dockerfile).
  uid=10001
  if [ "$svc" = agent-manager ]; then uid=1000; fi
  if [ "${KANDEV_SECRETS_CHOWN:-1}" = 1 ]; then chown "$uid" "$dir/$svc.toml.tmp"; fi
  chmod 0400 "$dir/$svc.toml.tmp"
  mv -f "$dir/$svc.toml.tmp" "$dir/$svc.toml"
done
mv -f "$dir/nats.env.tmp" "$dir/nats.env"
mv -f "$dir/postgres.env.tmp" "$dir/postgres.env"
echo "init-secrets: the services' secrets are in the kandev-secrets volume"
