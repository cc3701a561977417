"""Fetch: a URL to an `Outcome` (recovery.outcomes), with nothing written to the database.

In: a task's URL, its page type and the dataset's spec. Out: what the page observed and
discovered, or a failure class with a sanitised artefact.
- `fetcher` (the guarded GET: redirects hop by hop, size cap, total deadline, per-task cookies),
  `guard` (outbound safety: resolve, check, connect to the checked address), `hops` (each hop's
  URL and redirect target), `responses` (the body under the cap, transport errors, `Page`),
  `clients` (the aiohttp session and httpx client factories), `hostgate` (per-host politeness),
  `errors` (`FetchError`, `BlockedURL`), `allowlist` (the networks a deployment may reach),
  `robots` (RFC 9309 rules per host);
- `browser_proxy` and `chromium` (the browser provider's guarded proxy and its one Chromium);
- `pagechecks` (page-state checks before extraction), `extraction` (fields by CSS selector),
  `sitemaps` (streaming sitemap files and indexes), `drift` (a listing's head re-read);
- `artefacts` (triage files named by content hash).
The providers (recovery.providers) call these; none of them imports the models' moves.
"""
