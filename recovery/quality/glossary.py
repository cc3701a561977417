"""The glossary: the one definition, in words, of every figure the dashboard shows.

The glossary page, the tooltip next to each figure and README's dashboard section use these
words (a test compares them); recovery/quality/figures.py computes each figure exactly as its
words say. Numbers the words state are defined here with them.
"""

from __future__ import annotations

# Throughput averages this many worker-active minutes (recovery.quality.figures.throughput).
RATE_MINUTES = 10

GLOSSARY: dict[str, tuple[str, str]] = {
    "committed_coverage": (
        "Committed coverage",
        "Committed tasks / all tasks of the run. A task is one page, however many attempts "
        "it took. It says how much was fetched and extracted; it is not what acceptance judges.",
    ),
    "acceptance_coverage": (
        "Acceptance coverage",
        "The value of the dataset's coverage rule at its last evaluation: valid observations "
        "outside held partitions / tasks of the page types that extract fields. A run can be "
        "accepted only when it reaches the rule's minimum, shown beside it.",
    ),
    "settled": (
        "Settled",
        "Tasks in a final state (committed, gone, quarantined or dead) / all tasks of the run.",
    ),
    "throughput": (
        "Throughput",
        f"Tasks settled per minute, averaged over the last {RATE_MINUTES} whole minutes within "
        "the past hour in which a worker held one of the run's leases (an attempt of the run "
        "finished in that minute). Idle minutes do not count; none when nothing ran. A run "
        f"with fewer than {RATE_MINUTES} such minutes (one just started, or a short one) "
        "counts the current minute too, and divides by the seconds it was active in those "
        "minutes since its first attempt started.",
    ),
    "eta": (
        "ETA",
        "Tasks not yet settled / throughput. Shown only while the run is collecting, at least "
        "one task worker is alive and nothing blocks the run; never on a candidate, accepted, "
        "published or rejected run.",
    ),
    "worker_alive": (
        "Alive task worker",
        "A process that runs tasks (a work loop, or a qcluster and its worker processes) whose "
        "heartbeat is recent: within SALVAGE_WORKER_ALIVE_SECONDS (30 s by default; the workers "
        "page's legend shows the value in force), and that has not stopped. The dispatcher and "
        "the delivery loop run no task: they are not counted.",
    ),
    "blocked": (
        "Blocked",
        "A collecting run that cannot progress without someone: tasks that await a reconcile "
        "decision (a provider submission whose outcome is unknown or whose job the provider "
        "cannot find), or no task worker alive to do the work.",
    ),
    "credits": (
        "Credits used",
        "The sum of the credits the provider jobs of the run reported.",
    ),
    "inventory_drift": (
        "Inventory drift",
        "Items that appeared at the front of an offset listing while it was walked: the run's "
        "tasks found only by re-reading the listing's head after the walk "
        '(discovery = "drift").',
    ),
    "sitemap_progress": (
        "Sitemap discovery",
        "Sitemap files read / sitemap files known: a file is read when its task is final "
        "(committed, gone, quarantined or dead), and known once the run's sitemap or an index "
        "lists it. URLs listed: the URLs in the committed files after lastmod_since, a URL "
        "counted once per file that lists it (it is one task however many list it).",
    ),
    "rule_result": (
        "Rule result",
        "A rule's value for the run or one partition, compared with its threshold: at least "
        "the minimum for coverage, required and outcome_ratio rules; at most the maximum "
        "share of invalid values for value and partition rules. Pass or fail follows. A "
        "partition rule's run-level row has no value of its own: it passes, and names the "
        "partitions over the maximum that it holds out of the candidate.",
    ),
    "window_gate": (
        "Window-over-window rule",
        "A rule that compares a candidate with the dataset's previous accepted window: the "
        "accepted or published run whose window comes last before the candidate's (windows "
        "ordered as text). Entity count change: accepted entities (valid rows outside held "
        "partitions) now against then, the drop at most max_drop and the rise at most max_rise. "
        "Disappeared entities: the share of the previous window's accepted entities not "
        "accepted now, at most max_share. Value shift: a numeric field's median and high "
        "quantile now against then, each moved by at most max_change of its previous value. "
        "The first window of a dataset passes them: no previous accepted window.",
    ),
    "batch_tasks": (
        "Tasks reset by a batch",
        "The run's settled tasks that match every selected kind (partitions, page types, error "
        "classes, failed rules; any value within a kind), counted by the same query that "
        "resets them. The confirmation shows this exact number.",
    ),
    "batch_outcome": (
        "Recovered / still failing / dead",
        "Of a batch's tasks: recovered ended committed with valid data (every row it produced "
        "passes the rules after the batch); still failing ended quarantined, or committed with "
        "data still invalid or held; dead ended dead (retry budget exhausted); gone ended gone "
        "(404 or 410). Counted when the batch completes.",
    ),
    "batch_sources": (
        "From the archive / fetched",
        "Of a batch's pages: from the archive were re-extracted from the page archive, "
        "with no request to the site; fetched were requested again, because the batch does not "
        "re-extract or because the archive no longer held the page (removed, expired, or never "
        "kept). Each task counted once, whatever its retries.",
    ),
}
