"""Production mode end to end: PostgreSQL, django-q2 on the Redis broker, three qcluster
processes and a dispatcher sharing the database, gunicorn + whitenoise, JSON logs, /metrics.

A run of 5,000 sandbox pages goes to acceptance while one qcluster is SIGKILLed (its process
group: the cluster and its workers) and started again. Redis is at-most-once: the wake-ups the
killed cluster had taken are lost, and the dispatcher must re-send them because the work they
announced is still due in our tables.
"""

from __future__ import annotations

import json
import sys
import urllib.request
import uuid

import pytest

from recovery.models import Attempt, Observation, Run, Task
from recovery.ops.processes import Supervisor, free_port, http_ok, manage_py, wait_until
from tests.support.engine_procs import child_env

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

PAGES = 5000
SECRETS = {
    "SECRET_KEY": "prod-test-secret-key-5f2a9c1e7d",
    "MESSORA_API_KEY": "prod-test-messora-key-8b1d",
    "WEBSCRAPER_API_TOKEN": "prod-test-webscraper-token-4c7e",
}


def get(url: str, **headers: str) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=20) as response:
        return response.status, dict(response.headers), response.read()


def run_state(run_id: int) -> str:
    return Run.objects.filter(pk=run_id).values_list("acceptance_state", flat=True)[0]


def test_it_accepts_5000_pages_on_redis_workers_while_one_cluster_is_killed(
    postgres_only, redis_url, tmp_path
):
    import redis

    from recovery import counters
    from recovery.intake import manifests, specs
    from recovery.sandbox import server

    cluster_name = f"salvage-prod-{uuid.uuid4().hex[:8]}"  # its own Redis list
    web_port = free_port()
    sandbox_port = free_port()
    base_url = f"http://127.0.0.1:{sandbox_port}"
    static_root = tmp_path / "static"
    env = child_env(
        DJANGO_SETTINGS_MODULE="recovery.settings",  # the production settings, from env only
        REDIS_URL=redis_url,
        SALVAGE_Q_NAME=cluster_name,
        SALVAGE_Q_WORKERS="2",
        SALVAGE_Q_TIMEOUT="60",
        SALVAGE_LOG_FORMAT="json",
        SALVAGE_LOG_LEVEL="INFO",
        SALVAGE_Q_LOG_LEVEL="INFO",
        SALVAGE_STATIC_ROOT=str(static_root),
        SALVAGE_DATA_DIR=str(tmp_path / "var"),
        SALVAGE_ALLOWED_NETWORKS="127.0.0.0/8",
        SALVAGE_LEASE_SECONDS="5",
        SECURE_SSL_REDIRECT="0",  # plain http in the test; TLS ends at the proxy in production
        SALVAGE_METRICS_TOKEN="prod-test-metrics-token",
        **SECRETS,
    )
    env.pop("SALVAGE_INSECURE_DEV_KEY", None)

    supervisor = Supervisor(grace=20, log_dir=tmp_path / "logs")
    with supervisor:
        supervisor.start(
            "sandbox",
            manage_py("sandbox", "--port", str(sandbox_port), "--pages", str(PAGES), "--faults",
                      "mixed"),
            env=env,
        )  # fmt: skip
        wait_until(lambda: http_ok(f"{base_url}/_sandbox/state"), timeout=60, what="sandbox")
        # Keep the mixed page faults, drop the bad-retailer overlay: this run must pass its rules.
        urllib.request.urlopen(
            urllib.request.Request(
                f"{base_url}/_sandbox/faults",
                data=json.dumps({"bad_retailer": False}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            ),
            timeout=10,
        ).close()
        spec = tmp_path / "prod-shop.toml"
        spec.write_text(
            server.shop_spec_toml(name="prod-shop").replace(
                "auto_accept = false", "auto_accept = true"
            )
        )
        specs.load_dataset(spec)
        manifest = tmp_path / "prod-shop.csv"
        server.write_manifest(manifest, server.manifest_rows(base_url, pages=PAGES))
        run_id = manifests.create_run("prod-shop", "2026-11-29", manifest).run.pk

        collect = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"]
        assert supervisor.start("collectstatic", collect, env=env).popen.wait(timeout=120) == 0
        supervisor.start("dispatch", manage_py("dispatch", "--tick", "0.2"), env=env)
        for n in (1, 2, 3):
            supervisor.start(f"qcluster-{n}", manage_py("qcluster"), env=env)
        supervisor.start(
            "web",
            [sys.executable, "-m", "gunicorn", "recovery.wsgi:application", "--bind",
             f"127.0.0.1:{web_port}", "--workers", "2"],
            env=env,
        )  # fmt: skip
        web = f"http://127.0.0.1:{web_port}"
        wait_until(lambda: http_ok(f"{web}/healthz"), timeout=60, what="gunicorn")

        def terminal() -> int:
            from recovery.states.task import TERMINAL

            return sum(n for s, n in counters.by_state(run_id).items() if s in TERMINAL)

        wait_until(lambda: terminal() >= PAGES // 4, timeout=600, what="a quarter of the run")
        supervisor.kill("qcluster-2")  # SIGKILL: the cluster and its workers, mid-run
        killed_at = terminal()
        supervisor.start("qcluster-2", manage_py("qcluster"), env=env)
        wait_until(
            lambda: run_state(run_id) in ("accepted", "rejected"),
            timeout=900,
            interval=1.0,
            what="the run's acceptance",
        )

        # Production endpoints through gunicorn.
        assert get(f"{web}/healthz")[0] == 200
        status, _h, body = get(f"{web}/readyz")
        assert status == 200 and json.loads(body)["status"] == "ready"
        with pytest.raises(urllib.error.HTTPError) as denied:
            get(f"{web}/metrics")
        assert denied.value.code == 401
        status, headers, body = get(
            f"{web}/metrics", Authorization="Bearer prod-test-metrics-token"
        )
        metrics = body.decode()
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert "salvage_tasks{state=" in metrics and "salvage_claims_total" in metrics
        login = get(f"{web}/accounts/login/")[2].decode()
        css = next(
            line.split('href="')[1].split('"')[0]
            for line in login.splitlines()
            if 'rel="stylesheet"' in line and "/static/" in line
        )
        status, headers, _b = get(f"{web}{css}")
        assert status == 200 and "immutable" in headers.get("Cache-Control", "")

    # The run: accepted, every task terminal, one observation per committed task.
    assert run_state(run_id) == "accepted"
    assert killed_at < PAGES
    states = dict(counters.by_state(run_id))
    assert sum(states.values()) == PAGES
    assert not set(states) - {"committed", "gone", "quarantined", "dead"}
    assert (
        Task.objects.filter(run_id=run_id)
        .exclude(state__in=["committed", "gone", "quarantined", "dead"])
        .count()
        == 0
    )
    committed = Task.objects.filter(run_id=run_id, state="committed").count()
    assert Observation.objects.filter(run_id=run_id).count() == committed
    assert Attempt.objects.filter(run_id=run_id, outcome="committed").values("task").distinct(
    ).count() == committed  # fmt: skip

    # Structured logs: JSON lines, never a configured secret.
    for name in ("dispatch", "qcluster-1", "qcluster-3", "web"):
        text = (tmp_path / "logs" / f"{name}.log").read_text()
        for secret in (*SECRETS.values(), "prod-test-metrics-token"):
            assert secret not in text, f"{name} logged a secret"
    lines = [
        line
        for line in (tmp_path / "logs" / "dispatch.log").read_text().splitlines()
        if line.startswith("{")
    ]
    assert lines and all("level" in json.loads(line) for line in lines)

    # Our own Redis list only: never a FLUSHALL on a shared server.
    redis.Redis.from_url(redis_url).delete(cluster_name)
