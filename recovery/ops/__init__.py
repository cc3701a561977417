"""Ops: keeping the processes alive, quiet through outages, observable and stoppable.

In: the long processes (`work`, `qcluster`, `dispatch`, `deliver`, the web server). Out:
heartbeats and the one definition of alive (`liveness`), `/metrics`, `/healthz` and
`/readyz` (`metrics`, `views`, `urls`), redacted JSON logs (`logs`, `gunicorn_logging`), outage
handling (`outage`, `qcluster_outage`), signal handling (`stopping`), child process groups
(`processes`) and terminal progress (`progress`).
"""
