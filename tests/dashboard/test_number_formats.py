"""The dashboard's number formats, read back: every shown figure parses to the value it stands for.

Each formatter's output is parsed (thousands separators, a unit from its table) and compared with the
input within half a unit of the last digit shown; the shown mantissa must also be in its unit's range,
so 999,950 is never "1,000.0 k" and 1,048,575 bytes never "1,024.00 KiB".
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from dashboards import components as c
from dashboards.figures.exchange import exchange_by_kind, exchange_matrix, short_bytes
from dashboards.figures.memory import category_stacks

COUNT = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
BYTES = {"B": 1.0, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3, "TiB": 1024.0**4}
SECONDS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
SHOWN = re.compile(r"^(-?[0-9]{1,3}(?:,[0-9]{3})*)(?:\.([0-9]+))?(?: (\S+))?$")


def parse(text: str, units: dict[str, float]) -> tuple[float, float, float, str]:
    """(value, tolerance, mantissa, unit) of a shown figure, e.g. '1,234.5 k' -> (1234500, 50, 1234.5, 'k')."""
    match = SHOWN.match(text)
    assert match, f"{text!r} is not a number with an optional unit"
    whole, fraction, unit = match.group(1), match.group(2) or "", match.group(3) or ""
    assert unit in units, f"{text!r}: unknown unit {unit!r}"
    mantissa = float(whole.replace(",", "") + ("." + fraction if fraction else ""))
    scale = units[unit]
    return mantissa * scale, 0.5 * 10.0 ** -len(fraction) * scale, mantissa, unit


def check(text: str, value: float, units: dict[str, float], step: float, first_step: float | None = None) -> None:
    """``text`` reads back as ``value`` within rounding, with its mantissa below the next unit's start."""
    shown, tolerance, mantissa, unit = parse(text, units)
    assert abs(shown - value) <= tolerance * (1 + 1e-9), f"{value!r} shown as {text!r} reads back as {shown!r}"
    names = list(units)
    position = names.index(unit)
    limit = first_step if position == 0 and first_step else step
    if position < len(names) - 1:
        assert abs(mantissa) < limit, f"{value!r} shown as {text!r}: should be in the next unit"
    if position > 0:
        previous_limit = first_step if position == 1 and first_step else step
        # in a larger unit only when the smaller unit, rounded, would have reached the boundary
        assert abs(value) / units[names[position - 1]] >= previous_limit * (1 - 1e-3), \
            f"{value!r} shown as {text!r}: should be in the smaller unit"


COUNTS = [0, 1, 7, 999, 1000, 9_999, 9_999.5, 9_999.996, 10_000, 10_049, 10_050, 32_320, 533_301, 999_949,
          999_950, 999_999, 1_000_000, 1_049_999, 12_345_678, 999_949_999, 999_950_000, 1e9 - 1, 1e9, 1e12 - 1,
          1e12, 4.2e15, 0.5, 0.004, 1234.5678, 98_765.4321]


@pytest.mark.parametrize("value", COUNTS + [-v for v in COUNTS if v])
def test_counts_read_back_as_the_value_within_rounding(value):
    # counts below 10,000 are whole (or 2 decimals); from there 1 decimal of k = 1e3, M = 1e6, G = 1e9, T = 1e12
    check(c.fmt_count(value), value, COUNT, step=1000.0, first_step=10_000.0)


@pytest.mark.parametrize(("value", "text"), [
    (9_999, "9,999"), (10_000, "10.0 k"), (32_320, "32.3 k"), (533_301, "533.3 k"), (999_949, "999.9 k"),
    (999_950, "1.0 M"), (999_999, "1.0 M"), (1_000_000, "1.0 M"), (12_345_678, "12.3 M"), (1e9 - 1, "1.0 G"),
    (1e12, "1.0 T"), (-533_301, "-533.3 k"), (1234.5, "1,234.50"), (-0.001, "0.00"),
    (np.int64(533_301), "533.3 k"), (np.float32(32_320), "32.3 k"),
])
def test_counts_at_the_unit_boundaries(value, text):
    assert c.fmt_count(value) == text


BYTE_VALUES = [0, 1, 512, 1023, 1023.4, 1023.6, 1024, 1536, 638_976, 1024**2 - 6, 1024**2 - 1, 1024**2,
               2**30 - 1, 2**30, 3 * 2**40, 2**50 * 3]


@pytest.mark.parametrize("value", BYTE_VALUES + [-v for v in BYTE_VALUES if v])
def test_bytes_read_back_as_the_value_within_rounding(value):
    check(c.fmt_bytes(value), value, BYTES, step=1024.0)
    check(c.fmt_rate(value).removesuffix("/s"), value, BYTES, step=1024.0)
    # the exchange matrix's cells: the same units, one decimal
    check(short_bytes(value), value, BYTES, step=1024.0)


@pytest.mark.parametrize(("value", "text"), [
    (1023, "1,023 B"), (1023.6, "1.00 KiB"), (1536, "1.50 KiB"), (638_976, "624.00 KiB"),
    (1024**2 - 1, "1.00 MiB"), (2**30 - 1, "1.00 GiB"), (-1536, "-1.50 KiB"),
])
def test_bytes_at_the_unit_boundaries(value, text):
    assert c.fmt_bytes(value) == text


SECOND_VALUES = [0, 1e-9, 4.4e-7, 9.994e-7, 9.996e-7, 1e-6, 0.00123, 0.000999994, 0.000999996, 0.5, 0.999994,
                 0.9999999, 1, 61.5, 3600]


@pytest.mark.parametrize("value", SECOND_VALUES + [-v for v in SECOND_VALUES if v])
def test_seconds_read_back_as_the_value_within_rounding(value):
    check(c.fmt_seconds(value), value, SECONDS, step=1000.0)


@pytest.mark.parametrize(("value", "text"), [
    (0.00123, "1.23 ms"), (0.0009999996, "1.00 ms"), (0.9999999, "1.00 s"), (9.996e-7, "1.00 µs"), (3e-9, "3 ns"),
])
def test_seconds_at_the_unit_boundaries(value, text):
    assert c.fmt_seconds(value) == text


def test_whole_numbers_are_rounded_not_truncated():
    assert c.fmt_int(2.7) == "3"
    assert c.fmt_int(np.int64(1_234_567)) == "1,234,567"
    assert c.fmt_int(-2.7) == "-3"


def test_missing_values_show_a_dash_in_every_format():
    for fmt in (c.fmt_count, c.fmt_bytes, c.fmt_rate, c.fmt_seconds, c.fmt_int, c.fmt_pct):
        assert fmt(None) == "–" and fmt(float("nan")) == "–"


def test_a_table_of_cycles_shows_each_count_in_its_unit():
    # GIVEN the costliest-steps shape: cycles columns formatted by their unit suffix
    frame = pd.DataFrame({"step": [3, 4], "cycles": [533_301, 32_320], "total_cycles": [999_950, 9_999]})
    # WHEN it is laid out as a table
    html_table = c.table(frame, formats={"step": c.fmt_int})
    rows = html_table.children.children[1].children
    cells = [[cell.children for cell in row.children] for row in rows]
    # THEN each cell reads back as its count
    assert cells == [["3", "533.3 k", "1.0 M"], ["4", "32.3 k", "9,999"]]


def test_a_table_longer_than_it_shows_says_how_many_rows_there_are():
    # GIVEN 250 steps, shown 200 rows at most; and 200 steps
    frame = pd.DataFrame({"step": np.arange(250), "cycles": np.arange(250) * 10})
    long, exact = c.table(frame, max_rows=200), c.table(frame.head(200), max_rows=200)
    # THEN the first table holds 200 rows and says the others are there; the second says nothing more
    table, note = long.children
    assert len(table.children[1].children) == 200
    assert note.children == "The first 200 of 250 rows (popvision report --format csv lists every one)."
    assert len(exact.children.children[1].children) == 200


def test_byte_axes_are_labelled_in_binary_units_not_plotlys_billions():
    # GIVEN an IPU holding 1.5 GiB (plotly's own label for 1.6e9 would be "1.6B": billions, read as bytes)
    frame = pd.DataFrame({"ipu": [0, 0], "category": ["weights", "activations"], "always_live": [True, False],
                          "bytes": [2**30, 2**29]})
    # WHEN the category stacks are drawn
    axis = category_stacks(frame).layout.yaxis
    # THEN each tick's label reads back as the bytes at its position, in GiB, up to the 1.5 GiB total
    assert list(axis.ticktext) == ["0.0 GiB", "0.5 GiB", "1.0 GiB", "1.5 GiB"]
    for value, text in zip(axis.tickvals, axis.ticktext, strict=True):
        shown, tolerance, _, _ = parse(text, BYTES)
        assert abs(shown - value) <= tolerance
    # AND the bytes-by-kind axis and the matrix's colour bar are labelled the same way
    kinds = pd.DataFrame({"kind": ["internal", "inter_ipu"], "bytes": [3 * 2**20, 2**20], "cycles": [10, 5],
                          "time_pct": [1.0, 0.5]})
    assert exchange_by_kind(kinds).layout.yaxis.ticktext[-1] == "3 MiB"
    matrix = pd.DataFrame({"src_ipu": [0, 1], "dst_ipu": [1, 0], "bytes": [2**40, 2**39], "cycles": [1, 1]})
    assert exchange_matrix(matrix).data[0].colorbar.ticktext[-1] == "1.0 TiB"


def test_quantities_agree_with_their_count():
    # the trace page's run card said "over 1 iterations"
    assert c.fmt_quantity(1, "iteration") == "1 iteration"
    assert c.fmt_quantity(np.int64(10), "device iteration") == "10 device iterations"
    assert c.fmt_quantity(1234, "iteration") == "1,234 iterations"
