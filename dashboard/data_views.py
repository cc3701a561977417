"""The exporter's home (the datasets they may read, with the commands that fetch them) and the
API tokens page (make a token, shown once; revoke one; admins do both for other users).

Tokens are the engine's (recovery.consumers.tokens): these views bind a form and call it once.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard import confirm, engine
from dashboard.lists import BadList
from recovery.consumers import catalogue, feed, tokens
from recovery.consumers.models import ApiToken
from recovery.delivery import exports
from recovery.models import Dataset, Run
from recovery.quality.confirmations import Consequence
from recovery.states.run import AVAILABLE

DEFAULT_DAYS = 90


@login_required
@require_GET
@permission_required(tokens.EXPORTER_PERMISSION, raise_exception=True)
def data_home(request: HttpRequest) -> HttpResponse:
    """Every dataset an exporter may read: its version, current run, rows, published time,
    formats, downloads, and copy-paste commands for the API."""
    only_accepted = _only_accepted(request)
    feed.sequence()  # the feed's newest events numbered, so each version is current
    api = request.build_absolute_uri(reverse("api:datasets")).removesuffix("datasets")
    datasets = Dataset.objects.all()
    if only_accepted:
        available = Run.objects.filter(dataset=OuterRef("pk"), acceptance_state__in=AVAILABLE)
        datasets = datasets.filter(Exists(available))
    readable = catalogue.readable(datasets)
    # What can be downloaded first, by name within each group (sort is stable).
    readable.sort(key=lambda found: found["current_run"] is None)
    rows = []
    for found in readable:
        base = f"{api}datasets/{found['name']}"
        rows.append(
            {
                **found,
                "curl": [
                    f'curl -fsS -H "Authorization: Bearer $TOKEN" {base}/current.{fmt} '
                    f"-o {found['name']}.{fmt}"
                    for fmt in exports.FORMATS
                ]
                + [
                    f'curl -fsS -H "Authorization: Bearer $TOKEN" '
                    f'"{base}/changes?since={found["version"]}"'
                ],
                "python": python_lines(f"{base}/current.parquet"),
            }
        )
    return render(
        request,
        "dashboard/data_home.html",
        {
            "datasets": rows,
            "api": api,
            "formats": exports.FORMATS,
            "only_accepted": only_accepted,
        },
    )


def _only_accepted(request: HttpRequest) -> bool:
    """`?accepted=1`: only datasets with an accepted run. Anything else is refused by name, as
    the lists refuse a parameter they cannot use (a typo must not look like "no filter")."""
    unknown = sorted(set(request.GET) - {"accepted"})
    if unknown:
        raise BadList(f"unknown parameter {unknown[0]!r}: this page takes only 'accepted'")
    value = request.GET.get("accepted", "")
    if value not in ("", "1"):
        raise BadList(f"accepted={value!r}: use accepted=1, or leave it out for every dataset")
    return value == "1"


def python_lines(url: str) -> list[str]:
    """Three lines of Python that read a dataset's Parquet into a pyarrow table."""
    return [
        "import io, os, urllib.request, pyarrow.parquet as pq",
        f'request = urllib.request.Request("{url}", '
        'headers={"Authorization": "Bearer " + os.environ["TOKEN"]})',
        "table = pq.read_table(io.BytesIO(urllib.request.urlopen(request).read()))",
    ]


# --- API tokens ------------------------------------------------------------------------------


def _may_manage(request: HttpRequest) -> bool:
    return request.user.has_perm(tokens.MANAGE_PERMISSION)


def _allowed(request: HttpRequest) -> None:
    """Exporters manage their own tokens; admins (manage_api_tokens) everyone's."""
    if not (request.user.has_perm(tokens.EXPORTER_PERMISSION) or _may_manage(request)):
        raise PermissionDenied


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'warehouse'.")
    days = forms.IntegerField(min_value=1, initial=DEFAULT_DAYS, help_text="Expires after.")
    all_datasets = forms.BooleanField(required=False, initial=True, label="Every dataset")
    datasets = forms.ModelMultipleChoiceField(
        queryset=Dataset.objects.order_by("name"),
        to_field_name="name",
        required=False,
        help_text="Or only these.",
    )
    user = forms.ModelChoiceField(queryset=get_user_model().objects.none(), required=False)

    def __init__(self, *args: Any, managing: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if managing:
            field = self.fields["user"]
            assert isinstance(field, forms.ModelChoiceField)
            field.queryset = get_user_model().objects.filter(is_active=True).order_by("username")
            field.help_text = "Whose token (default: yours)."
        else:
            del self.fields["user"]


def _tokens_page(
    request: HttpRequest, form: TokenForm, created: tokens.Created | None = None
) -> HttpResponse:
    response = render(
        request,
        "dashboard/api_tokens.html",
        {
            "form": form,
            "tokens": tokens.tokens_for(request.user, every_user=_may_manage(request)),
            "managing": _may_manage(request),
            "created": created,
            "now": timezone.now(),
        },
    )
    # The page may hold a token shown once: never kept by a cache or the browser's history.
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def api_tokens(request: HttpRequest) -> HttpResponse:
    _allowed(request)
    return _tokens_page(request, TokenForm(managing=_may_manage(request)))


@login_required
@require_POST
def api_token_create(request: HttpRequest) -> HttpResponse:
    _allowed(request)
    managing = _may_manage(request)
    form = TokenForm(request.POST, managing=managing)
    if not form.is_valid():
        return _tokens_page(request, form)
    owner = form.cleaned_data.get("user") if managing else None
    scope = None
    if not form.cleaned_data["all_datasets"]:
        scope = [dataset.name for dataset in form.cleaned_data["datasets"]]
    ok, created = engine.call(
        request,
        tokens.create_token,
        owner.pk if owner is not None else request.user.pk,
        name=form.cleaned_data["name"],
        datasets=scope,
        days=form.cleaned_data["days"],
        actor=request.user.get_username(),
    )
    if not ok:
        return _tokens_page(request, form)
    return _tokens_page(request, TokenForm(managing=managing), created)


@login_required
@require_http_methods(["POST"])
def api_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    _allowed(request)
    token = tokens.tokens_for(request.user, every_user=_may_manage(request)).filter(pk=token_id)
    found: ApiToken | None = token.first()
    if found is None:
        raise PermissionDenied
    if not confirm.confirmed(request):
        return confirm.page(
            request,
            title=f"Revoke token {found.prefix}…?",
            subject=f"{found.name} ({found.user.get_username()})",
            consequence=Consequence(
                effects=[
                    "every request with this token is refused from now on (401 token_revoked)",
                    "a revoked token cannot be restored: make a new one if needed",
                ],
                refusals=["it is already revoked"] if found.revoked_at else [],
            ),
            button="Yes, revoke it",
            back=reverse("dashboard:api_tokens"),
        )
    ok, _ = engine.call(
        request,
        tokens.revoke_token,
        found.pk,
        request.user.get_username(),
        actor_may_manage=_may_manage(request),
        actor_id=request.user.pk,
    )
    if ok:
        messages.success(request, f"Token {found.prefix}… revoked.")
    return redirect("dashboard:api_tokens")
