"""Delivery: accepted data out of Salvage.

In: an accepted or published run, outbox events written with the state changes they announce.
Out: streamed CSV/JSONL exports with provenance (`exports`) and deliveries to destinations,
with idempotency keys and an uncertain state looked up before any resend (`outbox`).
"""
