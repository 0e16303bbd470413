"""The groups of an upload job's documents travel in the job's `params` (`{"groups": [...]}`, none: `{}`) and come
back out as the run's groups (`tools.jobs.worker.job_groups`)."""

from __future__ import annotations

from tools.in_memory_jobs import InMemoryJobQueue
from tools.jobs.ports import upload_params
from tools.jobs.worker import job_groups
from tools.records import JobFile


def test_upload_params_round_trip_through_job_groups() -> None:
    assert upload_params(None) == {} and job_groups({}) is None
    assert upload_params(("eng", "hr")) == {"groups": ["eng", "hr"]}
    assert job_groups(upload_params(("eng", "hr"))) == ("eng", "hr")
    assert job_groups({"groups": []}) == ()  # given as none: public documents


async def test_a_queued_upload_keeps_its_groups() -> None:
    queue = InMemoryJobQueue()
    with_groups = await queue.submit([JobFile("a.md", b"# A")], "", "default", ("eng",))
    without = await queue.submit([JobFile("b.md", b"# B")])
    assert queue.jobs[with_groups].params == {"groups": ["eng"]}
    assert queue.jobs[without].params == {}
