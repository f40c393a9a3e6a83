"""The report's parts in order; a measurement adds its own with `register(Section(...), after="roofline")`."""

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
from .facts import facts
from .headline import headline
from .malloc import default_policy_section
from .matrix import (
    PATH_LEGEND,
    QUESTION,
    WHAT,
    forest_figure,
    legend,
    matrix,
    matrix_latex,
    matrix_markdown,
    path_matrix,
)
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
from .summary import beyond_table1, summary_markdown, summary_rows
from .table1_figure import table1_section
from .training import training_section

FRAMES = ("points", "decode", "paths", "claims", "generate", "decode_peers")
PLACES = ("headline", "figure", "verdicts", "facts", "body")  # the first screen's four, then the sections below it


@dataclass(frozen=True)
class Section:
    name: str
    render: Callable[[ReportContext], str]  # markdown; the body's parts are joined, then split at `## `
    needs: tuple[str, ...] = ()  # FRAMES of the context it is drawn from: left out where none holds rows
    writes: tuple[str, ...] = ()  # files beyond the pages and figures it adds to ctx.files (build writes them)
    place: str = "body"
    when: Callable[[ReportContext], bool] | None = None  # shown only where this holds (e.g. several machines)

    def __post_init__(self):
        if not set(self.needs) <= set(FRAMES) or self.place not in PLACES:
            raise ValueError(f"section {self.name!r}: needs among {FRAMES}, place one of {PLACES}")

    def shown(self, ctx: ReportContext) -> bool:
        if self.when is not None and not self.when(ctx):
            return False
        return not self.needs or any(len(getattr(ctx, f)) for f in self.needs if getattr(ctx, f) is not None)


def several_machines(ctx: ReportContext) -> bool:
    """A comparison: the first screen is the question, the matrix, one figure and the machines' facts."""
    return len(set(ctx.machines.values())) > 1


def one_machine(ctx: ReportContext) -> bool:
    return not several_machines(ctx)


def _summary(ctx: ReportContext) -> str:
    table = summary_rows(ctx, ctx.fit_rows, ctx.fit_texts)
    ctx.files["table.csv"] = table
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


def _matrix(ctx: ReportContext) -> str:
    table = matrix(ctx, "time")
    ctx.files["table.tex"] = matrix_latex(table, QUESTION.format(what="time") + " " + legend("time"))
    return matrix_markdown(table) + "\n" + legend("time")


def _other_matrices(ctx: ReportContext) -> str:
    parts = ["## FLOPs, memory and paths, column by column\n"]
    for metric in ("flops", "memory"):
        parts += [f"### {WHAT[metric].capitalize()}\n", matrix_markdown(matrix(ctx, metric)), legend(metric)]
    parts += ["### Maximum path\n", matrix_markdown(path_matrix(ctx)), PATH_LEGEND]
    return "\n".join(parts)


def _facts(ctx: ReportContext) -> str:
    return "**The columns' runs**\n\n" + facts(ctx).to_markdown(index=False) + "\n"


POINTS = ("points",)
MEASURED = ("points", "decode")
SECTIONS: list[Section] = [
    Section(
        "question", lambda ctx: QUESTION.format(what="time") + "\n", MEASURED, place="headline", when=several_machines
    ),
    Section(
        "headline", lambda ctx: headline(ctx, ctx.fit_texts, ctx.fit_rows), POINTS, place="headline", when=one_machine
    ),
    Section("matrix", _matrix, MEASURED, ("table.tex",), place="verdicts"),
    Section("table1 figure", lambda ctx: table1_section(ctx, ctx.fit_rows), POINTS, place="figure", when=one_machine),
    Section("forest", forest_figure, MEASURED, place="figure", when=several_machines),
    Section("facts", _facts, MEASURED, place="facts", when=several_machines),
    Section("other matrices", _other_matrices, MEASURED),
    Section(
        "table1 figures",
        lambda ctx: "## Table 1 measured, source by source\n\n" + table1_section(ctx, ctx.fit_rows),
        POINTS,
        when=several_machines,
    ),
    Section("summary", _summary, POINTS, writes=("table.csv",)),
    Section("problems", _problems, POINTS),
    Section("flops", _scaling("flops", "Compute: FLOPs", FLOPS_INTRO, flops_check), POINTS),
    Section(
        "time",
        _scaling("time", "Time", TIME_INTRO, lambda ctx: default_policy_section(ctx) + "\n" + two_term_section(ctx)),
        POINTS,
    ),
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
    Section("decode headline", decode_headline, MEASURED, place="headline", when=one_machine),
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
