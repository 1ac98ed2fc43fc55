"""Parse Nsight Compute's CSV output and recognise its failures.

Two formats are read:

* the raw page, ``ncu --csv --page raw --print-units base``: a header row (ncu's metric
  names), a units row, then one row per profiled launch;
* the details page, ``ncu --csv --page details``: one row per (launch, section, metric)
  with "Section Name", "Metric Name", "Metric Unit" and "Metric Value" columns.

In both, the application's own stdout and ncu's ``==PROF==``/``==WARNING==`` lines may come
before or after the CSV. Columns are found by their header name, never by position: with
``--nvtx`` two NVTX columns appear before "Kernel Name". Numbers carry thousands separators
("1,879,048,192"); "n/a", "no data" and "" become None.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from loguru import logger

from optiml.profiler.types import MetricValue, ProfileStatus

_MISSING = {"", "n/a", "N/A", "no data", "(none)"}
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][+-]?\d+)?$")
_INFO_COLUMNS = ("ID", "Kernel Name", "Block Size", "Grid Size")


@dataclass(frozen=True)
class NvtxRange:
    """One NVTX range a launch was inside: its domain, its name and its kind."""

    domain: str
    name: str
    kind: str  # "push_pop" or "start_end"


@dataclass(frozen=True)
class NcuLaunch:
    """One profiled kernel launch.

    ``values`` maps every column header (raw page) or "Metric Name" (details page) to its
    value: a float where the text is a number, the text otherwise, None where missing.
    ``units`` maps the same keys to their unit ("" where none was printed).
    """

    id: int
    kernel_name: str
    block_size: tuple[int, ...] | None
    grid_size: tuple[int, ...] | None
    values: dict[str, MetricValue]
    units: dict[str, str]
    nvtx: dict[str, str] = field(default_factory=dict)
    nvtx_ranges: tuple[NvtxRange, ...] = ()
    rules: tuple[str, ...] = ()

    @property
    def nvtx_names(self) -> list[str]:
        """The names of the NVTX ranges this launch was inside, outermost first."""
        return [r.name for r in self.nvtx_ranges]


@dataclass(frozen=True)
class NcuReport:
    """Every launch of one ncu CSV, with the text it was parsed from."""

    launches: list[NcuLaunch]
    raw_text: str
    page: str  # "raw" or "details"

    def by_nvtx(self, name: str) -> list[NcuLaunch]:
        """The launches inside an NVTX range called ``name``."""
        return [launch for launch in self.launches if name in launch.nvtx_names]


def parse_number(text: str) -> MetricValue:
    """A CSV cell as a float, the stripped text, or None for "", "n/a" and "no data"."""
    text = text.strip()
    if text in _MISSING:
        return None
    if _NUMBER.match(text) and any(c.isdigit() for c in text):
        return float(text.replace(",", ""))
    return text


def _parse_dims(text: str) -> tuple[int, ...] | None:
    """ "(16, 16, 1)" as (16, 16, 1); None when absent or not of that form."""
    numbers = re.findall(r"\d+", text or "")
    if not text or not text.strip().startswith("(") or not numbers:
        return None
    return tuple(int(n) for n in numbers)


def _csv_rows(text: str) -> tuple[list[str], list[list[str]]] | None:
    """The header row and the CSV rows after it, skipping non-CSV lines; None without one.

    The header is the first line that parses to a row containing both "ID" and
    "Kernel Name". After it, only lines that start with a double quote are CSV rows, so
    application output or ``==PROF==`` lines printed after the table are skipped.
    """
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if '"Kernel Name"' not in line:
            continue
        header = next(csv.reader([line]))
        if "ID" in header and "Kernel Name" in header:
            body = [row for row in lines[index + 1:] if row.startswith('"')]
            return header, list(csv.reader(io.StringIO("\n".join(body))))
    return None


def _cells(header: list[str], row: list[str]) -> dict[str, str]:
    """A row as a dict by header name; short rows (no rule columns) are padded with ""."""
    row = row + [""] * (len(header) - len(row))
    return dict(zip(header, row))


def _is_nvtx_column(name: str) -> bool:
    return "Push/Pop_Range" in name or "Start/Stop_Range" in name


def _parse_nvtx(header: str, cell: str) -> list[NvtxRange]:
    """The NVTX ranges in one NVTX cell, using the column header's field list.

    A push/pop header reads "thread Domain:Push/Pop_Range:PL_Type:...:Msg" and a cell
    ``507  "optiml:optiml.profile.hn:none:none:RGB:0xff:REGISTERED:optiml.profile.hn"``
    (the thread id, then one quoted entry per nested range).
    """
    kind = "push_pop" if "Push/Pop_Range" in header else "start_end"
    fields = header.split(" ", 1)[-1].split(":") if kind == "push_pop" else header.split(":")
    range_field = "Push/Pop_Range" if kind == "push_pop" else "Start/Stop_Range"
    if "Domain" not in fields or range_field not in fields:
        return []
    domain_at, range_at = fields.index("Domain"), fields.index(range_field)
    ranges = []
    for entry in re.findall(r'"([^"]*)"', cell):
        parts = entry.split(":")
        extra = len(parts) - len(fields)
        if extra < 0:
            logger.debug("NVTX entry {!r} has fewer fields than {!r}", entry, header)
            continue
        # A range name holding colons adds them to the name and to the message (equal).
        take = 1 + (extra // 2 if extra % 2 == 0 else extra)
        name = ":".join(parts[range_at:range_at + take])
        ranges.append(NvtxRange(domain=parts[domain_at], name=name, kind=kind))
    return ranges


def _launch_fields(cells: dict[str, str]) -> dict:
    raw_id = parse_number(cells.get("ID", ""))
    return {
        "id": int(raw_id) if isinstance(raw_id, float) else -1,
        "kernel_name": cells.get("Kernel Name", ""),
        "block_size": _parse_dims(cells.get("Block Size", "")),
        "grid_size": _parse_dims(cells.get("Grid Size", "")),
    }


def parse_raw_csv(text: str) -> NcuReport:
    """Parse ``ncu --csv --page raw --print-units base`` output into one launch per row.

    Raises ValueError when the text holds no ncu table (check :func:`detect_ncu_error` first).
    """
    found = _csv_rows(text)
    if found is None:
        raise ValueError("no ncu CSV header row (with 'ID' and 'Kernel Name') in the text")
    header, rows = found
    units: dict[str, str] = {}
    if rows and _cells(header, rows[0]).get("ID", "").strip() == "":
        units = {k: v.strip() for k, v in _cells(header, rows[0]).items()}
        rows = rows[1:]
    nvtx_columns = [h for h in header if _is_nvtx_column(h)]
    launches = []
    for row in rows:
        if len(row) != len(header):
            logger.warning("skipping an ncu CSV row of {} cells (header has {})", len(row), len(header))
            continue
        cells = _cells(header, row)
        nvtx = {h: cells[h] for h in nvtx_columns}
        ranges = tuple(r for h in nvtx_columns for r in _parse_nvtx(h, cells[h]))
        values = {h: parse_number(cells[h]) for h in header if h not in nvtx_columns}
        for info in _INFO_COLUMNS:  # keep names and dims as text, not numbers
            if info in cells and info != "ID":
                values[info] = cells[info]
        launches.append(NcuLaunch(
            **_launch_fields(cells),
            values=values,
            units={h: units.get(h, "") for h in values},
            nvtx=nvtx,
            nvtx_ranges=ranges,
        ))
    logger.debug("parsed {} launch(es) from the ncu raw page", len(launches))
    return NcuReport(launches=launches, raw_text=text, page="raw")


def parse_details_csv(text: str) -> NcuReport:
    """Parse ``ncu --csv --page details`` output: values keyed by "Metric Name".

    Rows without a metric name are rule results; their descriptions go to ``rules``. When two
    sections share a metric name, the first one wins and the second is also kept under
    "Section Name/Metric Name".
    """
    found = _csv_rows(text)
    if found is None:
        raise ValueError("no ncu CSV header row (with 'ID' and 'Kernel Name') in the text")
    header, rows = found
    for needed in ("Section Name", "Metric Name", "Metric Unit", "Metric Value"):
        if needed not in header:
            raise ValueError(f"the ncu details CSV has no {needed!r} column")
    order: list[int] = []
    grouped: dict[int, dict] = {}
    for row in rows:
        cells = _cells(header, row)
        fields = _launch_fields(cells)
        launch = grouped.get(fields["id"])
        if launch is None:
            launch = grouped[fields["id"]] = {**fields, "values": {}, "units": {}, "rules": []}
            order.append(fields["id"])
        metric = cells["Metric Name"].strip()
        if not metric:
            if cells.get("Rule Description", "").strip():
                launch["rules"].append(cells["Rule Description"].strip())
            continue
        keys = [metric] if metric not in launch["values"] else []
        keys.append(f'{cells["Section Name"].strip()}/{metric}')
        for key in keys:
            launch["values"][key] = parse_number(cells["Metric Value"])
            launch["units"][key] = cells["Metric Unit"].strip()
    launches = [
        NcuLaunch(**{**grouped[i], "rules": tuple(grouped[i]["rules"])}) for i in order
    ]
    logger.debug("parsed {} launch(es) from the ncu details page", len(launches))
    return NcuReport(launches=launches, raw_text=text, page="details")


_UNKNOWN_METRIC = re.compile(r"==ERROR==\s+Failed to find metric\s+(\S+)")


def _metric_from_pattern(pattern: str) -> str:
    """ "regex:^local_load_throughput\\.(sum|...)$" as "local_load_throughput"."""
    name = pattern.removeprefix("regex:").lstrip("^")
    name = re.split(r"\\\.|[($\\]", name, maxsplit=1)[0]
    return name or pattern


def classify_ncu_failure(text: str) -> tuple[ProfileStatus, str] | None:
    """The status and one-sentence message for a failed ncu run, or None if none is seen.

    Recognised, most specific first: counter permission (ERR_NVGPUCTRPERM), an unknown
    metric name, a replay failure, any other ``==ERROR==`` line, and "No kernels were
    profiled".
    """
    if "ERR_NVGPUCTRPERM" in text:
        return ProfileStatus.PERMISSION_DENIED, (
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run it as root "
            "or load the driver with NVreg_RestrictProfilingToAdminUsers=0."
        )
    unknown = _UNKNOWN_METRIC.findall(text)
    if unknown:
        names = list(dict.fromkeys(_metric_from_pattern(p) for p in unknown))
        what = f"metric {names[0]}" if len(names) == 1 else "metrics " + ", ".join(names)
        return ProfileStatus.UNKNOWN_METRIC, (
            f"ncu does not know the {what}, so it profiled nothing; remove unknown names "
            "from the metric list (check them against `ncu --query-metrics`)."
        )
    errors = [line.strip() for line in text.splitlines() if line.strip().startswith("==ERROR==")]
    if errors:
        first = errors[0].removeprefix("==ERROR==").strip().rstrip(".")
        status = ProfileStatus.ERROR
        if any("replay" in e.lower() for e in errors):
            status = ProfileStatus.REPLAY_FAILED
        more = f" (and {len(errors) - 1} more error line(s))" if len(errors) > 1 else ""
        return status, f"ncu reported an error: {first}{more}."
    if re.search(r"==WARNING==\s+No kernels were profiled", text):
        return ProfileStatus.ERROR, (
            "ncu profiled no kernel: the kernel or NVTX filter matched no launch."
        )
    return None


def detect_ncu_error(text: str) -> str | None:
    """One sentence describing why ncu failed, or None when its output shows no failure."""
    found = classify_ncu_failure(text)
    return found[1] if found else None
