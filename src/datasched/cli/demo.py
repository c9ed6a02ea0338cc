"""Commands of the runtime's tour: ``demo-data`` (the synthetic dataset) and ``demo`` (the
same jobs three ways, beside the simulator's prediction)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from datasched.cli.app import app
from datasched.cli.common import check_out_dir, fail, out, print_json
from datasched.cli.live import BarProgress, progress_bars
from datasched.cli.options import ReplicateHotOpt, policy_params_of
from datasched.cli.runtime import PolicyOption, WorkersOption, runtime_errors
from datasched.policies import get_policy

__all__: list[str] = []


@app.command("demo-data")
def demo_data(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where the files go.")],
    events: Annotated[int, typer.Option("--events", help="Events in all.")] = 200_000,
    files: Annotated[int, typer.Option("--files", help="Number of ROOT files.")] = 20,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 1,
) -> None:
    """Write a synthetic collision dataset shaped like CMS NanoAOD (tree Events: run,
    luminosityBlock, event, `Muon_*`, `Electron_*`, `MET_*`; coffea's NanoAODSchema fits it), with
    a Z->mumu peak over a falling background, and a catalog.yaml naming it 'zmumu'; beside
    them, unless they exist, an example jobs.yaml (for run) and request.xml (for submit)."""
    if files < 1:
        fail(f"--files: must be at least 1, got {files}")
    if events < files:
        fail(f"--events: must be at least --files ({files}), got {events}")
    check_out_dir(directory, "DIR")
    with runtime_errors():
        from datasched.runtime.demodata import write_demo_dataset, write_examples

        catalog = write_demo_dataset(directory, n_events=events, n_files=files, seed=seed)
        examples = write_examples(directory, events)
    out.print(f"catalog: {catalog}", highlight=False)
    for path in examples:
        out.print(f"example: {path}", highlight=False)


@app.command("demo")
def demo(
    data_dir: Annotated[
        Path, typer.Option("--data", metavar="DIR", help="Demo dataset (created if absent).")
    ] = Path("out/demo-data"),
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Outputs, plot and packet tables.")
    ] = Path("out/demo-run"),
    policy: PolicyOption = "out-of-order",
    params: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-P",
            metavar="NAME=VALUE",
            help="A parameter of the cache-aware policy (default for out-of-order: "
            "replication=true, reads from peers' caches).",
        ),
    ] = None,
    workers: WorkersOption = 4,
    tertiary_mb_s: Annotated[
        float, typer.Option("--tertiary-mb-s", help="Throttled tertiary storage, MB/s/worker.")
    ] = 0.25,
    replicate_hot: ReplicateHotOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object and nothing else.")
    ] = False,
) -> None:
    """The runtime tour (about two minutes): overlapping jobs on a synthetic dataset,
    run under processing-farm scheduling, under a cache-aware policy, and as a plain Dask map
    through the same worker caches; a comparison table with the simulator's prediction and the
    physical floor beside the measured makespans, the three runs' timelines on one time axis,
    and the dimuon-mass plot."""
    with runtime_errors():
        from datasched.compare.demo import run_demo

        get_policy(policy)  # an unknown name: one line naming the known ones
        policy_params = policy_params_of(policy, params) if params else None
        check_out_dir(data_dir, "--data")
        check_out_dir(out_dir, "--out")
        if workers < 1:
            fail(f"--workers: must be at least 1, got {workers}")
        if not tertiary_mb_s > 0:
            fail(f"--tertiary-mb-s: must be positive, got {tertiary_mb_s}")
        if replicate_hot is not None and replicate_hot < 1:
            fail(f"--replicate-hot: must be at least 1, got {replicate_hot}")
        result = run_demo(
            data_dir,
            out_dir,
            cache_policy=policy,
            policy_params=policy_params,
            workers=workers,
            tertiary_bytes_per_s=tertiary_mb_s * 1e6,
            replicate_hot=replicate_hot,
            progress_factory=None if as_json else (lambda total: _DemoBars(total)),
            log=None if as_json else (lambda line: out.print(line, highlight=False)),
        )
    if as_json:
        print_json(result.as_json())
        return
    out.print(result.table())
    for note in result.notes:
        out.print(f"note: {note}", highlight=False)
    out.print(f"plot: {result.plot}", highlight=False)
    if result.timeline is not None:
        out.print(f"timelines: {result.timeline}", highlight=False)


class _DemoBars:
    """Progress bars for one demo run (opened and closed around it)."""

    def __init__(self, total: int) -> None:
        self.bars = progress_bars(False)
        self.sink = BarProgress(self.bars, total)

    def __enter__(self) -> BarProgress:
        self.bars.__enter__()
        return self.sink

    def __exit__(self, *exc: object) -> None:
        self.bars.__exit__(None, None, None)
