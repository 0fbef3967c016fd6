#!/bin/sh
# Create the secrets docker-compose.yml mounts (compose `secrets:`, files under ./secrets,
# 0600, never committed): the PostgreSQL superuser's password (the cluster's admin; the app
# never uses it), the app role's password and its DATABASE_URL, Redis' password and its
# REDIS_URL, and Django's SECRET_KEY. Existing files are kept, so a re-run changes nothing.
#
#   deploy/compose/make-secrets.sh        # from the repository root, before `docker compose up`
set -eu
cd "$(dirname "$0")/../.."
umask 077
mkdir -p secrets
random() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
keep_or_write() {  # name value: write secrets/name unless it exists
    [ -s "secrets/$1" ] || printf '%s\n' "$2" > "secrets/$1"
}
keep_or_write postgres_superuser_password "$(random)"
keep_or_write db_password "$(random)"
keep_or_write redis_password "$(random)"
keep_or_write secret_key "$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')"
# URL-safe tokens need no escaping inside a URL.
keep_or_write database_url "postgres://fleet:$(cat secrets/db_password)@db:5432/fleet_audit"
keep_or_write redis_url "redis://:$(cat secrets/redis_password)@redis:6379/0"
ls -l secrets
