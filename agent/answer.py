"""One answer's request at its documented path: `from agent.answer import AnswerRequest`. It lives in
`agent.core.answer`; re-exported here so user code keeps one import path."""

from agent.core.answer import AnswerLimits, AnswerRequest, answer

__all__ = ["AnswerLimits", "AnswerRequest", "answer"]
