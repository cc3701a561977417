"""Dashboard forms: GET filters for lists and the small POST forms behind each button."""

from __future__ import annotations

from django import forms

from recovery.models import OutboxEvent
from recovery.providers.base import ErrorClass
from recovery.states.delivery import DeliveryState
from recovery.states.remote_job import RECONCILE, RemoteJobState
from recovery.states.run import RunState

REASON_MAX = 2000


def _blank(choices) -> list[tuple[str, str]]:
    return [("", "any"), *[(value, label) for value, label in choices]]


class RunFilterForm(forms.Form):
    dataset = forms.CharField(required=False, max_length=100)
    state = forms.ChoiceField(required=False, choices=_blank(RunState.choices))


class QuarantineFilterForm(forms.Form):
    partition = forms.CharField(required=False, max_length=200)
    error_class = forms.CharField(required=False, max_length=32)


class ReconcileFilterForm(forms.Form):
    state = forms.ChoiceField(
        required=False,
        choices=[("", "needs a decision"), *RemoteJobState.choices],
    )
    provider = forms.CharField(required=False, max_length=32)
    run = forms.IntegerField(required=False, min_value=1)

    def states(self) -> list[str]:
        chosen = self.cleaned_data.get("state") if self.is_valid() else ""
        return [chosen] if chosen else sorted(RECONCILE)


class DeliveryFilterForm(forms.Form):
    state = forms.ChoiceField(required=False, choices=_blank(DeliveryState.choices))
    event_type = forms.ChoiceField(required=False, choices=_blank(OutboxEvent.Kind.choices))


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    action = forms.CharField(required=False, max_length=64)
    object_type = forms.CharField(required=False, max_length=64)


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "reason (required)"}),
    )


class AttachJobForm(ReasonForm):
    provider_job_id = forms.CharField(max_length=200)


class NoteForm(forms.Form):
    text = forms.CharField(max_length=5000, widget=forms.Textarea(attrs={"rows": 3}))
    partition = forms.CharField(required=False, max_length=200)
    task = forms.IntegerField(required=False, min_value=1)


class ReviewedForm(forms.Form):
    partition = forms.CharField(max_length=200)


class RecoveryBatchForm(forms.Form):
    """A selection (several partitions, page types, error classes or failed rules at once)."""

    partitions = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    page_types = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    error_classes = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    rules = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    reason = forms.CharField(max_length=REASON_MAX, widget=forms.Textarea(attrs={"rows": 2}))
    scraper_version = forms.CharField(max_length=64)

    def __init__(
        self,
        *args,
        partitions: list[str],
        page_types: list[str],
        rules: list[str],
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.fields["partitions"].choices = [(p, p or "(none)") for p in partitions]
        self.fields["page_types"].choices = [(p, p) for p in page_types]
        self.fields["error_classes"].choices = [(e.value, e.value) for e in ErrorClass]
        self.fields["rules"].choices = [(r, r) for r in rules]

    def clean(self):
        data = super().clean()
        if not any(data.get(f) for f in ("partitions", "page_types", "error_classes", "rules")):
            raise forms.ValidationError(
                "Select at least one partition, page type, error class or failed rule."
            )
        return data
