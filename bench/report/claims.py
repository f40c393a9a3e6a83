"""The claims section: each note's statements in its words and a gloss, with verdict, checks, correction; then each claim."""

from __future__ import annotations

import json
import math

from ..errors import RunFailed
from .claims_figures import FIGURES
from .context import ReportContext
from .load import newest_run

VERDICT_MARK = {"holds": "holds", "fails": "**fails**", "partly": "*partly*"}
VERDICT_WORDS = {"holds": "Holds", "partly": "Holds in part", "fails": "Does not hold"}
VERDICT_COUNTED = {"holds": "hold", "partly": "hold in part", "fails": "do not hold"}
ORDER = ("holds", "partly", "fails")


def claims_section(ctx: ReportContext) -> str:
    lines = ["## Textbook claims", ""]
    if ctx.claims is None or ctx.claims.empty:
        lines.append("No claims are stored: run `python -m bench claims` to measure them.")
        return "\n".join(lines) + "\n"
    from ..claims import catalog  # noqa: PLC0415 - the notes' statements: data beside the claims

    run_id = _latest_run(ctx)
    rows = [row for _, row in ctx.claims[ctx.claims["run_id"] == run_id].iterrows()]
    statements, notes = catalog()["statement"], catalog()["meta"]["notes"]
    measures = [(row, _statements_of(row)) for row in rows]
    by_statement: dict[str, list] = {}
    for row, said in measures:
        for statement_id in said:
            by_statement.setdefault(statement_id, []).append(row)
    verdicts = {e["id"]: _statement_verdict(by_statement.get(e["id"], [])) for e in statements if e["checkable"]}
    own = [row for row, said in measures if not said]
    lines += _headline(ctx, run_id, statements, verdicts, own)
    lines += _note_table(notes, statements, verdicts)
    for note in notes:
        lines += _note(ctx, note, _in_note(statements, note), by_statement, verdicts, run_id)
    lines += _own(ctx, own, run_id)
    lines += ["### Each claim in detail", ""]
    for row in rows:
        lines += _paragraph(ctx, row, run_id)
    return "\n".join(lines) + "\n"


def _statements_of(row) -> list[str]:
    """The catalogue statements a stored claim measures: its record, else its id's today, else its note lines'."""
    said = parse_details(row).get("statements")
    if said is None:
        from ..claims import STATEMENTS, catalog  # noqa: PLC0415 - a run stored before claims named them

        known = STATEMENTS.get(str(row["claim_id"]))
        refs = {ref.strip() for ref in str(row.get("seed_ref") or "").split(";") if _said(ref)}
        said = (
            list(known.notes or ())
            if known
            else [e["id"] for e in catalog()["statement"] if refs and set(e["seed_ref"]) <= refs]
        )
    return said


def _in_note(statements, note: dict) -> list[dict]:
    return [e for e in statements if any(ref.startswith(note["file"]) for ref in e["seed_ref"])]


def _statement_verdict(rows) -> str | None:
    verdicts = {str(row["verdict"]) for row in rows}
    return None if not verdicts else verdicts.pop() if len(verdicts) == 1 else "partly"


def _counted(found: list, verdict: str) -> str:
    n = found.count(verdict)
    return f"{n} {VERDICT_WORDS[verdict].lower() if n == 1 else VERDICT_COUNTED[verdict]}"


def _counts(verdicts) -> str:
    found = list(verdicts)
    parts = [_counted(found, v) for v in ORDER]
    missing = found.count(None)
    return ", ".join(parts) + (f", {missing} not measured in this run" if missing else "")


def _headline(ctx, run_id: str, statements, verdicts, own) -> list[str]:
    untrained = [e for e in statements if not e["checkable"]]
    own_counts = [str(row["verdict"]) for row in own]
    text = (
        f"The five study notes make {len(verdicts)} statements this harness can check without training a model. "
        f"Run `{run_id}` on {ctx.machine_of(run_id)} measured them: {_counts(verdicts.values())}. "
        f"{len(untrained)} more need a trained model or data; they are listed under their notes with the reason."
    )
    if own:
        text += (
            f" Apart from the notes, the harness checks {len(own)} claims of its own (no note makes them): "
            + ", ".join(_counted(own_counts, v) for v in ORDER)
            + "."
        )
    return [
        text,
        "",
        "Each statement below is quoted as the note writes it, with a literal English gloss, then what was "
        "checked, each measured value against the value expected (the bounds are fixed in `bench/claims/` before "
        "the run), and where the note is wrong, the correction.",
        "",
    ]


def _note_table(notes, statements, verdicts) -> list[str]:
    lines = [
        "| note | " + " | ".join(VERDICT_WORDS[v].lower() for v in ORDER) + " | needs training |",
        "| --- | --- | --- | --- | --- |",
    ]
    for note in notes:
        mine = _in_note(statements, note)
        found = [verdicts.get(e["id"]) for e in mine if e["checkable"]]
        counts = [str(found.count(v)) for v in ORDER]
        lines.append(
            f"| [{_title(note)}](#{_anchor(note)}) | "
            + " | ".join(counts)
            + f" | {sum(not e['checkable'] for e in mine)} |"
        )
    return [*lines, ""]


def _title(note: dict) -> str:
    return f"{note['file'][:3]}: " + _cell(note["description"].split(":")[0].split("(")[0].strip())


def _anchor(note: dict) -> str:
    return f"note-{note['file'][:3]}"


def _quotes(entry: dict, name: str) -> str:
    said = zip(entry["seed_ref"], entry.get("quotes", [entry["quote"]]), entry.get("glosses", [entry.get("gloss", "")]))
    return "; ".join(
        f"line {ref.split(':')[1]}: “{_cell(quote)}” — *{_cell(gloss)}*"
        for ref, quote, gloss in said
        if ref.startswith(name)
    )


def _note(ctx, note: dict, mine, by_statement, verdicts, run_id: str) -> list[str]:
    name = note["file"]
    lines = [
        f'<a id="{_anchor(note)}"></a>',
        "",
        f"### Note {_title(note)}",
        "",
        f"`{name}`: {_cell(note['description'])}",
        "",
    ]
    for entry in (e for e in mine if e["checkable"]):
        verdict = verdicts.get(entry["id"])
        lines.append(f"- **{VERDICT_WORDS.get(verdict, 'Not measured in this run')}.** {_quotes(entry, name)}")
        lines.append(f"    - Checked: {_cell(entry['statement'])}")
        for row in by_statement.get(entry["id"], []):
            lines.append(
                f"    - Measured (`{row['claim_id']}`, {VERDICT_WORDS[str(row['verdict'])].lower()}): {_measured(ctx, row, run_id)}"
            )
        if entry.get("note"):
            label = "Note" if verdict == "holds" else "Correction"
            lines.append(f"    - {label}: {_cell(entry['note'])}")
    untrained = [e for e in mine if not e["checkable"]]
    if untrained:
        lines += ["", "Needs a trained model or data, so not measured here:", ""]
        for entry in untrained:
            lines.append(f"- {_quotes(entry, name)}")
            lines.append(f"    - Claimed: {_cell(entry['statement'])}")
            lines.append(f"    - Why not here: {_cell(entry['how'])}")
            if entry.get("note"):
                lines.append(f"    - Note: {_cell(entry['note'])}")
    return [*lines, ""]


def _measured(ctx, row, run_id: str) -> str:
    return _check_sentences(row) or f"{_cite_measured(ctx, row, run_id)}; expected: {_cell(row['expected'])}."


def _check_sentences(row) -> str:
    checks = parse_details(row).get("checks") or []
    return "; ".join(_cell(check["sentence"]) for check in checks) + "." if checks else ""


def _own(ctx, own, run_id: str) -> list[str]:
    if not own:
        return []
    lines = [
        "### The harness's own claims",
        "",
        "Claims no note makes, which the harness checks on every layer it measures.",
        "",
        "| claim | verdict | measured | against the expected |",
        "| --- | --- | --- | --- |",
    ]
    for row in own:
        lines.append(
            f"| `{row['claim_id']}` | {VERDICT_WORDS[str(row['verdict'])].lower()} | {_cite_measured(ctx, row, run_id)} | "
            f"{_measured(ctx, row, run_id)} |"
        )
    return [*lines, ""]


def _latest_run(ctx: ReportContext) -> str:
    claims = ctx.claims
    if "machine" in claims and (claims["machine"] == ctx.primary).any():
        claims = claims[claims["machine"] == ctx.primary]
    return newest_run(ctx.runs, list(dict.fromkeys(claims["run_id"].astype(str))))


def _prefix(ctx: ReportContext, run_id: str) -> str:
    rows = ctx.claims[ctx.claims["run_id"].astype(str) == run_id]
    return f"{rows['machine'].iloc[0]}.claims" if "machine" in rows and len(rows) else "claims"


def _said(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def parse_measured(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) if float(value).is_integer() and abs(value) < 1e15 else float(value)
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isfinite(number) and number.is_integer() and "e" not in text.lower() and "." not in text:
        return int(number)
    return number


def parse_details(row) -> dict:
    """The JSON behind a claim's figure and numbers, {} where there is none; damaged JSON is an error."""
    raw = row.get("details") if hasattr(row, "get") else None
    if raw is None or (isinstance(raw, float) and math.isnan(raw)) or str(raw).strip() == "":
        return {}
    try:
        details = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as exc:
        raise RunFailed(f"claims.csv: claim {row.get('claim_id')!r}: `details` is not valid JSON ({exc})") from None
    if not isinstance(details, dict):
        raise RunFailed(f"claims.csv: claim {row.get('claim_id')!r}: `details` is not a JSON object")
    return details


def _unit(row) -> str:
    unit = row.get("unit")
    return "1" if unit is None or (isinstance(unit, float) and math.isnan(unit)) else str(unit)


def _cite_measured(ctx: ReportContext, row, run_id: str) -> str:
    return ctx.cite(
        f"{_prefix(ctx, run_id)}.{row['claim_id']}.measured",
        parse_measured(row["measured"]),
        _unit(row),
        run_id,
        note=str(row["expected"]),
    )


def _paragraph(ctx: ReportContext, row, run_id: str) -> list[str]:
    claim_id = row["claim_id"]
    details = parse_details(row)
    text = (
        f"**`{claim_id}`** — {VERDICT_MARK.get(row['verdict'], row['verdict'])}. {row['statement']} "
        f"Measured {_cite_measured(ctx, row, run_id)}. "
        + (_check_sentences(row) or f"Expected: {_cell(row['expected'])}.")
    )
    if _said(row.get("seed_ref")):
        text += f" Said in the notes at {_cell(row['seed_ref'])}."
    elif "seed_ref" in row:
        text += " Not said in the study notes."
    extras = []
    for name, number in details.get("numbers", {}).items():
        value = number.get("value")
        shown = ctx.cite(
            f"{_prefix(ctx, run_id)}.{claim_id}.{name}",
            value,
            number.get("unit", "1"),
            run_id,
            note=number.get("label", ""),
        )
        extras.append(f"{number.get('label', name)}: {shown}")
    if extras:
        text += " Also measured: " + "; ".join(extras) + "."
    text += f" Source: {row['source']}."
    out = [text, ""]
    draw = FIGURES.get(claim_id)
    if draw is not None and details:
        try:
            fig, caption = draw(details)
        except (KeyError, TypeError, ValueError) as exc:  # a details blob from another version: said, not hidden
            out += [f"_Figure omitted: the stored details lack what it draws ({type(exc).__name__}: {exc})._", ""]
        else:
            out += [ctx.figure(fig, f"claims_{claim_id}", f"Claim {claim_id}", f"{caption} (run {run_id})"), ""]
    return out
