"""Publishing a report whole: built in a folder beside the output folder, switched in by two renames under
a lock; the files a user put there are kept. A killed report's leftovers are cleared by the next one
(method: docs/method.md)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import BadInput

TAG = ".report-tmp-"  # beside the output folder: .<name>.report-tmp-{lock,new,old}
# A report's own files: these, and the figures its pages link (the manifest: written by older versions).
OWN_FILES = ("report.md", "report.html", "fits.csv", "numbers.json", "table.tex", "table.csv", ".report-manifest.json")
PAGES = ("report.md", "report.html")
_FIGURE_LINK = re.compile(r"""figures/([^"'\s()<>/]+)""")


def _own_files(folder: Path) -> set[str]:
    own = set(OWN_FILES)
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
    """Move what the old report did not write into `out`, then remove the old folder (kept aside where `out`
    has a file of the same name)."""
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


@contextmanager
def staged(out_dir: Path) -> Iterator[Path]:
    """The folder to write a report into; on leaving the block it replaces `out_dir` (on an error, dropped)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise BadInput(f"--out {out_dir}: exists and is not a folder; give a folder for the report")
    out = Path(os.path.realpath(out_dir))  # a linked output folder: the folder the link names
    out.parent.mkdir(parents=True, exist_ok=True)
    beside = out.parent / f".{out.name}{TAG}"
    new, old = Path(f"{beside}new"), Path(f"{beside}old")
    lock = FileLock(f"{beside}lock", timeout=0, thread_local=False)
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
        new.mkdir()
        try:
            yield new
            _sync(new)
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
