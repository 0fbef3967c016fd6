#!/bin/sh
# PostgreSQL's first start (docker-entrypoint-initdb.d): the app's own role `fleet`, not a
# superuser, owning the database fleet_audit, with the password of the compose secret
# db_password. The superuser (POSTGRES_USER postgres) stays for administration only.
set -eu
password="$(cat /run/secrets/db_password)"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    --set=app_password="$password" <<'SQL'
CREATE ROLE fleet LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'app_password';
CREATE DATABASE fleet_audit OWNER fleet;
SQL
