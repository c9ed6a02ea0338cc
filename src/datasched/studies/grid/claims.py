"""The claims of ranganathan-foster §5.3-§5.4, filled from the grid study's summaries.

Some claims name a scheduler (the best, the worst) rather than state a number, so a claim
here holds a name or a number on both sides; the paper gives figures without their values,
so its numbers are read off its text ("> 400 MB/job", "much better", "almost as well").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from datasched.policies.grid.schedulers import (
    DATA_DO_NOTHING,
    DATA_LEAST_LOADED,
    DATA_RANDOM,
    JOB_ADAPTIVE,
    JOB_DATA_PRESENT,
    JOB_LOCAL,
)
from datasched.studies.grid.runs import (
    DATASET_SCHEDULERS,
    EXTERNAL_SCHEDULERS,
    Summary,
    pairs_at,
)

__all__ = ["GridClaim", "grid_claims"]

_REPLICATING = (DATA_RANDOM, DATA_LEAST_LOADED)


@dataclass(frozen=True, slots=True)
class GridClaim:
    """A statement of the paper and ours; ``agrees`` is None where the paper has no value
    (our own experiments beyond it)."""

    key: str
    section: str
    claim: str
    paper: str | float
    ours: str | float
    agrees: bool | None
    note: str


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def grid_claims(summaries: Sequence[Summary], slow: float, fast: float) -> list[GridClaim]:
    """The claims, from the pairs at the ``slow`` (scenario 1) and ``fast`` (scenario 2)
    bandwidths."""
    at = pairs_at(summaries, slow)
    rt = {k: s.response_s for k, s in at.items()}
    norepl = {e: rt[e, DATA_DO_NOTHING] for e in EXTERNAL_SCHEDULERS}
    best_norepl = min(norepl, key=norepl.__getitem__)
    worst_norepl = max(norepl, key=norepl.__getitem__)
    listed = ", ".join(f"{e} {_fmt(v)} s" for e, v in sorted(norepl.items(), key=lambda x: x[1]))
    claims = [
        GridClaim(
            "best_es_without_replication",
            "§5.3",
            "Without replication (DataDoNothing), the external scheduler of least response time",
            JOB_LOCAL,
            best_norepl,
            best_norepl == JOB_LOCAL,
            f"Mean response at {slow:g} MB/s: {listed}.",
        ),
        GridClaim(
            "worst_es_without_replication",
            "§5.3",
            "Without replication, the external scheduler of most response time",
            JOB_DATA_PRESENT,
            worst_norepl,
            worst_norepl == JOB_DATA_PRESENT,
            "The paper: popular datasets overload the sites holding them. Ours: "
            + _worst_note(worst_norepl, at),
        ),
    ]
    twelve = {k: v for k, v in rt.items() if k[0] in EXTERNAL_SCHEDULERS}
    best = min(twelve, key=twelve.__getitem__)
    second = sorted(twelve.items(), key=lambda x: x[1])[1]
    claims.append(
        GridClaim(
            "best_pair",
            "§5.3",
            "The pair of least response time of the 12",
            f"{JOB_DATA_PRESENT} + {DATA_RANDOM} or {DATA_LEAST_LOADED}",
            f"{best[0]} + {best[1]}",
            best[0] == JOB_DATA_PRESENT and best[1] in _REPLICATING,
            f"{_fmt(twelve[best])} s; next {second[0][0]} + {second[0][1]} {_fmt(second[1])} s.",
        )
    )
    dp_repl = max(rt[JOB_DATA_PRESENT, d] for d in _REPLICATING)
    ratio = dp_repl / norepl[best_norepl]
    claims.append(
        GridClaim(
            "dp_repl_over_best_norepl_response",
            "§5.3",
            "JobDataPresent with replication (the worse of the two) over the best pair without",
            "< 1",
            round(ratio, 3),
            ratio < 1,
            f"{_fmt(dp_repl)} s against {best_norepl} + {DATA_DO_NOTHING} "
            f"{_fmt(norepl[best_norepl])} s.",
        )
    )
    rr = rt[JOB_DATA_PRESENT, DATA_RANDOM] / rt[JOB_DATA_PRESENT, DATA_LEAST_LOADED]
    others = [rt[e, DATA_RANDOM] / rt[e, DATA_LEAST_LOADED] for e in EXTERNAL_SCHEDULERS]
    claims.append(
        GridClaim(
            "datarandom_over_dataleastloaded_response",
            "§5.3",
            "DataRandom over DataLeastLoaded, response with JobDataPresent (no significant "
            "difference: within 10 %)",
            "≈ 1",
            round(rr, 3),
            abs(rr - 1) <= 0.10,
            "Over the four external schedulers the ratio ranges "
            f"{min(others):.3f}-{max(others):.3f}.",
        )
    )
    fast_at = pairs_at(summaries, fast)
    lo = fast_at[JOB_LOCAL, DATA_LEAST_LOADED].response_s
    dp = fast_at[JOB_DATA_PRESENT, DATA_LEAST_LOADED].response_s
    claims.append(
        GridClaim(
            "local_over_dp_response_at_100mbs",
            "§5.4, Fig. 5",
            f"At {fast:g} MB/s, JobLocal over JobDataPresent (DataLeastLoaded), response "
            '("almost as well, no clear winner": within 20 %)',
            "≈ 1",
            round(lo / dp, 3),
            abs(lo / dp - 1) <= 0.20,
            f"{_fmt(lo)} s and {_fmt(dp)} s; at {slow:g} MB/s "
            f"{_fmt(rt[JOB_LOCAL, DATA_LEAST_LOADED])} s and "
            f"{_fmt(rt[JOB_DATA_PRESENT, DATA_LEAST_LOADED])} s.",
        )
    )
    mb = {k: s.mb_per_job for k, s in at.items()}
    dp_mb = max(mb[JOB_DATA_PRESENT, d] for d in _REPLICATING)
    other_mb = min(
        mb[e, d] for e in EXTERNAL_SCHEDULERS if e != JOB_DATA_PRESENT for d in _REPLICATING
    )
    claims.append(
        GridClaim(
            "dp_transfer_mb_per_job_minus_others",
            "§5.3, Fig. 3b",
            "Data moved per job: the least of the others (with replication) minus "
            "JobDataPresent's (with replication)",
            "> 400 MB",
            round(other_mb - dp_mb, 1),
            other_mb - dp_mb > 400,
            f"JobDataPresent moves {_fmt(dp_mb)} MB/job (replicas only); the others "
            f"{_fmt(other_mb)} MB/job or more.",
        )
    )
    idle = {k: s.idle_pct for k, s in at.items()}
    dp_idle = max(idle[JOB_DATA_PRESENT, d] for d in _REPLICATING)
    other_idle = min(
        idle[e, d] for e in EXTERNAL_SCHEDULERS if e != JOB_DATA_PRESENT for d in _REPLICATING
    )
    claims.append(
        GridClaim(
            "dp_repl_idle_over_others",
            "§5.3, Fig. 4",
            "Processors' idle time: JobDataPresent with replication over the least of the "
            "others with replication",
            "< 1",
            round(dp_idle / other_idle, 3),
            dp_idle < other_idle,
            f"{dp_idle:.1f} % against {other_idle:.1f} %.",
        )
    )
    gain = [
        rt[e, d] / rt[e, DATA_DO_NOTHING]
        for e in EXTERNAL_SCHEDULERS
        if e != JOB_DATA_PRESENT
        for d in _REPLICATING
    ]
    claims.append(
        GridClaim(
            "replication_does_not_help_others",
            "§5.3",
            "For JobRandom, JobLeastLoaded, JobLocal: response with replication over without "
            '("the same or worse": the least ratio at least 0.95)',
            "≥ 1",
            round(min(gain), 3),
            min(gain) >= 0.95,
            f"Ratios {min(gain):.3f}-{max(gain):.3f}.",
        )
    )
    dp_slow = rt[JOB_DATA_PRESENT, DATA_LEAST_LOADED]
    claims.append(
        GridClaim(
            "dp_consistent_across_bandwidth",
            "§5.4",
            "JobDataPresent (DataLeastLoaded), response at the fast over the slow network "
            '("more or less consistent": within 20 %)',
            "≈ 1",
            round(dp / dp_slow, 3),
            abs(dp / dp_slow - 1) <= 0.20,
            f"{_fmt(dp)} s and {_fmt(dp_slow)} s.",
        )
    )
    for bw, pairs in ((slow, at), (fast, fast_at)):
        if (JOB_ADAPTIVE, DATA_LEAST_LOADED) not in pairs:
            continue
        resp = {k: s.response_s for k, s in pairs.items()}
        ours = min(resp[JOB_ADAPTIVE, d] for d in DATASET_SCHEDULERS)
        best12 = min(v for k, v in resp.items() if k[0] in EXTERNAL_SCHEDULERS)
        which = min((v, k) for k, v in resp.items() if k[0] in EXTERNAL_SCHEDULERS)[1]
        claims.append(
            GridClaim(
                f"adaptive_over_best_pair_at_{bw:g}mbs",
                "§6 (future work; ours)",
                f"At {bw:g} MB/s, JobAdaptive's best response over the best of the 12 pairs",
                "-",
                round(ours / best12, 3),
                None,
                f"JobAdaptive {_fmt(ours)} s; best pair {which[0]} + {which[1]} "
                f"{_fmt(best12)} s. "
                + ", ".join(f"with {d} {_fmt(resp[JOB_ADAPTIVE, d])} s" for d in DATASET_SCHEDULERS)
                + ".",
            )
        )
    return claims


def _worst_note(worst: str, at: dict[tuple[str, str], Summary]) -> str:
    dp = at[JOB_DATA_PRESENT, DATA_DO_NOTHING]
    other = at[worst, DATA_DO_NOTHING]
    return (
        f"JobDataPresent idles {dp.idle_pct:.0f} % of processor time and moves no data; "
        f"{worst} idles {other.idle_pct:.0f} % and moves {_fmt(other.mb_per_job)} MB/job: "
        "at this bandwidth fetching costs more than the hot spots do. The sensitivity table "
        "shows the settings where the paper's ranking appears."
    )
