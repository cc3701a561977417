"""Intake: what to collect, from files and clocks to datasets, runs and tasks.

In: a dataset spec (TOML/JSON), a manifest (CSV/JSONL/lines, sitemaps), a schedule. Out: a
`Dataset` row, a frozen `Run` with its tasks (all or nothing), one run per due window.
- `specs` (parse and validate a spec; `load_dataset`, `upload`);
- `manifest_parsing` (read and check a manifest: `parse`), `manifests` (`create_run`);
- `schedules` (checked settings; add, change, pause, remove), `recurrence` (due instants and
  their windows: `due`, `next_due`), `schedule_runs` (the dispatcher's side: `run_due`).
"""
