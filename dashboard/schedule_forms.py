"""The Schedules form: the browser's `manage.py schedule add` (and its edit).

The form only lays the command's options out as fields and composes them back into the
command's values (`--daily 06:00`, `--weekly 'mon 06:00'`, `--catch-up each:7`); every rule
is recovery.intake.schedules.check_settings, the function the command calls, and each refusal it
names is shown beside the field it is about.
"""

from __future__ import annotations

from django import forms
from django.conf import settings as django_settings

from recovery.intake import schedules
from recovery.models import Dataset, Schedule

# The engine's field names (ScheduleError.field) -> this form's fields.
FIELDS = {
    "recurrence": "repeat",
    "daily": "at",
    "weekly": "at",
    "cron": "cron",
    "tz": "tz",
    "window_format": "window_format",
    "manifest": "manifest",
    "catch_up": "catch_up",
    "name": "name",
    "dataset": "dataset",
    "from": "start",
    "to": "stop",
}


class ScheduleForm(forms.Form):
    dataset = forms.ChoiceField()
    name = forms.CharField(max_length=100, help_text="A-Z a-z 0-9 _ -, e.g. nightly")
    repeat = forms.ChoiceField(
        choices=Schedule.Kind.choices, widget=forms.RadioSelect, initial=Schedule.Kind.DAILY
    )
    at = forms.CharField(
        required=False,
        max_length=20,
        label="At",
        help_text="daily and weekly: local time HH:MM",
        widget=forms.TextInput(attrs={"placeholder": "06:00"}),
    )
    weekday = forms.ChoiceField(
        required=False, choices=[(d, d) for d in schedules.WEEKDAYS], help_text="weekly"
    )
    cron = forms.CharField(
        required=False,
        max_length=200,
        label="Cron expression",
        help_text="cron: 5 fields, in the schedule's time zone",
        widget=forms.TextInput(attrs={"placeholder": "0 6 * * 1-5"}),
    )
    tz = forms.CharField(
        max_length=64, initial="UTC", label="Time zone", help_text="IANA, e.g. Europe/London"
    )
    window_format = forms.CharField(
        max_length=64,
        initial="%Y-%m-%d",
        label="Window naming rule",
        help_text="strftime of the due instant's local time, e.g. %Y-%m-%d or %G-W%V",
    )
    manifest = forms.CharField(
        max_length=2000,
        label="Manifest source",
        help_text="an http(s) URL, 'previous' (the previous window's manifest and what it "
        "discovered) or a file under SALVAGE_SCHEDULE_MANIFEST_DIR",
    )
    catch_up = forms.ChoiceField(
        choices=[
            (Schedule.CatchUp.LATEST, "latest: after a gap, only the newest missed window"),
            (Schedule.CatchUp.EACH, "each: every missed window, oldest first, at most N"),
        ],
        initial=Schedule.CatchUp.LATEST,
        label="Catch-up",
    )
    catch_up_max = forms.CharField(
        required=False,
        max_length=10,
        label="N (each: the most missed windows made at once, 1 to 366)",
        widget=forms.NumberInput(attrs={"min": 1, "max": 366}),
    )
    paused = forms.BooleanField(
        required=False,
        label="Paused (windows due until it is resumed are skipped: no run is made for them)",
    )

    def __init__(self, *args, schedule: Schedule | None = None, **kwargs) -> None:
        self.schedule = schedule
        if schedule is not None:
            kwargs.setdefault("initial", initial(schedule))
        super().__init__(*args, **kwargs)
        if schedule is not None:  # a schedule's dataset and name are what names it: fixed
            del self.fields["dataset"], self.fields["name"]
        else:
            names = Dataset.objects.order_by("name").values_list("name", flat=True)
            self.fields["dataset"].choices = [(n, n) for n in names]
        self.settings: schedules.Settings | None = None

    def clean(self):
        data = super().clean()
        if "name" in data:
            try:
                schedules.check_name(data["name"])
            except schedules.ScheduleError as exc:
                self.add_error("name", str(exc))
        kind = data.get("repeat")
        catch_up = data.get("catch_up") or ""
        if catch_up == Schedule.CatchUp.EACH:
            catch_up = f"each:{data.get('catch_up_max', '').strip()}"
        try:
            self.settings = schedules.check_settings(
                **({kind: self._recurrence(kind)} if kind else {}),
                tz=data.get("tz", ""),
                window_format=data.get("window_format", ""),
                source=data.get("manifest", ""),
                catch_up=catch_up,
                within=self._within(data.get("manifest", "")),
            )
        except schedules.ScheduleErrors as exc:
            for error in exc.errors:
                self.refuse(error)
        return data

    def refuse(self, error: schedules.ScheduleError) -> None:
        """Show an engine refusal beside its field (the form's own when it has no field)."""
        field = FIELDS.get(error.field)
        if field in self.errors:
            return  # already refused by the form (a required field left empty)
        self.add_error(field if field in self.fields else None, str(error))

    def _recurrence(self, kind: str) -> str:
        at = self.cleaned_data.get("at", "")
        if kind == Schedule.Kind.WEEKLY:
            return f"{self.cleaned_data.get('weekday') or ''} {at}".strip()
        return self.cleaned_data.get("cron", "") if kind == Schedule.Kind.CRON else at

    def _within(self, source: str):
        # An edit that keeps a file set by the command line keeps it; a new file named in the
        # browser must be in the manifest directory (a dashboard admin reads no other file).
        if self.schedule is not None and source.strip() == self.schedule.manifest_source:
            return None
        return django_settings.SALVAGE_SCHEDULE_MANIFEST_DIR


def initial(schedule: Schedule) -> dict[str, object]:
    return {
        "repeat": schedule.kind,
        "at": f"{schedule.at_time:%H:%M}" if schedule.at_time else "",
        "weekday": schedules.WEEKDAYS[schedule.weekday - 1] if schedule.weekday else "mon",
        "cron": schedule.cron,
        "tz": schedule.time_zone,
        "window_format": schedule.window_format,
        "manifest": schedule.manifest_source,
        "catch_up": schedule.catch_up,
        "catch_up_max": schedule.catch_up_max if schedule.catch_up == "each" else "",
        "paused": schedule.paused,
    }


class BackfillForm(forms.Form):
    """The browser's `manage.py schedule backfill DATASET NAME --from ... --to ...`: the range
    is read and checked by recovery.intake.backfill.plan, whose refusals show beside it."""

    start = forms.CharField(
        max_length=32,
        label="From",
        help_text="a date (2026-11-01) or date and time (2026-11-01T06:00), in the schedule's zone",
    )
    stop = forms.CharField(
        max_length=32,
        label="To",
        help_text="a date (that whole day) or date and time (included); at most now",
    )
    reason = forms.CharField(
        required=False,
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "reason (optional)"}),
        help_text="recorded in the audit log",
    )

    def refuse(self, error: schedules.ScheduleError) -> None:
        field = FIELDS.get(error.field)
        self.add_error(field if field in self.fields else None, str(error))
