"""The page archive: every page a worker fetched, kept so a recovery batch can re-extract it.

Seed 002: "Rejected output should remain recoverable." A page rejected by a selector bug is
re-extracted by the repaired spec from the stored response, with no request to the site.

Contract:
- `store.put(url, status, headers, body, hops)` stores a 2xx response of the direct provider
  before its page checks run (so a page they reject is kept too), as a gzip blob named by the
  SHA-256 of its content under `<SALVAGE_ARTEFACT_DIR>/archive/`: the same response twice is
  one blob. A body over SALVAGE_ARCHIVE_MAX_PAGE_BYTES is not stored, and the attempt says so.
  SALVAGE_ARCHIVE_PAGES=0 stores nothing.
- The attempt that fetched the page names its blob in its artefact
  (`{"archive": {"sha256", "source": "fetched"}}`), committed with its outcome by the engine's
  one fenced commit: a blob no committed attempt names is an orphan that expires.
- A recovery batch created with `from_archive` (`rerun --from-archive`, the batch form's
  checkbox) gives each of its claimed tasks the blob of its latest archiving attempt
  (`pages.archived_pages`, called by the worker before execution). The direct provider then
  runs page checks and extraction on the stored response instead of fetching: no robots.txt
  read, no host turn, no request. Its outcome commits exactly like a fetched page's (lease
  fence, atomic commit before acknowledgement, observations upserted by key), with
  `"source": "archive"`. A blob that is missing, expired or damaged (`store.ArchiveMissing`)
  is no error: the page is fetched as usual and counted as fetched.
- `pages.batch_sources(batch)`: how many of a batch's pages came from the archive and how many
  were fetched (the batch page and `rerun`'s docs use this one definition).
- Retention: `store.get` refuses a blob older than SALVAGE_ARCHIVE_DAYS; `store.prune` (run by
  `manage.py pruneartefacts`) removes those, then the oldest blobs until the archive holds at
  most SALVAGE_ARCHIVE_MAX_BYTES.

Only 2xx responses are stored: a 5xx or a 429 is a reason to ask again, never a page to
re-read. The browser provider keeps the HTML it rendered (the serialised DOM after its
scripts, waits and steps, UTF-8) under the same rules; its batch "from the archive" checks and
extracts that HTML with no browser started and no request made.
"""
