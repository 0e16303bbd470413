"""Ingestion: read files and folders, extract text and structure, chunk by embedder tokens, embed on Triton, store in
batches keyed by content hash.

Modules, in the order a file travels: `inputs` (walk folders, sniff types, name documents), `readers` (documents out
of JSONL records and extracted files), `documents` (the document and its text rules), `embedding` (chunk and embed
one batch; `reuse`: the stored vectors a changed document's unchanged chunks keep), `staging` (large documents in
sub-batches), `pipeline` (the streaming run), `report` (what a run did); `ports` holds what the pipeline needs of an
embedder and a sink, and its options. Folder sync (`rag sync`): `sync_plan` (what changed, from the folder and the
recorded state), `sync` (applying it, file by file), `sync_watch` (again on every change).
"""

from tools.ingest.documents import IngestError, SourceDocument, clean_text
from tools.ingest.embedding import BadChunk
from tools.ingest.inputs import InputFile, check_paths, default_root, plan_inputs
from tools.ingest.pipeline import ingest, ingest_documents
from tools.ingest.ports import ChunkSink, DocumentEmbedder, IngestOptions
from tools.ingest.readers import read_documents, scan_inputs
from tools.ingest.report import FileCounts, FileError, IngestReport, ProgressFn

__all__ = [
    "BadChunk",
    "ChunkSink",
    "DocumentEmbedder",
    "FileCounts",
    "FileError",
    "IngestError",
    "IngestOptions",
    "IngestReport",
    "InputFile",
    "ProgressFn",
    "SourceDocument",
    "check_paths",
    "clean_text",
    "default_root",
    "ingest",
    "ingest_documents",
    "plan_inputs",
    "read_documents",
    "scan_inputs",
]
