"""manage.py schedule add|list|pause|resume|remove: recurring collections (recovery.schedules).

  schedule add DATASET NAME (--daily HH:MM | --weekly 'mon HH:MM' | --cron 'M H D M W')
               --manifest (FILE | URL | sitemap:URL | previous)
               [--tz Europe/London] [--window-format %Y-%m-%d]
               [--catch-up latest | each:N]
  schedule list [DATASET]
  schedule pause|resume|remove DATASET NAME [--reason TEXT]

Bad input exits with code 2 and names the option at fault. Every change is audited.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from recovery import schedules
from recovery.models import Schedule

ACTOR = "cli"


class Command(BaseCommand):
    help = "Add, list, pause, resume or remove a dataset's recurring collection schedules."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="verb", required=True)
        add = sub.add_parser("add", help="add a schedule")
        add.add_argument("dataset")
        add.add_argument("name")
        add.add_argument("--daily", help="local time HH:MM")
        add.add_argument("--weekly", help="'<weekday> HH:MM', e.g. 'mon 06:00'")
        add.add_argument("--cron", help="a 5-field cron expression, in the schedule's zone")
        add.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
        add.add_argument("--window-format", default="%Y-%m-%d", help="strftime, e.g. %%G-W%%V")
        add.add_argument(
            "--manifest", required=True, help="a file, an http(s) URL, sitemap:<URL> or 'previous'"
        )
        add.add_argument("--catch-up", default="latest", help="latest (default) or each:N")
        listing = sub.add_parser("list", help="list schedules with their next and last windows")
        listing.add_argument("dataset", nargs="?")
        for verb in ("pause", "resume", "remove"):
            p = sub.add_parser(verb, help=f"{verb} a schedule")
            p.add_argument("dataset")
            p.add_argument("name")
            p.add_argument("--reason", default="")

    def handle(self, *args, **options) -> None:
        verb = options["verb"]
        try:
            if verb == "add":
                line = self.add(options)
            elif verb == "list":
                line = self.listing(options.get("dataset"))
            elif verb == "remove":
                schedules.remove(
                    options["dataset"], options["name"], actor=ACTOR, reason=options["reason"]
                )
                line = f"schedule {options['dataset']}/{options['name']} removed"
            else:
                changed = schedules.set_paused(
                    options["dataset"],
                    options["name"],
                    verb == "pause",
                    actor=ACTOR,
                    reason=options["reason"],
                )
                state = "paused" if verb == "pause" else "active"
                line = f"schedule {options['dataset']}/{options['name']} " + (
                    state if changed else f"was already {state}"
                )
        except schedules.ScheduleError as exc:
            raise CommandError(str(exc), returncode=2) from None
        self.stdout.write(line)

    def add(self, options) -> str:
        # The Schedules form checks with the same function (dashboard.schedule_forms).
        settings = schedules.check_settings(
            daily=options["daily"],
            weekly=options["weekly"],
            cron=options["cron"],
            tz=options["tz"],
            window_format=options["window_format"],
            source=options["manifest"],
            catch_up=options["catch_up"],
        )
        schedule = schedules.create(options["dataset"], options["name"], settings, actor=ACTOR)
        upcoming = schedules.next_due(schedule, timezone.now())
        first = schedules.window_for(schedule, upcoming) if upcoming else "none"
        return f"schedule {schedule} added: next window {first}"

    def listing(self, dataset: str | None) -> str:
        rows = Schedule.objects.select_related("dataset").order_by("dataset__name", "name")
        if dataset:
            rows = rows.filter(dataset__name=dataset)
        now = timezone.now()
        lines = []
        for s in rows:
            upcoming = schedules.next_due(s, now)
            d = schedules.describe(s)
            lines.append(
                f"{s}\t{d['recurrence']}\t{'paused' if s.paused else 'active'}\t"
                f"last {s.last_window or '-'}\t"
                f"next {schedules.window_for(s, upcoming) if upcoming else '-'}"
                + (f"\terror: {s.last_error}" if s.last_error else "")
            )
        return "\n".join(lines) or "no schedules"
