"""The pull API, `/api/v1/`: read-only access to accepted datasets for the people and programs
that consume them (docs/api.md).

Built on Django REST framework with drf-spectacular for the OpenAPI document (`/api/v1/schema`)
rather than django-ninja. The brief allowed ninja if DRF cost the page budget; measured here,
it does not: DRF adds no middleware and no context processor, so a dashboard page does the same
work as before (DRF is imported only by the API's URLconf), and importing DRF, drf-spectacular
and this package adds about 0.1 s once per process start (`python -X importtime`). DRF's
throttling, authentication classes and exception handler are exactly the pieces asked for
(per-token rate limits, bearer tokens, one error shape), and Django's own views and responses
stream files unchanged.

The package only binds HTTP: tokens, scopes, audit, the change feed and the reads are the
engine's (recovery/consumers/), exports and their files recovery/delivery/. The engine never
imports this package ([tool.importlinter] in pyproject.toml).

- `auth.py`: bearer tokens, the rate limit, JSON-only negotiation;
- `errors.py`: `{"error": {"code": ..., "message": ...}}` for every refusal;
- `views.py`, `urls.py`: the routes; `shapes.py`: the JSON shapes for the document;
- `downloads.py`, `ranges.py`: exports over HTTP with ETag, If-None-Match and Range.
"""
