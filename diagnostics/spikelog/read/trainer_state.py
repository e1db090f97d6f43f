"""A JSON document: the HF Trainer's trainer_state.json (its log_history), Megatron-LM's golden values, or a list
of records."""
import json

from .. import CliError


MAX_JSON = 1 << 29  # a JSON document (trainer_state.json) is loaded whole: at most 512 MB


def records(path):
    if path.stat().st_size > MAX_JSON:
        raise CliError(f"a JSON document over {MAX_JSON >> 20} MB is not loaded whole; write the log as JSONL")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            data = json.load(handle)
    except UnicodeDecodeError as exc:
        raise CliError(f"not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise CliError(f"not valid JSON ({exc})") from None
    except RecursionError:
        raise CliError("not a training log: JSON nested too deep to read") from None
    if isinstance(data, dict) and isinstance(data.get("log_history"), list):
        data = data["log_history"]  # HF Trainer's trainer_state.json
    elif isinstance(data, dict) and any(_series(v) is not None for v in data.values()):
        data = golden_values(data)
    if not isinstance(data, list):
        raise CliError("JSON log must be a trainer_state.json (with log_history), Megatron-LM golden values "
                       "({name: {start_step, step_interval, values}}) or a list of records")
    return ((i, record) for i, record in enumerate(data, 1) if isinstance(record, dict))


def _series(value):
    """{step: value} of one golden-values series: `values` a list from start_step every step_interval steps, or
    a dict keyed by step; None when it is not one."""
    if not isinstance(value, dict) or "values" not in value:
        return None
    values = value["values"]
    if isinstance(values, dict):
        try:
            return {int(step): v for step, v in values.items()}
        except ValueError:
            return None
    start, interval = value.get("start_step", 0), value.get("step_interval", 1)
    if not isinstance(values, list) or not all(isinstance(n, int) for n in (start, interval)) or interval < 1:
        return None
    return {start + i * interval: v for i, v in enumerate(values)}


def golden_values(data):
    """Megatron-LM's golden values, {"lm loss": {"start_step", "end_step", "step_interval", "values"}, ...}, as one
    record per step."""
    rows = {}
    for name, value in data.items():
        for step, v in (_series(value) or {}).items():
            rows.setdefault(step, {"step": step})[name] = v
    return [rows[step] for step in sorted(rows)]
