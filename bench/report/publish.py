"""Publishing a report: the output folder holds the old report whole or the new one whole, at every moment.

`python -m bench report` never writes into its output folder (`reports/`, or `--out DIR`) while it builds,
and it removes nothing there that it did not write itself.

How (`staged`, used by build.build_report):

1. Leftovers first. Staging folders that an earlier report left behind (it was killed) are cleared away as
   in step 6, when the process that made them is gone (its pid is not alive, or names a process started
   after the folder was last changed), so they never pile up. A staging folder of a report still running
   is left alone.
2. Build. The whole report is written into a staging folder beside the output folder, on the same
   filesystem: `<parent>/.<name>.report-tmp-<pid>-<random>/`, holding the marker file `.report-staging`
   while it is being built. The output folder does not change, however long the build takes or wherever
   it fails (a failed build deletes its staging folder).
3. Manifest. The staging folder gets `.report-manifest.json`: every file the report wrote, with its sha256.
   The manifest is how the next report knows which files are its own.
4. Carry over. Every file in the output folder that the report did not write (not listed in the old
   manifest with the same content, and not a path the new report writes) is hard-linked into the staging
   folder at the same path (copied where the filesystem has no hard links): a user's `DIR/notes.txt` or
   `DIR/figures/mine.png` is in both folders from now on, never in neither.
5. Switch. The marker is removed and the staging folder and the output folder are exchanged in one system
   call (`renameat2(RENAME_EXCHANGE)` on Linux, `renamex_np(RENAME_SWAP)` on macOS). The output path names
   the old folder up to that instant and the new one after it; nothing else changes what it holds, so a
   report.html, the figures it links, numbers.json, the tables and the manifest always belong to one report.
6. Retire. The old folder, now at the staging path, is taken apart with care: the files its manifest lists
   (still with the content the report wrote) and the files with a twin in the new folder (step 4's links)
   are removed; anything else (a file a user put into the output folder during the build) is moved into
   the output folder. A file the report did not write is never removed: what cannot be moved back stays in
   the leftover folder, named on stderr.

So a report killed at any point leaves the output folder as it was before step 5 (the old report, whole) or
as it is after it (the new one, whole), plus at most its staging folder, which the next report clears: a
folder with the marker holds only the unpublished report and links (deleted), one without it may hold the
old output folder (retired as in step 6). For a folder without a manifest (written before manifests were),
the report's own files are the fixed ones (report.md, report.html, fits.csv, numbers.json, table.tex,
table.csv) and the figures its report.html or report.md links.

In place, where the switch cannot be made: the system has no exchange call or the filesystem refuses it,
the output folder is a mount point or holds the current working directory (a shell inside it would be left
in a deleted folder), or its parent is not writable (then the staging folder is
`DIR/.report-tmp-<pid>-<random>/`). The new files are then moved in one by one (each an atomic rename):
the manifest first, listing old and new files, then the figures, the tables and numbers.json, report.md
and report.html last, then the old report's files the new one does not write are removed and the manifest
is rewritten. Every figure a report.html links exists at every moment, but for a moment the old report.html
may show new figures; a note on stderr says the report was published in place, and why.
"""

from __future__ import annotations

import ctypes
import errno
import filecmp
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from ..errors import BadInput

MANIFEST = ".report-manifest.json"
MARKER = ".report-staging"  # in a staging folder until the moment it is published
TMP_TAG = ".report-tmp-"
LEGACY_FILES = ("report.md", "report.html", "fits.csv", "numbers.json", "table.tex", "table.csv")
LAST = ("report.md", "report.html")  # in place: they link the figures, so they are replaced last
_FIGURE_LINK = re.compile(r"""figures/([^"'\s()<>]+)""")
_INSIDE = re.compile(rf"^{re.escape(TMP_TAG)}(\d+)-[0-9a-f]{{8}}$")  # a staging folder inside the output folder


def _beside(out: Path) -> re.Pattern:
    """A staging folder beside the output folder `out`."""
    return re.compile(rf"^\.{re.escape(out.name)}{re.escape(TMP_TAG)}(\d+)-[0-9a-f]{{8}}$")


# --------------------------------------------------------------------------------------------- files
def _walk(top: Path, rel: str = "") -> Iterator[tuple[str, bool]]:
    """(relative path, is a folder) of everything below `top`, a folder before its contents; links are
    not followed (a link is a file here)."""
    try:
        entries = sorted(os.scandir(top / rel if rel else top), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for entry in entries:
        path = f"{rel}/{entry.name}" if rel else entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        yield path, is_dir
        if is_dir:
            yield from _walk(top, path)


def _sha256(path: Path, sync: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
        if sync:
            try:
                os.fsync(f.fileno())
            except OSError:
                pass  # a filesystem that cannot sync a file opened for reading
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_manifest(folder: Path, files: dict[str, str | None]) -> None:
    doc = {
        "about": "The files `python -m bench report` wrote here, with their sha256 (null: in flight). The next "
        "report replaces or removes only these; any other file here is left alone.",
        "files": dict(sorted(files.items())),
    }
    tmp = folder / f"{MANIFEST}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)


def _read_manifest(folder: Path) -> dict[str, str | None] | None:
    try:
        files = json.loads((folder / MANIFEST).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(files, dict):
        return None
    return {  # paths inside the folder only, whatever an edited manifest says
        str(rel): (h if isinstance(h, str) else None)
        for rel, h in files.items()
        if str(rel) and not os.path.isabs(str(rel)) and ".." not in Path(str(rel)).parts
    }


def _owned(folder: Path) -> dict[str, str | None]:
    """The files of `folder` a report wrote: its manifest (path -> sha256, None for any content); for a
    folder without one, the fixed report files and the figures its report links."""
    listed = _read_manifest(folder)
    if listed is not None:
        return listed
    owned: dict[str, str | None] = {name: None for name in LEGACY_FILES if (folder / name).is_file()}
    for page in ("report.html", "report.md"):
        try:
            text = (folder / page).read_text(errors="replace")
        except OSError:
            continue
        for name in _FIGURE_LINK.findall(text):
            if "/" not in name and ".." not in name:
                owned[f"figures/{name}"] = None
    return owned


def _is_owned(folder: Path, rel: str, owned: dict[str, str | None]) -> bool:
    """Whether the report wrote `folder/rel` (listed, and as it wrote it: a file a user has changed since is
    the user's)."""
    if rel not in owned:
        return False
    path = folder / rel
    if path.is_symlink() or not path.is_file():
        return False
    expected = owned[rel]
    return expected is None or _sha256(path) == expected


def _twins(a: Path, b: Path) -> bool:
    """Whether `b` is the same file as `a`: one file under two names (a hard link), the same link target,
    or a copy with the same bytes."""
    try:
        sa, sb = a.lstat(), b.lstat()
    except OSError:
        return False
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    return a.is_file() and b.is_file() and sa.st_size == sb.st_size and filecmp.cmp(a, b, shallow=False)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def _put_back(src: Path, dst: Path) -> bool:
    """Move `src` to `dst` unless something is there already; False if it stays where it is."""
    if os.path.lexists(dst):
        return False
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst, follow_symlinks=False)  # fails rather than overwrite a file made meanwhile
        except FileExistsError:
            return False
        except OSError:
            os.rename(src, dst)
            return True
        os.unlink(src)
        return True
    except OSError:
        return False


# ------------------------------------------------------------------------------------- the switch
@functools.cache
def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_NOT_HERE = {errno.ENOSYS, errno.EINVAL, errno.EXDEV, errno.EBUSY, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", -1)}


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders at `a` and `b` in one system call; False where this system or filesystem cannot."""
    libc = _libc()
    if sys.platform.startswith("linux"):
        fn = getattr(libc, "renameat2", None)
        if fn is None:
            return False
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        at_fdcwd, rename_exchange = -100, 2
        rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    elif sys.platform == "darwin":
        fn = getattr(libc, "renamex_np", None)
        if fn is None:
            return False
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        rc = fn(os.fsencode(a), os.fsencode(b), 0x2)  # RENAME_SWAP
    else:
        return False
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in _NOT_HERE:
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _why_in_place(out: Path) -> str | None:
    """Why the output folder cannot be switched whole, or None if it can."""
    if not (sys.platform.startswith("linux") or sys.platform == "darwin") or _libc() is None:
        return "this system has no call that exchanges two folders"
    if out.exists():
        if os.path.ismount(out):
            return "it is a mount point"
        try:
            cwd = Path.cwd().resolve()
        except OSError:
            return None
        if cwd == out or cwd.is_relative_to(out):
            return "it holds the current working directory"
    return None


# --------------------------------------------------------------------------------------- leftovers
def _stale(pid: int, folder: Path) -> bool:
    """Whether the process that made `folder` is gone: its pid is not alive, or is a later process's."""
    if pid == os.getpid():
        return False
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False
    try:
        return started > folder.lstat().st_mtime + 1.0
    except OSError:
        return False


def _retire(folder: Path, out: Path) -> list[str]:
    """Take apart a folder that was (or may have been) the output folder: remove the report's own files and
    the twins of files in `out`, move the rest into `out`; returns what had to stay."""
    if (folder / MARKER).exists():  # never published: the unfinished report and links to files in `out`
        shutil.rmtree(folder, ignore_errors=True)
        return []
    owned = _owned(folder)
    put_back = out.is_dir()
    stayed = []
    entries = list(_walk(folder))
    not_empty = {rel.rpartition("/")[0] for rel, _ in entries}
    for rel, is_dir in entries:
        path = folder / rel
        if is_dir:
            if put_back and rel not in not_empty:  # a user's empty folder
                (out / rel).mkdir(parents=True, exist_ok=True)
        elif rel in (MANIFEST, f"{MANIFEST}.tmp", MARKER) or _is_owned(folder, rel, owned) or _twins(path, out / rel):
            path.unlink(missing_ok=True)
        elif not (put_back and _put_back(path, out / rel)):
            stayed.append(rel)
    for rel, is_dir in reversed(entries):
        if is_dir:
            try:
                (folder / rel).rmdir()
            except OSError:
                pass  # not empty: what stayed, or appeared since (the next report looks again)
    try:
        folder.rmdir()
    except OSError:
        pass
    if stayed:
        print(
            f"note: {folder} keeps {len(stayed)} file(s) that were in {out} and could not be put back there "
            f"(a file of that name is there now): {', '.join(stayed[:5])}{' ...' if len(stayed) > 5 else ''}",
            file=sys.stderr,
        )
    return stayed


def remove_stale(out: Path) -> None:
    """Clear the staging folders that killed reports left beside `out` (and inside it)."""
    places = [(out.parent, _beside(out))]
    if out.is_dir():
        places.append((out, _INSIDE))
    for where, pattern in places:
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            match = pattern.match(name)
            folder = where / name
            if match and folder.is_dir() and not folder.is_symlink() and _stale(int(match.group(1)), folder):
                _retire(folder, out)


# ---------------------------------------------------------------------------------------- staging
class Staging:
    """A staging folder for one report to `out_dir`; `publish()` puts it in place, `discard()` drops it."""

    def __init__(self, out_dir: Path):
        if out_dir.exists() and not out_dir.is_dir():
            raise BadInput(f"--out {out_dir}: exists and is not a folder; give a folder for the report")
        self.out = Path(os.path.realpath(out_dir))  # a linked output folder: the folder the link names
        self.out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(self.out)
        self.why_in_place = _why_in_place(self.out)
        token = f"{TMP_TAG}{os.getpid()}-{secrets.token_hex(4)}"
        self.path = self.out.parent / f".{self.out.name}{token}"
        try:
            self.path.mkdir()
        except PermissionError:
            self.why_in_place = self.why_in_place or f"its parent {self.out.parent} is not writable"
            self.out.mkdir(exist_ok=True)
            self.path = self.out / token
            self.path.mkdir()
        (self.path / MARKER).touch()
        self.done = False

    @property
    def inside(self) -> bool:
        return self.path.parent == self.out

    def discard(self) -> None:
        if not self.done:
            self.done = True
            if os.path.lexists(self.path):
                _retire(self.path, self.out)

    def publish(self) -> None:
        """Steps 3 to 6 of the module's description, or the publication in place."""
        try:
            written = self._manifest()
            if not self.inside and not self.out.exists():
                (self.path / MARKER).unlink()
                try:
                    os.rename(self.path, self.out)  # a new output folder: one rename publishes it whole
                    self.done = True
                    return
                except OSError:
                    (self.path / MARKER).touch()  # a folder of that name appeared meanwhile
            if not (self.why_in_place or self.inside):
                self._carry_over(written)
                _fsync_dir(self.path)
                (self.path / MARKER).unlink()
                if _exchange(self.path, self.out):
                    self.done = True
                    _fsync_dir(self.out.parent)
                    try:
                        _retire(self.path, self.out)
                    except OSError as exc:  # published; what is left the next report clears
                        print(f"note: could not clear {self.path} ({exc}); the next report does", file=sys.stderr)
                    return
                self.why_in_place = "the filesystem cannot exchange two folders"
            self._in_place(written)
        finally:
            self.discard()

    def _manifest(self) -> dict[str, str]:
        written = {
            rel: _sha256(self.path / rel, sync=True)
            for rel, is_dir in _walk(self.path)
            if not is_dir and rel not in (MARKER, MANIFEST)
        }
        for rel, is_dir in _walk(self.path):
            if is_dir:
                _fsync_dir(self.path / rel)
        _write_manifest(self.path, written)
        return written

    def _carry_over(self, written: dict[str, str]) -> None:
        """Step 4: hard-link into the staging folder what is in the output folder and is not the report's."""
        os.chmod(self.path, self.out.stat().st_mode & 0o7777)
        owned = _owned(self.out)
        for rel, is_dir in _walk(self.out):
            if rel.split("/")[0] in (MANIFEST, f"{MANIFEST}.tmp", MARKER) or _INSIDE.match(rel.split("/")[0]):
                continue
            target = self.path / rel
            if is_dir:
                if not os.path.lexists(target):
                    target.mkdir()
                    os.chmod(target, (self.out / rel).stat().st_mode & 0o7777)
            elif rel not in written and not os.path.lexists(target) and not _is_owned(self.out, rel, owned):
                target.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(self.out / rel, target)

    def _in_place(self, written: dict[str, str]) -> None:
        """The new files moved into the output folder one by one; see the module's description."""
        print(f"note: --out {self.out}: the report is replaced file by file ({self.why_in_place})", file=sys.stderr)
        self.out.mkdir(exist_ok=True)
        owned = _owned(self.out)
        old = {rel for rel in owned if _is_owned(self.out, rel, owned)}
        _write_manifest(self.out, dict.fromkeys(old | set(written)))  # in flight: old and new are the report's
        order = sorted(written, key=lambda rel: (rel in LAST, LAST.index(rel) if rel in LAST else 0, rel))
        for rel in order:
            (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.path / rel, self.out / rel)
        for rel in sorted(old - set(written)):
            (self.out / rel).unlink(missing_ok=True)
        _write_manifest(self.out, written)
        self.done = True
        shutil.rmtree(self.path, ignore_errors=True)


@contextmanager
def staged(out_dir: Path) -> Iterator[Path]:
    """The folder to write a report into; on leaving the block the report is published to `out_dir` (or,
    on an error, dropped and `out_dir` left as it was)."""
    staging = Staging(out_dir)
    try:
        yield staging.path
    except BaseException:
        staging.discard()
        raise
    staging.publish()
