"""Dashboard forms: the small POST forms behind each button (list filters: dashboard.filtersets)."""

from __future__ import annotations

import base64
import binascii

from django import forms

REASON_MAX = 2000


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "reason (required)"}),
    )


class OptionalReasonForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "reason (optional)"}),
    )


class RerunForm(ReasonForm):
    """What a recovery batch of selected tasks records beside them (a list's bulk rerun)."""

    scraper_version = forms.CharField(max_length=64)


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
    # Re-extract the stored pages instead of fetching them (recovery.archive).
    from_archive = forms.BooleanField(required=False)

    def __init__(
        self,
        *args,
        partitions: list[str],
        page_types: list[str],
        rules: list[str],
        error_classes: list[tuple[str, str]],
        flagged: list[str] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        marked = set(flagged or ())
        self.fields["partitions"].choices = [
            (p, (p or "(none)") + (" (flagged)" if p in marked else "")) for p in partitions
        ]
        self.fields["page_types"].choices = [(p, p) for p in page_types]
        # Only the classes present in the run (recovery.quality.errorclasses), labelled with counts.
        self.fields["error_classes"].choices = error_classes
        self.fields["rules"].choices = [(r, r) for r in rules]

    def clean(self):
        data = super().clean()
        if not any(data.get(f) for f in ("partitions", "page_types", "error_classes", "rules")):
            raise forms.ValidationError(
                "Select at least one partition, page type, error class or failed rule."
            )
        return data


class SpecUploadForm(forms.Form):
    """A spec file, or the confirmation of a previewed new version (dataset_views): the same
    bytes again, base64 in a hidden field, with the hash of the version the diff was drawn
    against."""

    spec = forms.FileField(label="Spec file (.toml or .json)", required=False)
    staged = forms.CharField(required=False, widget=forms.HiddenInput, strip=False)
    staged_name = forms.CharField(required=False, max_length=255, widget=forms.HiddenInput)
    replaces = forms.RegexField(regex=r"^[0-9a-f]{64}$", required=False, widget=forms.HiddenInput)

    def clean(self):
        data = super().clean()
        if data.get("staged"):
            try:
                data["staged_bytes"] = base64.b64decode(data["staged"], validate=True)
            except (binascii.Error, ValueError):
                raise forms.ValidationError(
                    "the confirmed spec is not valid base64: upload the file again"
                ) from None
            if not data.get("staged_name"):
                self.add_error("staged_name", "required with a confirmed spec")
        elif not data.get("spec") and "spec" not in self.errors:
            self.add_error("spec", forms.Field.default_error_messages["required"])
        return data


class ManifestUploadForm(forms.Form):
    # The engine checks the window and the version (recovery.intake.manifests) so that a refusal
    # reads exactly as `createrun` words it; these caps only bound what is read.
    window = forms.CharField(max_length=200, help_text="e.g. 2026-11-29 or 2026-W48")
    # Optional for a dataset whose spec has a sitemap: the engine says when it is missing.
    manifest = forms.FileField(
        required=False,
        label="Manifest (.csv, .jsonl or .txt)",
        help_text="optional when the dataset's spec has a sitemap",
    )
    add = forms.BooleanField(
        required=False, label="Add its new URLs to the existing run of this window"
    )
    scraper_version = forms.CharField(
        required=False, max_length=200, help_text="blank: the spec's scraper_version"
    )
