"""manage.py sandbox: serve the local shop and provider simulators until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from aiohttp import web
from django.core.management.base import BaseCommand, CommandError

from recovery.sandbox import server, site


class Command(BaseCommand):
    help = "Serve the sandbox shop and provider simulators (prints the URL when listening)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
        parser.add_argument("--pages", type=int, default=1000)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--faults", default="none", help=", ".join(site.PROFILES))
        parser.add_argument(
            "--listing-insert-every",
            type=int,
            default=0,
            help="add a new item at the front of the listing every N offset-listing requests",
        )
        parser.add_argument("--spec-out", help="write a dataset spec (TOML) for this shop")
        parser.add_argument(
            "--scraper-version",
            type=int,
            default=1,
            choices=sorted(server.PRICE_SELECTORS),
            help="the spec's scraper version: 2 reads the bad retailer's new template",
        )
        parser.add_argument("--manifest-out", help="write a CSV manifest for this shop")
        parser.add_argument("--manifest-mode", default="products", choices=server.MANIFEST_MODES)
        parser.add_argument(
            "--partition-rule",
            default=None,
            choices=server.PARTITION_RULES,
            help="the spec's partition rule (default: host with --retailer-hosts, else manifest)",
        )
        parser.add_argument("--dataset-name", default="sandbox-shop")
        parser.add_argument(
            "--retailer-hosts",
            action="store_true",
            help="also listen on each retailer's own 127.0.0.x address (same port) and name "
            "those hosts in the manifest, so partition rule 'host' partitions by retailer",
        )

    def handle(self, *args, **options) -> None:
        if options["faults"] not in site.PROFILES:
            raise CommandError(
                f"--faults: {options['faults']!r} is not one of {', '.join(site.PROFILES)}",
                returncode=2,
            )
        if options["pages"] < 1:
            raise CommandError("--pages: must be at least 1", returncode=2)
        if options["retailer_hosts"] and options["host"] != "127.0.0.1":
            raise CommandError("--retailer-hosts: needs --host 127.0.0.1", returncode=2)
        if not 0 <= options["port"] <= 65535:
            raise CommandError("--port: must be between 0 and 65535", returncode=2)
        app = server.build_app(
            options["pages"],
            options["seed"],
            options["faults"],
            listing_insert_every=options["listing_insert_every"],
        )
        try:
            asyncio.run(self._serve(app, options))
        except OSError as exc:
            raise CommandError(f"--port: cannot listen: {exc}", returncode=2) from None

    async def _serve(self, app: web.Application, options: dict) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        # In-flight slow or streaming responses get 2 s to finish, then the exit goes ahead.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        try:
            tcp = web.TCPSite(runner, options["host"], options["port"], backlog=1024)
            await tcp.start()
            port = tcp._server.sockets[0].getsockname()[1]  # the bound port (for --port 0)
            if options["retailer_hosts"]:
                await server.listen_on_retailer_hosts(runner, port)
            host = options["host"]
            base_url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
            self._write_files(base_url, options)
            mounted = sorted(app[server.SIMULATORS_KEY])
            self.stdout.write(
                f"sandbox listening on {base_url}/ (pages={options['pages']} "
                f"seed={options['seed']} faults={options['faults']} "
                f"simulators={','.join(mounted) or 'none'}"
                f"{' retailer-hosts=127.0.0.2-6' if options['retailer_hosts'] else ''})"
            )
            sys.stdout.flush()
            await stop.wait()
        finally:
            await runner.cleanup()

    def _write_files(self, base_url: str, options: dict) -> None:
        if options["spec_out"]:
            Path(options["spec_out"]).write_text(
                server.shop_spec_toml(
                    name=options["dataset_name"],
                    partition_rule=options["partition_rule"]
                    or ("host" if options["retailer_hosts"] else "manifest"),
                    version=options["scraper_version"],
                ),
                encoding="utf-8",
            )
        if options["manifest_out"]:
            rows = server.manifest_rows(
                base_url,
                pages=options["pages"],
                seed=options["seed"],
                mode=options["manifest_mode"],
                retailer_hosts=options["retailer_hosts"],
            )
            server.write_manifest(options["manifest_out"], rows)
