"""The HTTP API's former single module: its names now live in the `agent.http` package (one router per area);
re-exported here for callers that import them from `agent.http_api`."""

from agent.http.app import create_app
from agent.http.ask import AskRequest
from agent.http.documents import DocumentIn, IngestRequest
from agent.http.errors import RETRY_AFTER_S, STATUS_OF_KIND, ErrorBody, error_response, failure_of

__all__ = [
    "RETRY_AFTER_S",
    "STATUS_OF_KIND",
    "AskRequest",
    "DocumentIn",
    "ErrorBody",
    "IngestRequest",
    "create_app",
    "error_response",
    "failure_of",
]
