"""Helpers shared by the command modules: JSON output, rich tables, safe output files, display units."""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

GIB = 2**30


def json_safe(obj: Any) -> Any:
    """``obj`` with every float that is not finite (an undefined figure, e.g. the TPOT of requests that
    generate one token) replaced by None, through dicts, lists and tuples: JSON has no NaN or infinity."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def json_text(obj: Any) -> str:
    """The JSON text ``echo_json`` prints: indented, undefined figures as null (``json_safe``)."""
    return json.dumps(json_safe(obj), indent=2, allow_nan=False, default=str)


def echo_json(obj: Any) -> None:
    """Print one JSON object on stdout; undefined figures (NaN, infinity) are null (``json_safe``)."""
    click.echo(json_text(obj))


def fmt_or_na(value: float, spec: str) -> str:
    """``format(value, spec)``, or ``n/a`` when ``value`` is not finite (a figure that is undefined)."""
    return format(value, spec) if math.isfinite(value) else "n/a"


def say(text: object = "", *, err: bool = False) -> None:
    """``click.echo`` of normal output, every line terminal-safe (``shown``): a name read from a file or an
    argument that holds ESC, BEL or a bidi override cannot set the terminal's title, colours or cursor."""
    click.echo("\n".join(shown(line) for line in str(text).split("\n")), err=err)


def print_notes(*results: Any) -> None:
    """``note: ...`` for every note of ``results`` in turn (``workbench.specs.estimate.Result.notes``)."""
    for result in results:
        for note in result.notes:
            say(f"note: {note}")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on stdout; numbers right-aligned. Every cell, header and the title are plain text
    (``rich.text.Text`` of ``shown``): neither rich markup (``[bold]``, ``[link=...]``) nor control characters
    in a name reach the terminal."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(shown(title)), title_justify="left")
    for i, col in enumerate(columns):
        numeric = bool(rows) and isinstance(rows[0][i], int | float)
        table.add_column(Text(shown(col)), justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(Text(shown(v)) for v in row))
    Console(width=160).print(table)


def fmt_count(n: float) -> str:
    """1.23e9 -> '1.23B' (counts, not bytes)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def fmt_gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.1f} GiB"


# Output files ------------------------------------------------------------------------------------------
# Every command that writes files goes through these: the paths are checked at the start (``check_outputs``),
# the files are written only after the work succeeded, each into a temporary file beside its target, and
# moved into place at the end (``write_outputs``, ``write_folder``). Without ``force`` the move never replaces
# a file, not even one that appeared while the command ran (a hard link, or an O_EXCL placeholder, claims the
# name); a failure removes the temporary files and whatever this call had already put in place.


@dataclass(frozen=True)
class Output:
    """One output a command will write: a file, or a folder of files (``files``, written inside ``path``).

    ``marker`` (folders only) is the file that marks a folder as written by an earlier run of the same
    command: such a folder may be refilled with ``--force``; any other non-empty folder is refused.
    ``marker=None`` with ``files`` means the files go into a folder that may hold other files (created if
    missing); each file is then checked like a single output file."""

    option: str
    path: Path
    folder: bool = False
    files: tuple[str, ...] = ()
    marker: str | None = None

    def claims(self) -> list[Path]:
        """The paths this output writes (the folder itself and its files for a folder)."""
        if not self.folder:
            return [self.path]
        return [self.path, *(self.path / name for name in self.files)]


def output_file(option: str, path: str | Path | None) -> Output | None:
    """An ``Output`` for an optional file option (None when the option was not given)."""
    return None if path is None else Output(option, Path(path))


def check_outputs(*outputs: Output | None, force: bool) -> None:
    """Check, before any work, that every output may be written (None entries are skipped).

    Raises ``click.UsageError`` when two outputs name the same path (resolved, so ``a.csv`` and ``./a.csv``
    clash) and ``click.ClickException`` when an output would replace a file without ``force``, its folder is
    missing, or a folder output is not empty and not from an earlier run."""
    given = [o for o in outputs if o is not None]
    owner: dict[Path, str] = {}
    for out in given:
        for path in out.claims():
            key = _resolved(path)
            other = owner.get(key)
            if other is not None and other != out.option:
                raise click.UsageError(
                    f"{other} and {out.option} both name {path}; give each output its own path"
                )
            owner[key] = out.option
    for out in given:
        if not out.folder:
            output_path(out.path, force=force)
        elif out.marker is not None:
            check_output_folder(out.path, marker=out.marker, force=force, option=out.option)
        else:
            if out.path.exists() and not out.path.is_dir():
                raise click.ClickException(f"{out.option} {out.path} is not a folder")
            for name in out.files:
                if out.path.is_dir():
                    output_path(out.path / name, force=force)


def output_path(path: str | Path, *, force: bool) -> Path:
    """Check that ``path`` may be written: refuse to overwrite an existing file unless ``force``, and refuse
    a folder or a missing parent folder always."""
    out = Path(path)
    if out.is_dir():
        raise click.ClickException(f"{out} is a folder; an output file needs a file name")
    if out.is_symlink() and not out.exists() and not force:
        raise click.ClickException(
            f"{out} is a symbolic link to {os.readlink(out)}, which does not exist; pass --force to replace "
            "the link, or give another path"
        )
    if out.exists() and not force:
        raise click.ClickException(f"{out} exists; pass --force to overwrite it")
    if out.parent and not out.parent.is_dir():
        raise click.ClickException(f"{out.parent}: no such folder")
    return out


def check_output_folder(path: str | Path, *, marker: str, force: bool, option: str = "--out") -> Path:
    """A folder output may be written if it is missing or empty, or holds ``marker`` from an earlier run and
    ``force`` is given; a non-empty folder without ``marker`` (someone's files) is refused even with force."""
    out = Path(path)
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        what = "a symbolic link to a missing path" if not out.exists() else "not a folder"
        raise click.ClickException(f"{option} {out} is {what}")
    if not out.is_dir() or not any(out.iterdir()):
        return out
    if (out / marker).is_file():
        if not force:
            raise click.ClickException(
                f"{out / marker} exists (an earlier run); pass --force to replace that run's files"
            )
        return out
    raise click.ClickException(
        f"{option} {out} is not empty and holds no {marker} from an earlier run; "
        "give a new or empty folder (its files are left alone, even with --force)"
    )


Writer = Callable[[Path], object]
"""Writes one output's content into the (temporary) path it is given."""


def write_outputs(writers: Mapping[str | Path, Writer], *, force: bool) -> list[Path]:
    """Write each file with its writer into a temporary file beside it, then move all into place.

    Missing folders on the way are created (and removed again on failure). Without ``force`` an existing
    target is never replaced, not even one that appeared since the start check (``click.ClickException``
    naming it); with it, targets are replaced atomically (``os.replace``). On any failure the temporary files
    and the targets this call created are removed. Returns the targets."""
    staged: list[tuple[Path, Path]] = []
    made: list[Path] = []
    created: list[Path] = []
    try:
        for target, writer in writers.items():
            target = Path(target)
            made += _make_folders(target.parent)
            tmp = _temp_file(target)
            staged.append((tmp, target))
            writer(tmp)
        for tmp, target in staged:
            existed = target.exists()
            _place(tmp, target, force=force)
            if not existed:
                created.append(target)
    except BaseException:
        for target in created:  # files replaced under force cannot be brought back
            _unlink(target)
        for tmp, _ in staged:
            _unlink(tmp)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return [target for _, target in staged]


@contextlib.contextmanager
def staged_files(fill: Writer) -> Iterator[dict[str, Writer]]:
    """Run ``fill`` on a private temporary folder and yield, for each file it wrote, a writer that copies
    it (for ``write_outputs``: a library function that writes a whole folder becomes single files). The
    temporary folder is removed on exit."""
    with tempfile.TemporaryDirectory(prefix="workbench-") as tmp:
        folder = Path(tmp)
        fill(folder)
        yield {p.name: _copy_from(p) for p in sorted(folder.iterdir()) if p.is_file()}


def text_writer(text: str) -> Writer:
    """A writer of ``text`` as UTF-8 (for ``write_outputs``)."""

    def write(path: Path) -> None:
        path.write_bytes(text.encode("utf-8"))

    return write


def atomic_write_bytes(path: str | Path, data: bytes, *, force: bool) -> Path:
    """Write ``data`` to ``path`` atomically (see ``write_outputs``)."""
    return write_outputs({path: lambda tmp: tmp.write_bytes(data)}, force=force)[0]


def atomic_write_text(path: str | Path, text: str, *, force: bool) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see ``write_outputs``)."""
    return write_outputs({path: text_writer(text)}, force=force)[0]


def write_folder(
    path: str | Path,
    fill: Writer,
    *,
    force: bool,
    marker: str | None,
    owned: Sequence[str] = (),
) -> list[Path]:
    """Fill a temporary folder beside ``path`` with ``fill``, then move its files into ``path``.

    With ``marker``, ``path`` must pass ``check_output_folder`` again at the end, the marker file is moved
    last, and files in ``owned`` that this run did not write are removed (stale parts of the earlier run).
    Without it, ``path`` may hold other files and each written file follows ``write_outputs``' rules. A
    missing ``path`` (and its missing parents) is created only at the end. Returns the files written."""
    target = Path(path)
    base = _existing_ancestor(target.parent)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=base))
    try:
        os.chmod(tmp_dir, 0o777 & ~_umask())
        fill(tmp_dir)
        names = sorted(p.name for p in tmp_dir.iterdir())
        if marker is not None:
            check_output_folder(target, marker=marker, force=force)
            names.sort(key=lambda n: n == marker)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp_dir, target)
                return [target / n for n in names]
            except OSError as exc:  # it appeared meanwhile: go on below with its rules
                if not target.is_dir():
                    raise click.ClickException(f"{target} appeared while the command ran: {exc}") from None
                if marker is not None:
                    check_output_folder(target, marker=marker, force=force)
        if marker is not None and force:
            stale = [n for n in owned if n not in names]
            _unlink(target / marker)  # no half-replaced folder passes for a finished one
            for name in stale:
                _unlink(target / name)
        return write_outputs({target / n: _move_from(tmp_dir / n) for n in names}, force=force)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _copy_from(src: Path) -> Writer:
    def copy(dst: Path) -> None:
        shutil.copyfile(src, dst)

    return copy


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return the ones created, outermost first."""
    missing: list[Path] = []
    while not folder.is_dir() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


def _move_from(src: Path) -> Writer:
    def move(dst: Path) -> None:
        os.replace(src, dst)

    return move


def _resolved(path: Path) -> Path:
    return path.resolve()


def _temp_file(target: Path) -> Path:
    """A new empty file beside ``target`` (same folder, so the final move is a rename), mode 0666 - umask."""
    folder = target.parent
    if not folder.is_dir():
        raise click.ClickException(f"{folder}: no such folder")
    for _ in range(100):
        tmp = folder / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"could not create a temporary file beside {target}")


def _place(tmp: Path, target: Path, *, force: bool) -> None:
    """Move ``tmp`` to ``target``; without ``force`` only if ``target`` does not exist (checked atomically)."""
    if target.is_dir():
        raise click.ClickException(f"{target} is a folder; an output file needs a file name")
    if force:
        os.replace(tmp, target)
        return
    clash = click.ClickException(
        f"{target} appeared while the command ran; left it alone (pass --force to overwrite it)"
    )
    try:
        os.link(tmp, target)  # fails if target exists: nothing is replaced
    except FileExistsError:
        raise clash from None
    except OSError:  # a file system without hard links: claim the name with O_EXCL, then fill it
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            raise clash from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def shown(text: object) -> str:
    """``text`` safe for a terminal: control and other non-printable characters (ESC, newline, bidi
    overrides) written as Python escapes, e.g. ``\\x1b``, ``\\n``."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(text))
