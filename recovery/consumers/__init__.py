"""What the data's consumers hold: personal API tokens, and the change feed they sync from.

A Django app of its own inside the engine (label `consumers`, tables `consumers_*`, its own
migrations), for two reasons. The engine owns it because two front doors share its decisions:
the dashboard's tokens page creates and revokes tokens, the pull API (`api/`) authenticates
them and reads the feed, and neither door may import the other (they are one floor of the
import contract); transactions and audit entries live in the engine. And its own migration
chain keeps it apart from the recovery app's, which other work extends at the same time.

- `tokens.py`: create (the token shown once, only its SHA-256 stored), revoke, authenticate
  (revoked, expired, no exporter permission: refused), the scope check.
- `feed.py`: the outbox's accepted, published and correction events, numbered in commit order
  (each dataset's `version`), and the changes since a consumer's version.
- `catalogue.py`: what a consumer reads about datasets and runs (current run, rows, formats,
  published time, partial-result marks) and the rows pages, by a keyset cursor naming its run.
"""
