"""Reading a data file into a DataFrame, with errors a user can act on.

Why the bytes are read here instead of handing the path to pandas: pandas' own errors name a
byte position (``UnicodeDecodeError ... position 8027``), a C tokenizer state (``Expected 6
fields in line 14``) or nothing useful (``No columns to parse from file``).  Reading the file
ourselves lets every problem become one :class:`DataError` that names the file, the line (and
column) and the fix: an empty file, a folder, binary or UTF-16 bytes, text that is not UTF-8
("save it as UTF-8"), a truncated gzip, a broken JSON Lines line (by line number), a JSON object
where rows were expected, a duplicated column name.

CSV separators: a header line with no comma but with ``;``, a tab or ``|`` is read with that
separator (spreadsheets in many locales save ``;``-separated "CSV"); the choice is recorded in
``frame.attrs["autometrics_read_note"]`` so the caller can print it.

Errors are :class:`~autometrics.metricbank.errors.DataError` (a kind of ``UserError``: the CLI
turns it into exit 2 and one ``error:`` line).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from ..metricbank.errors import DataError, UserError
from ..metricbank.install import install_hint, plain

__all__ = ["UserError", "DataError", "read_table", "builtin_dataset_path", "row_ref", "as_text", "parse_reference_cell",
           "DEMO_DIR", "TABLE_SUFFIXES"]

DEMO_DIR = Path(__file__).parent / "demo_data"
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".ndjson", ".json", ".parquet", ".pq")  # each text kind also as .gz
_SEPARATORS = {";": "';'", "\t": "a tab", "|": "'|'"}


def builtin_dataset_path(name: str) -> Path:
    """``demo:simpeval`` -> the CSV vendored with the package."""
    path = DEMO_DIR / f"{name}.csv"
    if not path.exists():
        available = sorted(p.stem for p in DEMO_DIR.glob("*.csv"))
        raise DataError(f"no built-in dataset {name!r}; built-in datasets: {', '.join('demo:' + a for a in available)}")
    return path


def _kind(path: Path) -> tuple[str, bool]:
    """(format, gzipped) from the file name: ``x.csv.gz`` -> ("csv", True)."""
    name = path.name.lower()
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    for fmt, suffixes in (("csv", (".csv",)), ("tsv", (".tsv",)), ("jsonl", (".jsonl", ".ndjson")), ("json", (".json",)),
                          ("parquet", (".parquet", ".pq"))):
        if name.endswith(suffixes) and not (gz and fmt == "parquet"):
            return fmt, gz
    raise DataError(
        f"cannot read {path}: unknown file type {path.suffix!r}. Use .csv, .tsv, .jsonl, .json or .parquet "
        "(.csv/.tsv/.jsonl/.json may be gzipped: .csv.gz), or pass a pandas DataFrame."
    )


def _line_col(data: bytes, pos: int) -> str:
    line = data.count(b"\n", 0, pos) + 1
    col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def _text(path: Path, gz: bool) -> str:
    """The file's text (UTF-8, a BOM allowed), or a DataError saying what the bytes are instead."""
    label = str(path)
    data = path.read_bytes()
    if gz:
        try:
            data = gzip.decompress(data)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise DataError(f"cannot read {label}: a truncated or corrupt gzip file ({exc}). Re-create or re-download it "
                            f"(`gzip -t {path.name}` checks a gzip file).") from None
    if not data.strip():
        raise DataError(f"{label} is empty ({len(data)} bytes): it has no header and no rows. Check that you passed the "
                        "right file and that it was saved completely.")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise DataError(f"cannot read {label}: it is UTF-16 text. Save it as UTF-8 (in Excel: 'CSV UTF-8'; or "
                        f"`iconv -f UTF-16 -t UTF-8 {path.name} > utf8.{path.name.split('.', 1)[-1]}`).")
    head = data[: 1 << 16]
    nul = head.find(b"\x00")
    controls = sum(head.count(bytes([c])) for c in range(32) if c not in (9, 10, 12, 13))
    if nul >= 0 or controls > max(2, len(head) // 200):  # text has tabs and newlines, hardly any other control byte
        where = f"a NUL byte at {_line_col(data, nul)}" if nul >= 0 else f"{controls} control bytes in the first {len(head)}"
        raise DataError(f"cannot read {label}: it is a binary file, not text ({where}). Pass a CSV / TSV / JSONL / JSON "
                        "text file saved as UTF-8, or a .parquet file.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 1]
        raise DataError(f"cannot read {label}: it is not UTF-8 text (byte 0x{bad.hex()} at {_line_col(data, exc.start)}; "
                        "probably Latin-1 / Windows-1252). Save it as UTF-8 (in Excel: 'CSV UTF-8'; or "
                        f"`iconv -f WINDOWS-1252 -t UTF-8 {path.name} > utf8.{path.name.split('.', 1)[-1]}`).") from None


def _first_row(text: str, sep: str) -> list[str]:
    try:
        return next(csv.reader(io.StringIO(text), delimiter=sep))
    except (StopIteration, csv.Error):
        return []


def _read_csv(text: str, label: str, sep: str | None) -> tuple[pd.DataFrame, str | None]:
    note = None
    first = text.split("\n", 1)[0].strip()
    if sep is None and first.lower().startswith("sep=") and len(first) == 5:  # Excel's "sep=;" line
        sep, text = first[4], text.split("\n", 1)[1] if "\n" in text else ""
        note = f"read {Path(label).name} as {_SEPARATORS.get(sep, repr(sep))}-separated (its first line says sep={sep})"
    if sep is None:  # the header decides: no comma but ';' / tab / '|' -> that separator
        header = _first_row(text, ",")
        sep = ","
        if len(header) <= 1:
            best = max(_SEPARATORS, key=lambda s: len(_first_row(text, s)))
            if len(_first_row(text, best)) > 1:
                sep = best
                note = f"read {Path(label).name} as {_SEPARATORS[sep]}-separated (its header line has no comma)"
    header = _first_row(text, sep)
    seen: dict[str, int] = {}
    for i, name in enumerate(header):
        if name in seen:
            raise DataError(f"{label}: the header names column {name!r} twice (columns {seen[name] + 1} and {i + 1}); "
                            "rename one of them so every column has its own name.")
        seen[name] = i
    try:
        frame = pd.read_csv(io.StringIO(text), sep=sep, keep_default_na=True)
    except pd.errors.ParserError as exc:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if m:
            want, line, got = m.groups()
            what = "a comma" if sep == "," else _SEPARATORS.get(sep, repr(sep))
            raise DataError(
                f"{label}: line {line} has {got} fields but the header has {want}. A text that contains {what} must be "
                'quoted ("like, this"); check that line, or that the file really is separated by '
                f"{what}.") from None
        m = re.search(r"EOF inside string starting at row (\d+)", str(exc))
        if m:
            raise DataError(f"{label}: a quote (\") opened in data row {m.group(1)} is never closed, so the rest of the file "
                            'reads as one text. Close it, or double quotes inside a quoted text ("say ""hi""").') from None
        raise DataError(f"{label}: not a well-formed {'CSV' if sep == ',' else 'separated'} file ({exc}).") from None
    return frame, note


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _records(rows: list, label: str, where) -> pd.DataFrame:
    """Rows that are all JSON objects -> a frame (``where(i)`` names row i in errors)."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{label}: {where(i)} is a JSON {_json_kind(row)}, not an object. Each row must be one object "
                            'like {"input": "...", "output": "...", "score": 4}.')
    return pd.DataFrame.from_records(rows)


def _json_kind(v) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}.get(type(v), "value")


def _read_jsonl(text: str, label: str) -> pd.DataFrame:
    rows, lines = [], []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line, object_pairs_hook=_no_duplicate_keys))
        except _DuplicateKey as exc:
            raise DataError(f"{label}: line {n} has the key {exc.args[0]!r} twice; keep one.") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"cannot read {label}: line {n} is not valid JSON ({exc.msg} at column {exc.colno}). Each line must be one "
                            "complete JSON object; fix or delete that line.") from None
        lines.append(n)
    return _records(rows, label, lambda i: f"line {lines[i]}")


def _read_json(text: str, label: str) -> pd.DataFrame:
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise DataError(f"{label}: an object has the key {exc.args[0]!r} twice; keep one.") from None
    except json.JSONDecodeError as exc:
        hint = " It looks like JSON Lines (one object per line): rename it to .jsonl." if exc.msg == "Extra data" else ""
        raise DataError(f"cannot read {label}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}).{hint}") from None
    if isinstance(obj, list):
        return _records(obj, label, lambda i: f"row {i + 1} (element {i} of the list)")
    if isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):
        return pd.read_json(io.StringIO(text), dtype=False)  # pandas' column layout: {"col": {"0": v, ...}, ...}
    if isinstance(obj, dict):
        what = f"a JSON object (keys {', '.join(repr(k) for k in list(obj)[:5])})" if obj else "an empty JSON object"
    else:
        what = f"a JSON {_json_kind(obj)}"
    raise DataError(f"{label} holds {what}, not rows. Write a list with one object per row "
                    '([{"input": "...", "output": "...", "score": 4}, ...]) or JSON Lines (.jsonl).')


def read_table(data) -> tuple[pd.DataFrame, str]:
    """Read CSV / TSV / JSONL / JSON / Parquet (by extension, text kinds also gzipped) or accept a
    DataFrame.  Returns the frame and a source label used in error messages."""
    if isinstance(data, pd.DataFrame):
        frame = data.reset_index(drop=True).copy()
        label = "<DataFrame>"
    else:
        if isinstance(data, str) and data.startswith("demo:"):
            data = builtin_dataset_path(data[5:])
        path = Path(data)
        label = str(path)
        if path.is_dir():
            raise DataError(f"cannot read {label}: it is a folder, not a data file. Pass the CSV / JSONL / Parquet file "
                            "itself (for a trace store: sqlite:///path/app.db or postgresql+psycopg://...).")
        if not path.exists():
            raise DataError(f"cannot read {label}: file not found. Check the path (current folder: {Path.cwd()}).")
        fmt, gz = _kind(path)
        note = None
        try:
            if fmt == "parquet":
                try:
                    frame = pd.read_parquet(path)
                except ImportError as exc:
                    raise DataError(f"cannot read {label}: reading Parquet needs pyarrow ({exc}); {plain(install_hint('pyarrow'))}, "
                                    "or pass CSV / JSONL.") from None
                except PermissionError:
                    raise
                except Exception as exc:  # pyarrow's errors differ per version; all mean "not a readable file"
                    raise DataError(f"cannot read {label}: not a readable Parquet file ({type(exc).__name__}: {exc}). "
                                    "Re-create it, or pass CSV / JSONL.") from None
            else:
                text = _text(path, gz)
                if fmt in ("csv", "tsv"):
                    frame, note = _read_csv(text, label, "\t" if fmt == "tsv" else None)
                elif fmt == "jsonl":
                    frame = _read_jsonl(text, label)
                else:
                    frame = _read_json(text, label)
        except PermissionError:
            raise DataError(f"cannot read {label}: permission denied. Make the file readable (chmod u+r) or copy it.") from None
        except OSError as exc:
            raise DataError(f"cannot read {label}: {exc.strerror or exc}.") from None
        if note:
            frame.attrs["autometrics_read_note"] = note
    names = [str(c) for c in frame.columns]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise DataError(f"{label}: column(s) {', '.join(map(repr, dup))} appear more than once; give every column its own name.")
    if frame.empty:
        raise DataError(f"{label} has no rows (only a header, or no data).")
    return frame, label


def row_ref(source: str, idx: int) -> str:
    """Human row reference: data row number (1-based) plus, for CSV files, the line."""
    if source.lower().endswith(".csv"):
        return f"row {idx + 1} (line {idx + 2} of {Path(source).name})"
    return f"row {idx + 1}"


def as_text(v) -> str:
    """A text cell: missing -> "", a JSON object/list (JSONL) -> its JSON text, else ``str``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, dict | list):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def parse_reference_cell(v, col: str, idx: int, source: str) -> list[str]:
    """One cell of a reference column: a text, or a list of texts (a JSON list in CSV).  Anything
    else in a list (numbers, objects, nested lists) is refused with the row: a reference is text."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, list | tuple | np.ndarray):
        return _reference_items(list(v), col, idx, source)
    if isinstance(v, dict):
        raise DataError(f"{source}: column {col!r} at {row_ref(source, idx)} is a JSON object; a reference must be a "
                        'text or a list of texts, e.g. ["ref one", "ref two"].')
    s = str(v)
    stripped = s.strip()
    if stripped.startswith('["') or stripped.startswith("['") or (stripped.startswith("[") and stripped.endswith("]")):
        try:
            parsed = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{source}: column {col!r} at {row_ref(source, idx)} looks like a JSON list but does not parse "
                f"({exc.msg} at char {exc.pos}). Write it as a JSON list of strings, e.g. [\"ref one\", \"ref two\"]."
            ) from exc
        if not isinstance(parsed, list):
            raise DataError(f"{source}: column {col!r} at {row_ref(source, idx)} must be a JSON list of strings.")
        return _reference_items(parsed, col, idx, source)
    return [s] if stripped else []


def _reference_items(items: list, col: str, idx: int, source: str) -> list[str]:
    out = []
    for k, x in enumerate(items):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            continue
        if not isinstance(x, str):
            kind = {dict: "an object", list: "a list", bool: "a boolean"}.get(type(x), "a number")
            raise DataError(
                f"{source}: column {col!r} at {row_ref(source, idx)}: item {k + 1} of the list is {kind} ({x!r}), not a "
                'text. References must be strings, e.g. ["ref one", "ref two"]; quote numbers ("42").'
            )
        if x.strip():
            out.append(x)
    return out
