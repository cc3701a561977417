"""manage.py schedule add|list|pause|resume|remove|backfill: recurring collections.

  schedule add DATASET NAME (--daily HH:MM | --weekly 'mon HH:MM' | --cron 'M H D M W')
               --manifest (FILE | URL | sitemap:URL | previous)
               [--tz Europe/London] [--window-format %Y-%m-%d]
               [--catch-up latest | each:N]
  schedule list [DATASET]
  schedule pause|resume|remove DATASET NAME [--reason TEXT]
  schedule backfill DATASET NAME --from DATE[THH:MM] --to DATE[THH:MM] [--reason TEXT]
               [--dry-run]

Windows due while a schedule is paused are skipped: resuming makes no run for them. Bad input
exits with code 2 and names the option at fault; a backfill stopped by a manifest that fails
exits with 1. Every change is audited (recovery.intake.schedules, recovery.intake.backfill) as
`cli:<operating-system user>`, or the name `--actor` gives.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from recovery.intake import backfill, schedules
from recovery.management.commands._accept_cli import actor
from recovery.models import Schedule

ACTOR_HELP = "name recorded in the audit log (default: cli:<user>)"


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
        add.add_argument("--actor", help=ACTOR_HELP)
        listing = sub.add_parser("list", help="list schedules with their next and last windows")
        listing.add_argument("dataset", nargs="?")
        helps = {
            "pause": "pause a schedule: windows due until it is resumed are skipped",
            "resume": "resume a schedule (the windows due while it was paused stay skipped)",
            "remove": "remove a schedule (its runs stay)",
        }
        for verb, text in helps.items():
            p = sub.add_parser(verb, help=text)
            p.add_argument("dataset")
            p.add_argument("name")
            p.add_argument("--reason", default="")
            p.add_argument("--actor", help=ACTOR_HELP)
        back = sub.add_parser(
            "backfill", help="make a schedule's windows over a past range, each once"
        )
        back.add_argument("dataset")
        back.add_argument("name")
        back.add_argument(
            "--from", dest="start", required=True, help="a date or date and time, local"
        )
        back.add_argument(
            "--to", dest="stop", required=True, help="a date (the whole day) or date and time"
        )
        back.add_argument("--reason", default="")
        back.add_argument("--dry-run", action="store_true", help="list the windows, make nothing")
        back.add_argument("--actor", help=ACTOR_HELP)

    def handle(self, *args, **options) -> None:
        verb = options["verb"]
        try:
            if verb == "add":
                line = self.add(options)
            elif verb == "list":
                line = self.listing(options.get("dataset"))
            elif verb == "backfill":
                line = self.backfill(options)
            elif verb == "remove":
                schedules.remove(
                    options["dataset"],
                    options["name"],
                    actor=actor(options["actor"]),
                    reason=options["reason"],
                )
                line = f"schedule {options['dataset']}/{options['name']} removed"
            else:
                changed = schedules.set_paused(
                    options["dataset"],
                    options["name"],
                    verb == "pause",
                    actor=actor(options["actor"]),
                    reason=options["reason"],
                )
                state = "paused" if verb == "pause" else "active"
                line = f"schedule {options['dataset']}/{options['name']} " + (
                    state if changed else f"was already {state}"
                )
                if changed:  # the rule, then what it did (the first line is what scripts read)
                    line += "\n" + self.paused_rule(options, verb == "pause")
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
        schedule = schedules.create(
            options["dataset"], options["name"], settings, actor=actor(options["actor"])
        )
        upcoming = schedules.next_due(schedule, timezone.now())
        first = schedules.window_for(schedule, upcoming) if upcoming else "none"
        return f"schedule {schedule} added: next window {first}"

    def paused_rule(self, options, paused: bool) -> str:
        if paused:
            return "windows due until it is resumed are skipped: no run is made for them"
        schedule = schedules.find(options["dataset"], options["name"])
        return schedules.skipped_line(schedule)

    def backfill(self, options) -> str:
        args = (options["dataset"], options["name"], options["start"], options["stop"])
        if options["dry_run"]:
            planned = backfill.plan(*args)
            return "\n".join(
                f"{w.window}\t{planned.label(w.instant)}\t"
                + (f"adopt run {w.run_id}" if w.run_id else "make")
                for w in planned.windows
            )
        result = backfill.backfill(*args, actor=actor(options["actor"]), reason=options["reason"])
        if result.failed:
            raise CommandError(result.line(), returncode=1)
        return result.line()

    def listing(self, dataset: str | None) -> str:
        rows = Schedule.objects.select_related("dataset").order_by("dataset__name", "name")
        if dataset:
            rows = rows.filter(dataset__name=dataset)
        now = timezone.now()
        lines = []
        for row in schedules.overview(rows, now):
            s, d = row["schedule"], row["describe"]
            if s.paused:
                since = f" since {s.paused_at:%Y-%m-%d %H:%M %Z}" if s.paused_at else ""
                state = f"paused{since} (windows due meanwhile are skipped)"
            elif row["overdue"]:
                at, window = row["overdue"]
                state = f"overdue: {window} due {at:%Y-%m-%d %H:%M %Z}, no run made"
            else:
                state = "active"
            lines.append(
                f"{s}\t{d['recurrence']}\t{state}\t"
                f"last {s.last_window or '-'}\t"
                f"next {row['next_window'] or '-'}"
                + (f"\terror: {s.last_error}" if s.last_error else "")
            )
        return "\n".join(lines) or "no schedules"
