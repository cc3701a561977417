"""django-q2's cluster through a database or Redis outage: brokers that ride it out quietly
(Q_CLUSTER broker_class) and a log filter for the rest of django-q2's outage noise.

Left to itself, a cluster meets a database restart (ORM broker) or a Redis restart (Redis
broker) with a traceback per poll: the pusher logs "Failed to pull task from broker", sleeps
10 s and dies, the sentinel logs its reincarnation, and the sentinel's status save logs the
error every half second. These subclasses change only that: while the database or Redis does
not answer a probe (or answers again but dropped this process's connection), a dequeue waits
with the outage backoff (capped at SALVAGE_DB_RETRY_CAP) and returns nothing, a status save
or an acknowledgement is skipped, and the ORM broker is made without connecting (so a sentinel
starts). The one line per state change, and the exit past SALVAGE_DB_OUTAGE_LIMIT, come from
the qcluster command's own guard (recovery.management.commands.qcluster). An error whose
database or broker answers the probe is a real error and is raised as before, so django-q2 logs
it as ever. The other django-q2 lines an outage causes (its scheduler's "Could not create task
from schedule", a result it could not save) are dropped by recovery.ops.outage.QuietOutageFilter
on the same test.

A skipped acknowledgement leaves the ORM broker's row to be delivered again after `retry`:
harmless, since a queue item is only a wake-up and the lease table decides who works.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django_q.brokers import orm, redis_broker
from django_q.conf import Conf
from django_q.models import OrmQ

from recovery.ops import outage

log = logging.getLogger(__name__)


class _RidesOutOutages:
    _failures = 0

    def dequeue(self):
        try:
            tasks = super().dequeue()
        except outage.outage_errors() as exc:
            if not outage.ride_out(exc):
                raise
            self._failures += 1
            log.debug("dequeue: %s unavailable; waiting", outage.resource_of(exc)[0])
            time.sleep(outage.backoff(self._failures, settings.SALVAGE_DB_RETRY_CAP))
            return None
        self._failures = 0
        return tasks

    def set_stat(self, key: str, value: str, timeout: int):
        try:
            return super().set_stat(key, value, timeout)
        except outage.outage_errors() as exc:
            if not outage.ride_out(exc):
                raise
            return None  # the status is refreshed every half second once it is back

    def acknowledge(self, task_id):
        try:
            return super().acknowledge(task_id)
        except outage.outage_errors() as exc:
            if not outage.ride_out(exc):
                raise
            return None


class OrmBroker(_RidesOutOutages, orm.ORM):
    @staticmethod
    def get_connection(list_key: str | None = None):
        # django-q2 asks whether the connection is in autocommit, which connects: a sentinel
        # that met the database going away as it created its broker (a restart just after the
        # qcluster command's start-up probe) died there with a traceback. What it returns is
        # a lazy queryset: the query that uses it meets the outage where it is ridden out.
        try:
            return orm.ORM.get_connection(list_key)
        except outage.outage_errors() as exc:
            if not outage.ride_out(exc):
                raise
            return OrmQ.objects.using(Conf.ORM)


class RedisBroker(_RidesOutOutages, redis_broker.Redis):
    def ping(self) -> bool:
        # The sentinel pings once as it starts; django-q2's own ping logs and raises, so a
        # cluster (re)started while Redis is down died with a traceback. It starts instead, and
        # waits for Redis like a running one.
        try:
            return bool(self.connection.ping())
        except outage.broker_errors():
            return False
