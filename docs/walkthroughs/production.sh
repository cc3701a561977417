# The production processes on one machine, to try them: PostgreSQL at $DATABASE_URL (an empty
# database), every setting from the environment. In production each process runs under a
# supervisor on its own machines, behind a TLS proxy (docs/production.md).
WORK=${WORK:-var/walkthrough-production} PORT=${PORT:-8000}
mkdir -p "$WORK"
export DATABASE_URL=${DATABASE_URL:-postgres://salvage@127.0.0.1:5432/salvage}
export SECRET_KEY=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')
export SALVAGE_METRICS_TOKEN=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(32))')
export ALLOWED_HOSTS=127.0.0.1 CSRF_TRUSTED_ORIGINS=https://salvage.example.com
export SALVAGE_BEHIND_PROXY=1 SALVAGE_LOG_FORMAT=json SALVAGE_DATA_DIR="$WORK/data"
export SALVAGE_STATIC_ROOT="$WORK/static"
# export REDIS_URL=redis://127.0.0.1:6379/0   # optional: wake-ups via Redis, not the database
.venv/bin/python manage.py migrate --verbosity 0
.venv/bin/python manage.py collectstatic --noinput --verbosity 0
.venv/bin/python manage.py check --deploy --fail-level ERROR
.venv/bin/gunicorn recovery.wsgi:application --bind "127.0.0.1:$PORT" --workers 2 \
    --logger-class recovery.ops.gunicorn_logging.RedactingLogger 2>> "$WORK/web.log" &
.venv/bin/python manage.py dispatch 2>> "$WORK/dispatch.log" &     # one or two per deployment
.venv/bin/python manage.py qcluster 2>> "$WORK/qcluster.log" &     # on every worker machine
trap 'kill $(jobs -p)' EXIT
# What the TLS proxy sends: the original scheme in X-Forwarded-Proto.
proxy() { curl -sf -H 'X-Forwarded-Proto: https' "http://127.0.0.1:$PORT$1" "${@:2}"; }
until proxy /healthz > /dev/null; do sleep 0.5; done
proxy /readyz; echo
#> {"status": "ready"}
proxy /metrics > /dev/null || echo "metrics: 401 without the token"
#> metrics: 401 without the token
proxy /metrics -H "Authorization: Bearer $SALVAGE_METRICS_TOKEN" | grep -m 1 '^salvage_tasks'
