"""What recovery.remote keeps from provider answers: data whole, credentials never."""

from __future__ import annotations

from recovery.providers.remote_base import clean_payload, sanitise


def test_it_keeps_result_data_whole():
    payload = {
        "markdown": "x" * 50_000,
        "images": [f"http://shop.test/{i}.jpg" for i in range(100)],
        "object_key": "media/1.mp4",
        "sku": "A-1",
    }
    assert clean_payload(payload) == payload


def test_it_drops_credential_fields_and_redacts_credential_values():
    payload = {
        "api_key": "k1",
        "X-API-Key": "k2",
        "access_token": "k3",
        "client_secret": "k4",
        "sig": "k5",
        "next": "https://api.test/p?api_token=k6&page=2",
        "nested": [{"password": "k7", "title": "ok"}],
    }
    cleaned = clean_payload(payload)
    assert set(cleaned) == {"next", "nested"}
    assert cleaned["next"] == "https://api.test/p?api_token=[redacted]&page=2"
    assert cleaned["nested"] == [{"title": "ok"}]
    stored = sanitise({"status": "SUCCESS", "token": "k8", "object_key": "media/1"})
    assert stored == {"status": "SUCCESS", "object_key": "media/1"}


def test_stored_summaries_are_bounded():
    stored = sanitise({"error": "e" * 5000, "results": list(range(100))})
    assert len(stored["error"]) == 1000 and len(stored["results"]) == 20
