"""`agent.core.library.DocumentLibrary` and `tools.retrieval.PassageSearch`: the in-memory collection and the real
library (chunk, embed on Triton, store in Postgres) with the retriever over it answer alike (idempotent adds by
content hash, replaces, collections as identity, pages, deletes, counts; passages numbered best first, scoped,
with their dense scores; bad queries refused)."""

from __future__ import annotations

import pytest

from tests.contracts.ports import Documents
from tools.access import NOBODY, UNRESTRICTED, caller_access
from tools.ingest import SourceDocument
from tools.scope import SearchScope

OTTERS = SourceDocument("otters", "Otters", "Sea otters eat sea urchins and crabs in kelp forests.", "otters.md", {})
HERONS = SourceDocument("herons", "Herons", "Grey herons hunt fish standing still in shallow rivers.", "herons.md", {})
BEES = SourceDocument(
    "bees", "Bees", "Honey bees pollinate flowers and make honey in hives.", "bees.md", {"kind": "insect"}
)


async def test_adding_the_same_content_again_skips_it_and_new_content_replaces_it(documents: Documents) -> None:
    library = documents.library
    first = await library.add_documents([OTTERS, HERONS])
    assert (first.added, first.skipped) == (2, 0) and first.chunks >= 2
    again = await library.add_documents([OTTERS])
    assert (again.added, again.skipped, again.chunks) == (0, 1, 0)
    changed = SourceDocument("otters", "Otters", "Sea otters use stones to crack shells.", "otters.md", {})
    replaced = await library.add_documents([changed])
    assert (replaced.added, replaced.skipped) == (1, 0)
    listed = await library.list_documents()
    assert [d.doc_id for d in listed] == ["herons", "otters"]
    assert listed[1].content_hash == changed.content_hash and listed[1].title == "Otters"
    assert listed[1].source == "otters.md" and listed[1].collection == "default"
    assert await library.count() == (2, sum(d.chunks for d in listed))


async def test_a_collection_is_part_of_a_documents_identity(documents: Documents) -> None:
    library = documents.library
    await library.add_documents([OTTERS])
    await library.add_documents([OTTERS], collection="zoo")
    listed = await library.list_documents()
    assert [(d.collection, d.doc_id) for d in listed] == [("default", "otters"), ("zoo", "otters")]
    assert [d.doc_id for d in await library.list_documents(collections=["zoo"])] == ["otters"]
    assert await library.delete_documents(["otters"], collections=["zoo"]) == ["otters"]
    assert [(d.collection, d.doc_id) for d in await library.list_documents()] == [("default", "otters")]
    assert (await library.count(collections=["zoo"]))[0] == 0


async def test_a_document_is_found_by_id_in_each_collection_holding_it(documents: Documents) -> None:
    library = documents.library
    await library.add_documents([OTTERS, HERONS], collection="zoo")
    await library.add_documents([OTTERS])
    found = await library.find_documents("otters")
    assert [(d.collection, d.doc_id, d.title) for d in found] == [
        ("default", "otters", "Otters"),
        ("zoo", "otters", "Otters"),
    ]
    assert [d.collection for d in await library.find_documents("otters", collections=["zoo"])] == ["zoo"]
    assert await library.find_documents("herons", collections=["default"]) == []
    assert await library.find_documents("otter") == []  # the whole id, not a part of it


async def test_pages_walk_every_document_by_id(documents: Documents) -> None:
    library = documents.library
    await library.add_documents([OTTERS, HERONS, BEES])
    seen, cursor = [], None
    while True:
        page = await library.document_page(limit=2, cursor=cursor)
        assert page.total == 3 and len(page.documents) <= 2
        seen += [d.doc_id for d in page.documents]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ["bees", "herons", "otters"]
    assert [d.doc_id for d in await library.list_documents(limit=1, offset=1)] == ["herons"]
    offset_page = await library.document_page(limit=5, offset=2)
    assert [d.doc_id for d in offset_page.documents] == ["otters"] and offset_page.next_cursor is None


async def test_deletes_by_id_and_by_source_report_only_what_was_stored(documents: Documents) -> None:
    library = documents.library
    await library.add_documents([OTTERS, HERONS, BEES])
    assert await library.delete_documents(["otters", "missing"]) == ["otters"]
    assert await library.delete_documents(source="herons.md") == ["herons"]
    assert await library.delete_documents(["bees"], collections=["zoo"]) == []
    assert [d.doc_id for d in await library.list_documents()] == ["bees"]
    assert (await library.count())[0] == 1


async def test_search_numbers_passages_best_first_with_dense_scores(documents: Documents) -> None:
    await documents.library.add_documents([OTTERS, HERONS, BEES])
    result = await documents.search.search("Do sea otters eat sea urchins in kelp forests?", top_k=2)
    assert result.query == "Do sea otters eat sea urchins in kelp forests?"
    assert [p.number for p in result.passages] == [1, 2]
    assert result.passages[0].doc_id == "otters" and result.passages[0].title == "Otters"
    assert result.passages[0].source == "otters.md"
    scores = [p.score for p in result.passages]
    assert scores == sorted(scores, reverse=True)
    assert all(p.dense_score is not None and -1.0 <= p.dense_score <= 1.0 for p in result.passages)
    assert "otters" in result.passages[0].text.lower()


async def test_search_sees_only_its_scope(documents: Documents) -> None:
    await documents.library.add_documents([OTTERS, HERONS])
    await documents.library.add_documents([BEES], collection="zoo")
    question = "Which animals make honey in hives?"
    everywhere = await documents.search.search(question, top_k=5)
    assert {p.doc_id for p in everywhere.passages} == {"otters", "herons", "bees"}
    zoo = await documents.search.search(question, top_k=5, scope=SearchScope(collections=("zoo",)))
    assert [p.doc_id for p in zoo.passages] == ["bees"]
    default = await documents.search.search(question, top_k=5, scope=SearchScope(collections=("default",)))
    assert "bees" not in {p.doc_id for p in default.passages}
    nothing = await documents.search.search(question, top_k=5, scope=SearchScope(collections=()))
    assert nothing.passages == []
    insects = await documents.search.search(question, top_k=5, scope=SearchScope.from_filter({"kind": "insect"}))
    assert [p.doc_id for p in insects.passages] == ["bees"]
    by_source = await documents.search.search(question, top_k=5, scope=SearchScope.from_filter({"source": "herons.md"}))
    assert [p.doc_id for p in by_source.passages] == ["herons"]


@pytest.mark.parametrize(("query", "top_k"), [("", 3), ("   ", 3), ("otters", 0)])
async def test_search_refuses_a_blank_query_or_top_k_below_one(documents: Documents, query: str, top_k: int) -> None:
    await documents.library.add_documents([OTTERS])
    with pytest.raises(ValueError):
        await documents.search.search(query, top_k=top_k)


async def test_a_chunk_is_found_by_id_only_within_its_document_and_collections(documents: Documents) -> None:
    library = documents.library
    await library.add_documents([OTTERS, HERONS])
    await library.add_documents([BEES], collection="zoo")
    found = await library.chunk_metadata("otters", "otters#0")
    assert found is not None and found[0] == "default"
    assert found[1]["span"] == [0, len(OTTERS.content)]  # one chunk: the whole content
    assert found.text.endswith(OTTERS.text)  # the chunk's text, which a support sentence's passage_span indexes
    assert await library.chunk_metadata("bees", "zoo::bees#0", collections=["zoo"]) is not None
    assert await library.chunk_metadata("bees", "zoo::bees#0", collections=["default"]) is None
    assert await library.chunk_metadata("herons", "otters#0") is None  # another document's chunk
    assert await library.chunk_metadata("otters", "otters#7") is None


async def test_a_reader_sees_only_the_documents_its_groups_may_read(documents: Documents) -> None:
    library = documents.library
    secret = SourceDocument("secret", "Secret", "Honey bees guard secret hives.", "secret.md", {"groups": ["eng"]})
    await library.add_documents([OTTERS, secret, BEES])
    question = "Which bees guard hives?"
    eng, nobody = caller_access(["eng"]), NOBODY
    for access, expected in ((nobody, ["bees", "otters"]), (eng, ["bees", "otters", "secret"])):
        found = await documents.search.search(question, top_k=5, scope=SearchScope().read_by(access))
        assert {p.doc_id for p in found.passages} <= set(expected)
        assert ("secret" in {p.doc_id for p in found.passages}) == ("secret" in expected)
        assert [d.doc_id for d in await library.list_documents(access=access)] == expected
        page = await library.document_page(limit=10, access=access)
        assert [d.doc_id for d in page.documents] == expected and page.total == len(expected)
        assert (await library.count(access=access))[0] == len(expected)
        assert await library.collection_counts(access=access) == {"default": len(expected)}
        assert bool(await library.find_documents("secret", access=access)) == ("secret" in expected)
        assert (await library.chunk_metadata("secret", "secret#0", access=access) is not None) == ("secret" in expected)
        assert (await documents.search.get_document("secret", SearchScope().read_by(access)) is not None) == (
            "secret" in expected
        )
    assert [d.doc_id for d in await library.list_documents(access=UNRESTRICTED)] == ["bees", "otters", "secret"]
    assert await library.set_document_groups("secret", []) is True  # public now
    assert [d.doc_id for d in await library.list_documents(access=nobody)] == ["bees", "otters", "secret"]
    assert await library.set_document_groups("secret", ["ops"], collection="zoo") is False
