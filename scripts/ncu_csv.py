"""Reading `ncu --csv` output (shared by ncu_step_summary.py and ncu_sections.py): the metric rows, kernel names
without their parameter lists, and durations in microseconds."""
import csv
import re

_US_PER = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def metric_rows(path):
    """The CSV rows (one metric of one kernel launch each); ncu's own log lines are skipped."""
    with open(path, newline="") as f:
        return list(csv.DictReader([line for line in f if line.startswith('"')]))


def kernel_name(row):
    """The kernel's name without its parameter list."""
    return re.sub(r"\(.*", "", row["Kernel Name"]).strip()


def value(row):
    return float(row["Metric Value"].replace(",", ""))


def microseconds(row):
    """A duration metric's value in microseconds (ncu reports ns, us or ms)."""
    return value(row) * _US_PER.get(row.get("Metric Unit", "ns"), 1e-3)
