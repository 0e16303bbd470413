"""Contract suites: one per port, run over the in-memory double (fast tier) and the real implementation (stack tier),
so a double that drifts from the real thing fails (the pattern of Haystack's `testing/document_store.py`)."""
