"""Citations' location fields from chunk metadata (`agent.core.results.location_fields`): page or section, span and
line boxes, and their JSON form."""

from __future__ import annotations

import json

from agent.core.results import Citation, location_fields


def test_span_and_boxes_come_from_chunk_metadata() -> None:
    metadata = {"page": 3, "span": [120, 980], "boxes": [[3, 72.0, 700.5, 540.2, 712.1], [3, 72, 686, 300, 698]]}
    fields = location_fields(metadata)
    assert fields == {
        "page": 3,
        "span": [120, 980],
        "boxes": [(3, 72.0, 700.5, 540.2, 712.1), (3, 72.0, 686.0, 300.0, 698.0)],
    }
    citation = Citation(doc_id="guide.pdf", chunk_id="guide.pdf#4", score=0.5, passage=1, **fields)
    data = json.loads(citation.model_dump_json())
    assert data["span"] == [120, 980] and data["boxes"][0] == [3, 72.0, 700.5, 540.2, 712.1]
    assert data["location"] == "guide.pdf p. 3"


def test_chunks_stored_before_spans_cite_without_them() -> None:
    citation = Citation(doc_id="a", chunk_id="a#0", score=1.0, passage=1, **location_fields({"section": ["Guide"]}))
    assert citation.span is None and citation.boxes is None
    assert citation.model_dump()["span"] is None


def test_malformed_span_or_boxes_are_left_out() -> None:
    assert location_fields({"span": [1], "boxes": [[1, 2, 3]]}) == {}
    assert location_fields({"span": ["a", "b"], "boxes": "x"}) == {}
