"""manage.py cloudsitemap DATASET [--file F] [--check]: build and validate the sitemap first.

Checks the Cloud dataset's sitemap file (`provider_options.sitemap_file`, or --file) and, unless
--check, creates or updates it in the Web Scraper Cloud account through the API and records its
id in the dataset's spec (recovery.remote.cloud_sitemaps). Exit 2: bad input (no such dataset,
no file, a file that does not validate: the message names the selector or field); exit 1: the
service refused it (kept as an incident) or could not be reached.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery.management.commands._accept_cli import actor
from recovery.remote import cloud_sitemaps


class Command(BaseCommand):
    help = "Check a Web Scraper Cloud dataset's sitemap file, then create or update it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("dataset", help="a dataset whose provider is webscraper")
        parser.add_argument("--file", help="the sitemap JSON (default: its sitemap_file)")
        parser.add_argument("--check", action="store_true", help="validate only; send nothing")
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")

    def handle(self, *args, **options) -> None:
        try:
            path = cloud_sitemaps.sitemap_path(options["dataset"], options["file"])
            if options["check"]:
                doc = cloud_sitemaps.check_file(path)
                self.stdout.write(
                    f"sitemap {doc['_id']} ({path}) is valid: {len(doc['selectors'])} selector(s)"
                )
                return
            pushed = cloud_sitemaps.push_sitemap(
                options["dataset"], actor(options["actor"]), options["file"]
            )
        except cloud_sitemaps.SitemapError as exc:
            raise CommandError(str(exc), returncode=2) from None
        except cloud_sitemaps.SitemapFailed as exc:
            raise CommandError(str(exc), returncode=1) from None
        recorded = "; spec records it" if pushed.spec_updated else ""
        self.stdout.write(
            f"dataset {pushed.dataset}: sitemap {pushed.name} {pushed.action} as Cloud sitemap "
            f"{pushed.sitemap_id}{recorded}"
        )
