"""The report's parts in order, each drawn by its own function. A measurement adds its part from its own module:
`register(Section("name", render, needs=("points",)), after="roofline")`; `unregister("name")` removes it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import fits
from ..policy import CONFIDENCE
from .claims import claims_section
from .context import ReportContext
from .crossover import crossover_section
from .decode import decode_headline, decode_section
from .decode_peers import peers_section
from .headline import headline, verdict_table
from .paths import paths_section
from .provenance import problems_section, provenance_section
from .roofline import peak_section
from .scaling import (
    flops_check,
    memory_pair_plot,
    rss_table,
    scaling_section,
    sequential_time_section,
    two_term_section,
)
from .summary import beyond_table1, summary_latex, summary_markdown, summary_rows
from .table1_figure import table1_section
from .training import training_section

FRAMES = ("points", "decode", "paths", "claims", "generate", "decode_peers")
PLACES = ("headline", "figure", "verdicts", "body")  # the first screen's three, then the sections below it


@dataclass(frozen=True)
class Section:
    name: str
    render: Callable[[ReportContext], str]  # markdown; the body's parts are joined, then split at `## `
    needs: tuple[str, ...] = ()  # FRAMES of the context it is drawn from: left out where none holds rows
    writes: tuple[str, ...] = ()  # files beyond the pages, in the report folder
    place: str = "body"

    def __post_init__(self):
        if not set(self.needs) <= set(FRAMES) or self.place not in PLACES:
            raise ValueError(f"section {self.name!r}: needs among {FRAMES}, place one of {PLACES}")

    def shown(self, ctx: ReportContext) -> bool:
        return not self.needs or any(len(getattr(ctx, f)) for f in self.needs if getattr(ctx, f) is not None)


def _summary(ctx: ReportContext) -> str:
    table = summary_rows(ctx, ctx.fit_rows, ctx.fit_texts)
    table.to_csv(ctx.out_dir / "table.csv", index=False)
    (ctx.out_dir / "table.tex").write_text(summary_latex(table), errors="backslashreplace")
    marks = ", ".join(f"{fits.VERDICT_MARK[v]} {v}" for v in fits.VERDICTS)
    return "\n".join(
        [
            "## The whole table, measured\n",
            f"Predicted (Table 1) beside measured: exponents of power-law fits ({marks}; – no sweep, "
            "– ? sweeps but none that could be fitted), sequential depth measured at the operator level, "
            "the path from position 0 to position n−1 (layers crossed, or the steps inside a recurrence's one "
            "layer). Details, intervals and the reason of every "
            "verdict in the sections below.\n",
            summary_markdown(table),
            beyond_table1(ctx, ctx.fit_texts),
        ]
    )


def _problems(ctx: ReportContext) -> str:
    return "\n".join(
        [
            "## How it was measured, and what went wrong\n",
            "How the fits are judged: " + fits.method_text() + "\n",
            problems_section(ctx),
        ]
    )


def _scaling(metric: str, title: str, intro: str, more: Callable[[ReportContext], str]):
    return lambda ctx: scaling_section(ctx, ctx.fit_rows, ctx.fit_texts, metric, title, intro + more(ctx))


FLOPS_INTRO = (
    "FLOPs of one forward pass (a forward and a backward pass for a `-train` source), whole batch, "
    "2 per multiply-accumulate of every "
    "matrix product and convolution, counted at the operator level while the "
    "layer runs (bench.flops) and checked against the closed form (models).\n\n"
)
TIME_INTRO = (
    "Median time of one forward pass in inference mode (a training step for a `-train` source), "
    "threads pinned, after warm-up, on the clock its fit uses: the wall clock, or where other "
    "programs took cores while a point was timed the CPU time of the call's one thread (spread as IQR "
    f"in points.csv, and the {100 * CONFIDENCE:g} % interval of the median where the run "
    "stored one; both clocks are in points.csv).\n\n"
)
MEMORY_INTRO = (
    "Peak bytes the forward pass (with the backward, for a `-train` source) allocates above what was "
    "live before it (inputs "
    "and weights excluded): CUDA allocator statistics on a GPU, the profiler's "
    "allocation events replayed on the CPU.\n\n"
)
POINTS = ("points",)
SECTIONS: list[Section] = [
    Section("headline", lambda ctx: headline(ctx, ctx.fit_texts, ctx.fit_rows), POINTS, place="headline"),
    Section("verdicts", lambda ctx: verdict_table(ctx, ctx.fit_texts), POINTS, place="verdicts"),
    Section("table1 figure", lambda ctx: table1_section(ctx, ctx.fit_rows), POINTS, place="figure"),
    Section("summary", _summary, POINTS, writes=("table.csv", "table.tex")),
    Section("problems", _problems, POINTS),
    Section("flops", _scaling("flops", "Compute: FLOPs", FLOPS_INTRO, flops_check), POINTS),
    Section("time", _scaling("time", "Time", TIME_INTRO, two_term_section), POINTS),
    Section(
        "crossover",
        lambda ctx: "### Crossover: where attention becomes the costlier layer\n\n" + crossover_section(ctx),
        POINTS,
    ),
    Section("roofline", lambda ctx: "### Against the roofline\n\n" + peak_section(ctx), POINTS, ("roofline.csv",)),
    Section(
        "memory",
        _scaling("memory", "Memory", MEMORY_INTRO, lambda ctx: memory_pair_plot(ctx) + "\n" + rss_table(ctx)),
        POINTS,
    ),
    Section("training", lambda ctx: training_section(ctx, ctx.fit_texts), POINTS),
    Section("decode headline", decode_headline, ("points", "decode"), place="headline"),
    Section("decode", decode_section),
    Section("decode peers", peers_section, ("decode_peers",)),
    Section("paths", paths_section),
    Section("sequential time", sequential_time_section, POINTS),
    Section("claims", claims_section),
    Section("provenance", provenance_section),
]


def _index(name: str) -> int:
    for i, section in enumerate(SECTIONS):
        if section.name == name:
            return i
    raise KeyError(f"no report section {name!r}; there are {', '.join(s.name for s in SECTIONS)}")


def register(section: Section, after: str | None = None) -> Section:
    """Add `section` after the one named `after` (None: last)."""
    if any(s.name == section.name for s in SECTIONS):
        raise ValueError(f"a report section {section.name!r} is registered already")
    SECTIONS.insert(len(SECTIONS) if after is None else _index(after) + 1, section)
    return section


def unregister(name: str) -> Section:
    return SECTIONS.pop(_index(name))


def written() -> set[str]:
    return {name for section in SECTIONS for name in section.writes}
