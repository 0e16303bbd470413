"""What the contract suites hold of one implementation (shared by the fixtures and the tests)."""

from __future__ import annotations

from agent.core.library import DocumentLibrary
from tools.retrieval import PassageSearch


class Documents:
    """One implementation of the two document ports over the same documents: the library that adds, lists and
    deletes them, and the passage search over what it stored."""

    def __init__(self, library: DocumentLibrary, search: PassageSearch) -> None:
        self.library = library
        self.search = search
