"""A django-q2 cluster that only its main process stops: SIGTERM to the whole process group
drains it exactly like SIGTERM to the main process.

django-q2 1.11.1's sentinel gives SIGTERM back its default action, and its pusher, monitor and
worker processes inherit that. SIGTERM sent to every process of the cluster (systemd's default
`KillMode=control-group`, `kill -TERM -<pgid>`, a container runtime's stop through an init that
forwards to the group) killed each worker in the middle of its batch: 50-100 tasks stayed
leased until their lease expired, 5 minutes later. SIGTERM to the main process alone drained in
seconds. So here (`manage.py qcluster` runs this Cluster):

- The sentinel and every process it forks ignore SIGTERM while their main process lives, as
  django-q2 already has them ignore SIGINT (Ctrl-C signals the whole foreground group). Stopping
  is the main process's job: whatever reached it (a signal to it alone or to the group), it
  calls `Cluster.request_stop`, and django-q2's own drain runs: the pusher stops, each worker
  finishes the wake-up in hand (claim, execute, commit) and takes the STOP pill behind it.
- `request_stop` also raises a flag in memory the cluster's processes share (created before the
  sentinel is forked, so every worker inherits it): a wake-up that a worker takes from the
  prefetch queue after it claims nothing (`requested()`, asked by
  `recovery.tasks.run_batch_task`). The drain is the batches in flight, not the queue behind.
- The signals are blocked in the main process while it forks the sentinel, and the sentinel
  unblocks them once its handler is installed: a group SIGTERM during start-up cannot catch the
  sentinel with django-q2's default action in place.
- Ignoring SIGTERM has two costs, both paid here. django-q2 stops a worker that overran its
  timeout with SIGTERM: ours gets SIGKILL. A sentinel whose main process is gone (SIGKILLed)
  has nobody to ask it to stop: on SIGTERM it stops itself, as it did before. Processes still
  alive after the drain (a stuck monitor) are killed too, since multiprocessing's exit would
  SIGTERM them and wait for ever. And a sentinel that dies (SIGKILL, a fault in django-q2)
  takes its processes with it (Linux: the parent-death signal): orphans that ignore SIGTERM
  would otherwise run beside the cluster a supervisor starts in its place.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
import uuid
from multiprocessing import Event, current_process
from time import sleep

from django_q import cluster as q_cluster

log = logging.getLogger(__name__)

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
# How long the sentinel waits for a leftover process to die after SIGKILL.
KILL_WAIT_SECONDS = 5.0

# The stop flag in shared memory: created by Cluster.start in the main process before it forks,
# so the sentinel and the workers it forks read the same byte. None outside a cluster.
_stopping = None


def requested() -> bool:
    """True in a cluster's processes once the cluster was asked to stop."""
    return _stopping is not None and bool(_stopping.value)


_PR_SET_PDEATHSIG = 1


def _die_with_parent(sentinel: object) -> None:
    """In each process the sentinel forks (multiprocessing's after-fork hook, run in the
    child): SIGKILL when the sentinel dies. They ignore SIGTERM, so nothing else ends them."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != getattr(sentinel, "pid", None):
        os._exit(1)  # the sentinel died before the signal was armed


class Cluster(q_cluster.Cluster):
    def __init__(self, broker=None) -> None:
        # django-q2 installs a handler here that stops the cluster from inside the signal
        # handler, which can deadlock (django-q2 issue #346). The command keeps its own
        # (recovery.ops.stopping) and calls request_stop from its loop.
        handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        super().__init__(broker)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

    def start(self) -> int:
        """django-q2's Cluster.start (1.11.1, pinned), with this module's Sentinel, forked with
        the stop signals blocked, and the shared stop flag created first."""
        global _stopping
        if q_cluster.setproctitle:
            q_cluster.setproctitle.setproctitle(f"qcluster {current_process().name} {self.name}")
        _stopping = q_cluster.get_mp_context().RawValue("b", 0)
        self.stop_event = Event()
        self.start_event = Event()
        self.sentinel = q_cluster.get_mp_context().Process(
            target=Sentinel,
            name=f"Process-{uuid.uuid4().hex}",
            args=(self.stop_event, self.start_event, self.cluster_id, self.broker, self.timeout),
        )
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.sentinel.start()
        finally:
            # Delivered now, if one came meanwhile: to our handler (the sentinel has its own).
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        log.info("Q Cluster %s starting.", self.name)
        # As django-q2: poll, never wait() (a signal while blocked there can deadlock).
        while self.start_event and not self.start_event.is_set():
            if not self.sentinel.is_alive():
                if self.sentinel.exitcode == 0:
                    break  # stopped while starting
                raise RuntimeError(
                    f"Q Cluster {self.name} failed to start: sentinel exited "
                    f"with code {self.sentinel.exitcode}"
                )
            sleep(0.1)
        return self.pid

    def request_stop(self) -> None:
        """Drain: each worker finishes the wake-up in hand and takes no other; then the cluster
        exits. The event is set from a thread: a sentinel SIGKILLed while it held the event's
        lock would block the caller for ever."""
        if _stopping is not None:
            _stopping.value = 1
        if self.stop_event is not None:
            threading.Thread(target=self.stop_event.set, name="cluster-stop", daemon=True).start()


class Sentinel(q_cluster.Sentinel):
    """django-q2's sentinel; its processes leave stopping to the cluster's main process."""

    def start(self) -> None:
        # django-q2's __init__ calls this once it has set the process up (SIGTERM back to its
        # default action, SIGINT ignored); the signals are still blocked from the fork.
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        multiprocessing.util.register_after_fork(self, _die_with_parent)
        super().start()

    def _on_sigterm(self, signum, frame) -> None:
        if os.getppid() == self.parent_pid:
            return  # the main process got it too (or sent it): it asks for the drain
        # Orphaned: no main process will ask, so stop as django-q2 would, from a thread.
        if _stopping is not None:
            _stopping.value = 1
        threading.Thread(target=self.stop_event.set, name="cluster-stop", daemon=True).start()

    def spawn_process(self, target, *args):
        # Pusher, monitor and workers ignore SIGTERM (inherited across the fork): a worker
        # ends after the wake-up in hand, when it takes a STOP pill from the sentinel's drain.
        handler = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            return super().spawn_process(target, *args)
        finally:
            signal.signal(signal.SIGTERM, handler)

    def reincarnate(self, process) -> None:
        overran = getattr(process, "timer", None) is not None and process.timer.value == 0
        super().reincarnate(process)  # terminate()s an overrunning worker: SIGTERM, ignored
        if overran and process.is_alive():
            process.kill()

    def stop(self) -> None:
        super().stop()  # django-q2's drain: pusher, STOP pills, workers, monitor
        for child in multiprocessing.active_children():
            log.warning("%s still running after the drain: killing it", child.name)
            child.kill()
            child.join(KILL_WAIT_SECONDS)
