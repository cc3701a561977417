# Salvage's image: the code in /opt/salvage, installed as `make install`'s runtime step does
# (a virtualenv in .venv, `pip install -e .`: settings, templates and static files are read
# from the source tree), run as the unprivileged user `salvage`. compose.yaml runs every
# process from it; its default command is the web server of the Procfile.
#   docker build -t salvage .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SALVAGE_DATA_DIR=/var/lib/salvage \
    SALVAGE_STATIC_ROOT=/opt/salvage/staticfiles

RUN groupadd --system salvage \
    && useradd --system --gid salvage --home-dir /var/lib/salvage --shell /usr/sbin/nologin salvage \
    && install -d -o salvage -g salvage /var/lib/salvage

WORKDIR /opt/salvage
# Dependencies first (a code change does not reinstall them): the same steps as `make install`.
COPY pyproject.toml README.md ./
COPY recovery/__init__.py recovery/__init__.py
COPY dashboard/__init__.py dashboard/__init__.py
RUN python -m venv .venv && .venv/bin/pip install --quiet -e .
COPY . .
# Hashed, compressed static files for whitenoise, made once per image. collectstatic serves
# nothing and needs no real key; the containers get SECRET_KEY from the environment.
RUN SALVAGE_INSECURE_DEV_KEY=1 SALVAGE_DATA_DIR=/tmp/build .venv/bin/python manage.py \
        collectstatic --noinput --verbosity 0 \
    && rm -rf /tmp/build

ENV PATH=/opt/salvage/.venv/bin:$PATH
USER salvage
VOLUME /var/lib/salvage
EXPOSE 8000
# /readyz: 200 while the database answers (/healthz would say only that gunicorn runs).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request as u; r = u.Request('http://127.0.0.1:8000/readyz', headers={'X-Forwarded-Proto': 'https'}); sys.exit(0 if u.urlopen(r, timeout=4).status == 200 else 1)"]
CMD [".venv/bin/gunicorn", "--config", "deploy/gunicorn.conf.py", "recovery.wsgi:application"]
