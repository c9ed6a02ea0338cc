"""Hypothesis strategies for small simulated scenarios (jobs over a small data space)."""

from __future__ import annotations

from hypothesis import strategies as st

from datasched.core.intervals import IntervalSet
from datasched.core.model import Job


@st.composite
def job_lists(draw: st.DrawFn, max_jobs: int = 8, space: int = 400) -> list[Job]:
    """A few jobs with random arrival gaps and overlapping contiguous segments."""
    n = draw(st.integers(1, max_jobs))
    jobs = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 1.0, 7.5, 40.0, 300.0]))
        start = draw(st.integers(0, space - 1))
        size = draw(st.integers(1, space - start))
        jobs.append(Job(job_id=i, submit_s=t, data=IntervalSet.range(start, start + size)))
    return jobs
