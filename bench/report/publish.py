"""A report published whole: built beside its folder, switched in by two renames under a lock (docs/method.md)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import BadInput, RunFailed
from .sections import written

TAG = ".report-tmp-"  # beside the output folder: .<name>.report-tmp-{new,old}
# A report's own files: these, its sections' (sections.written), the figures its pages link (the manifest: older).
OWN_FILES = ("report.md", "report.html", "fits.csv", "numbers.json", ".report-manifest.json")
PAGES = ("report.md", "report.html")
_FIGURE_LINK = re.compile(r"""figures/([^"'\s()<>/]+)""")


def _own_files(folder: Path) -> set[str]:
    own = set(OWN_FILES) | written()
    for page in PAGES:
        with contextlib.suppress(OSError):
            own |= {f"figures/{name}" for name in _FIGURE_LINK.findall((folder / page).read_text(errors="replace"))}
    return own


def _sync(folder: Path) -> None:
    """Flush `folder` to disk, so that a crash after the switch cannot publish empty files."""
    for root, _, files in os.walk(folder):
        for name in [*files, "."]:
            with contextlib.suppress(OSError):
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


def _retire(old: Path, out: Path) -> None:
    """Move what the old report did not write into `out`, then remove the old folder (kept if `out` has the name)."""
    own, owned, kept = _own_files(old), [], []
    for root, dirs, files in os.walk(old):
        here = Path(root)
        rel = here.relative_to(old)
        if not dirs and not files:
            (out / rel).mkdir(parents=True, exist_ok=True)  # a user's empty folder
        for name in files + [d for d in dirs if (here / d).is_symlink()]:  # a link moved, not followed
            path = (rel / name).as_posix()
            if path in own:
                owned.append(path)
            elif os.path.lexists(out / path):
                kept.append(path)
            else:
                (out / path).parent.mkdir(parents=True, exist_ok=True)
                os.rename(here / name, out / path)
    for path in sorted(owned, key=lambda path: path in PAGES):  # the pages last: they name the report's figures
        os.unlink(old / path)
    if not kept:
        shutil.rmtree(old)
        return
    keep = old.with_name(f"{old.name}-kept-{os.getpid()}")
    os.rename(old, keep)
    print(f"note: {keep} keeps {len(kept)} file(s) whose names {out} now uses: {', '.join(kept[:5])}", file=sys.stderr)


def _unwritten(out_dir: Path, new: Path, exc: OSError) -> RunFailed:
    """The report could not be written: the file it was writing, as named in `out_dir`, and why."""
    where = Path(exc.filename) if exc.filename else None
    if where is None or not where.is_relative_to(new):
        written = [p for p in new.rglob("*") if p.is_file()] if new.is_dir() else []
        where = max(written, key=lambda p: p.stat().st_mtime_ns, default=where or new)
    named = out_dir / where.relative_to(new) if where.is_relative_to(new) else where
    why = "no space left on the device" if exc.errno == errno.ENOSPC else exc.strerror or type(exc).__name__
    return RunFailed(
        f"{named}: the report could not be written ({why}); whatever report {out_dir} held is kept as it was"
    )


def is_report_dir(folder: Path) -> bool:
    try:
        numbers = json.loads((folder / "numbers.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(numbers, dict) and isinstance(numbers.get("numbers"), dict)


def _lock_path(out: Path) -> Path:
    digest = hashlib.sha1(os.fsencode(out)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"seqbench-report-{digest}.lock"


@contextmanager
def staged(out_dir: Path) -> Iterator[Path]:
    """The folder to write a report into; on leaving the block it replaces `out_dir` (on an error, dropped)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise BadInput(f"--out {out_dir}: exists and is not a folder; give a folder for the report")
    out = Path(os.path.realpath(out_dir))  # a linked output folder: the folder the link names
    if out.is_dir() and any(out.iterdir()) and not is_report_dir(out):
        raise BadInput(
            f"--out {out_dir}: holds files and is not a report's folder (no report's numbers.json); a report "
            "replaces only a report: give a new or empty folder"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    beside = out.parent / f".{out.name}{TAG}"
    new, old = Path(f"{beside}new"), Path(f"{beside}old")
    lock = FileLock(str(_lock_path(out)), timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise BadInput(f"--out {out_dir}: another report is being written there; wait for it to end") from None
    try:
        shutil.rmtree(new, ignore_errors=True)  # a killed report's leftovers
        if old.exists() and out.exists():
            _retire(old, out)
        elif old.exists():  # killed between its two renames: the old report back in place
            os.rename(old, out)
        try:
            try:
                new.mkdir()
                yield new
                _sync(new)
            except OSError as exc:  # a full disk, a read-only folder: say where; the previous report stays
                raise _unwritten(out_dir, new, exc) from None
            if out.exists():
                shutil.copymode(out, new)
                os.rename(out, old)
            try:
                os.rename(new, out)
            except OSError:
                if old.exists():
                    os.rename(old, out)
                raise
        finally:
            shutil.rmtree(new, ignore_errors=True)
        if old.exists():
            _retire(old, out)
    finally:
        lock.release()
