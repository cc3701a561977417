"""gunicorn's configuration for Salvage: `gunicorn --config deploy/gunicorn.conf.py
recovery.wsgi:application` (the Procfile, compose.yaml, the systemd unit and the Dockerfile all
run exactly that; docs/production.md).

Why these values:
- gthread workers. A sync worker serves one request at a time and is killed when a request
  runs past `timeout` (30 s by default): a 100,000-task list CSV, streamed as it is read,
  stopped at 20,500 rows with "WORKER TIMEOUT", and the saved file ended mid-list with nothing
  to say so. A gthread worker's main thread keeps beating while its threads stream, so
  `timeout` only catches a worker process that is stuck as a whole.
- `timeout` 120 s: how long a worker process may go silent before the arbiter replaces it.
- `graceful_timeout` 60 s: on SIGTERM (a deploy, `systemctl stop`), requests in progress get
  this long to finish, downloads included; the unit's TimeoutStopSec is above it.
- The redacting logger: access and error lines never carry the webhook's path secret or an
  `api_token=` (recovery/ops/gunicorn_logging.py).
Any of these can be overridden per host with GUNICORN_CMD_ARGS (e.g. "--workers 8") or on
the command line, both of which win over this file.
"""

import os

# Heroku's convention, which honcho follows: PORT names the port; 8000 otherwise. A host that
# puts nginx in front binds loopback instead (GUNICORN_CMD_ARGS="--bind 127.0.0.1:8000").
bind = [f"0.0.0.0:{os.environ.get('PORT', '8000')}"]
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = 4
timeout = 120
graceful_timeout = 60
keepalive = 5
# Recycle workers now and then (a slow leak cannot grow for ever); the jitter keeps them from
# restarting together.
max_requests = 2000
max_requests_jitter = 200
# The dashboard trusts X-Forwarded-Proto only with SALVAGE_BEHIND_PROXY=1 (Django's
# SECURE_PROXY_SSL_HEADER); gunicorn's own wsgi.url_scheme follows the same header from the
# proxy in front (nginx on the same host, or a load balancer: set FORWARDED_ALLOW_IPS).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
accesslog = "-"
errorlog = "-"
logger_class = "recovery.ops.gunicorn_logging.RedactingLogger"
# gunicorn 24+ opens a control socket in the user's home for `gunicornc`; nothing here uses it,
# and two servers on one host would share its path.
control_socket_disable = True
