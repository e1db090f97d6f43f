"""A JSON document: the HF Trainer's trainer_state.json (its log_history), or a list of records."""
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
    if not isinstance(data, list):
        raise CliError("JSON log must be a trainer_state.json (with log_history) or a list of records")
    return ((i, record) for i, record in enumerate(data, 1) if isinstance(record, dict))
