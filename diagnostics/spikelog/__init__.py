"""The package behind diagnostics/spikes.py, laid out along its data path:

    read/       a log file -> its Columns and chunks of rows, column by column (one module per format)
    detect/     chunks -> spikes and events: a Report
    report.py   a Report -> the text summary and the post-mortem draft; plot.py: the figure
    output.py   where --plot and --postmortem may write

`python diagnostics/spikes.py LOG` is the entry point; this package is what it reads and thinks with.
Here: the one error a user can fix, and how numbers go into JSON.
"""
import math


class CliError(Exception):
    """A problem the user can fix: printed as one line, exit code 2."""


def json_int(value):
    return None if value is None else int(value)


def json_float(value):
    return None if value is None or not math.isfinite(value) else float(value)


def json_clean(value):
    return json_float(value) if isinstance(value, float) else value
