"""A Cloud dataset's sitemap, built and validated first (seed 002), then kept in step.

`push_sitemap(dataset, actor)` reads the file the spec names (`provider_options.sitemap_file`,
or the one given), checks it here (recovery.providers.webscraper_sitemaps.check: a bad file is
refused before anything is sent), then finds the account's copy: the spec's `sitemap_id`, else
the sitemap of the same name (`_id`), so pushing twice never makes two. None: it is created.
Different: it is updated. The same: nothing is written. The service validates too; its refusal
is kept as an Incident and reported. Afterwards the copy is read back and must equal the file,
and the dataset's spec records its `sitemap_id` (a new spec version, audited), so the next
launch names it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from recovery import audit
from recovery.ops import incidents
from recovery.providers.webscraper import WebScraperProvider
from recovery.providers.webscraper_sitemaps import (
    SitemapInvalid,
    SitemapRefused,
    SitemapUnavailable,
    load,
    same,
)
from recovery.remote.jobs import provider_for

CREATED = "created"
UPDATED = "updated"
UNCHANGED = "unchanged"


class SitemapError(ValueError):
    """Bad input: no such Cloud dataset, no sitemap file, a file that does not validate."""


class SitemapFailed(Exception):
    """The service refused the sitemap or could not be asked (nothing recorded here)."""


@dataclass(frozen=True)
class Pushed:
    dataset: str
    name: str  # the sitemap's name (_id)
    sitemap_id: int
    action: str  # CREATED, UPDATED or UNCHANGED
    spec_updated: bool


def sitemap_path(dataset_name: str, path: str | None = None) -> Path:
    """The sitemap file of a Cloud dataset: `path`, else the spec's sitemap_file (relative to
    the working directory)."""
    from recovery.models import Dataset

    dataset = Dataset.objects.filter(name=dataset_name).first()
    if dataset is None:
        raise SitemapError(f"dataset {dataset_name!r} does not exist")
    if dataset.provider != "webscraper":
        raise SitemapError(f"dataset {dataset_name}: provider {dataset.provider}, not webscraper")
    named = path or ((dataset.spec or {}).get("provider_options") or {}).get("sitemap_file")
    if not named:
        raise SitemapError(
            f"dataset {dataset_name}: no sitemap file (provider_options.sitemap_file or --file)"
        )
    return Path(str(named))


def check_file(path: Path) -> dict[str, Any]:
    """The sitemap in `path`, validated (SitemapError names the problem)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SitemapError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return load(data, str(path))
    except SitemapInvalid as exc:
        raise SitemapError(str(exc)) from None


def push_sitemap(dataset_name: str, actor: str, path: str | None = None) -> Pushed:
    from recovery.intake import specs
    from recovery.models import Dataset

    doc = check_file(sitemap_path(dataset_name, path))
    dataset = Dataset.objects.get(name=dataset_name)
    provider = provider_for(dataset)
    if not isinstance(provider, WebScraperProvider):  # sitemap_path checked the name already
        raise SitemapError(f"dataset {dataset_name}: not a Web Scraper Cloud dataset")
    known = provider.sitemap_id

    async def push() -> tuple[int, str]:
        api = provider.sitemaps()
        try:
            sitemap_id = int(known) if known not in (None, "") else None
            if sitemap_id is None:
                sitemap_id = next(
                    (int(s["id"]) for s in await api.listed() if s.get("name") == doc["_id"]),
                    None,
                )
            if sitemap_id is None:
                sitemap_id, action = await api.create(doc), CREATED
            elif same((await api.get(sitemap_id)).get("sitemap") or "", doc):
                action = UNCHANGED
            else:
                await api.update(sitemap_id, doc)
                action = UPDATED
            if action != UNCHANGED and not same(
                (await api.get(sitemap_id)).get("sitemap") or "", doc
            ):
                raise SitemapUnavailable(f"sitemap {sitemap_id} reads back different from the file")
            return sitemap_id, action
        finally:
            await provider.aclose()

    try:
        sitemap_id, action = asyncio.run(push())
    except SitemapRefused as exc:
        if exc.exchange is not None:
            incidents.record(
                exc.exchange,
                provider="webscraper",
                source="sitemap",
                outcome="refused",
                detail=f"dataset {dataset_name}, sitemap {doc['_id']}: {exc.detail}",
                request_options={"sitemap": doc["_id"], "sitemap_id": known},
            )
        raise SitemapFailed(f"Web Scraper Cloud refused sitemap {doc['_id']}: {exc}") from None
    except SitemapUnavailable as exc:
        raise SitemapFailed(f"sitemap {doc['_id']}: {exc}") from None

    with transaction.atomic():
        spec: dict[str, Any] = dict(dataset.spec or {})
        options = dict(spec.get("provider_options") or {})
        spec_updated = options.get("sitemap_id") != sitemap_id
        if spec_updated:
            spec["provider_options"] = {**options, "sitemap_id": sitemap_id}
            specs.save_dataset(spec, actor=actor)
        if action != UNCHANGED or spec_updated:
            audit.record(
                actor,
                f"cloud_sitemap_{action}",
                dataset,
                "",
                sitemap=doc["_id"],
                sitemap_id=sitemap_id,
            )
    return Pushed(dataset_name, doc["_id"], sitemap_id, action, spec_updated)
