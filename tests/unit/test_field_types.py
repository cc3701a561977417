"""A field's `type` in the spec is what extraction coerces to and what the Parquet export's
column is: every type the export knows is one the spec accepts and extraction reads."""

from __future__ import annotations

import pytest
from selectolax.lexbor import LexborHTMLParser

from recovery.fetch import extraction
from recovery.intake import specs


def spec_with(field_type: str) -> dict:
    return {
        "name": "shop",
        "page_types": {
            "product": {
                "fields": {
                    "sku": {"selector": "[data-sku]", "attr": "data-sku"},
                    "seen": {"selector": "time", "attr": "datetime", "type": field_type},
                }
            }
        },
    }


@pytest.mark.parametrize("field_type", ["text", "decimal", "int", "bool", "timestamp"])
def test_every_export_type_is_a_spec_type_extraction_reads(field_type):
    spec = specs.validate(spec_with(field_type))
    assert spec["page_types"]["product"]["fields"]["seen"]["type"] == field_type
    assert field_type in extraction.COERCE


def test_a_timestamp_field_is_extracted_in_utc():
    spec = specs.validate(spec_with("timestamp"))
    page = LexborHTMLParser(
        '<div data-sku="A1"></div><time datetime="2026-12-01T09:30:00-05:00">today</time>'
    )
    fields = extraction.extract_fields(page, spec["page_types"]["product"]["fields"])
    assert fields["seen"] == "2026-12-01T14:30:00+00:00"


def test_an_unknown_type_names_the_types_it_accepts():
    with pytest.raises(specs.SpecError, match="timestamp"):
        specs.validate(spec_with("date"))
