"""TensorBoard event files (a file or a directory of them): scalars logged at one step make one row."""
from .. import CliError


def records(path):
    try:  # lazy: only event files need tensorboard
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise CliError("reading TensorBoard event files needs tensorboard: pip install tensorboard") from None
    files = sorted(p for p in path.iterdir() if "tfevents" in p.name and p.is_file()) if path.is_dir() else [path]
    if not files:
        raise CliError("directory holds no TensorBoard event file (*tfevents*)")
    last, current, number = None, {}, 0  # scalars logged at the same step make one row
    for file in files:  # event file names start with a timestamp: sorted means chronological
        try:
            for event in EventFileLoader(str(file)).Load():
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name != "scalars":
                        continue
                    if event.step != last and current:
                        number += 1
                        yield number, current
                        current = {}
                    last = event.step
                    current["step"] = event.step
                    current[value.tag] = tensor_util.make_ndarray(value.tensor).item()
        except Exception as exc:  # the reader raises protobuf and TF-stub errors of many kinds on junk
            where = f"{file.name}: " if path.is_dir() else ""  # a file named on the command line is named by the caller
            raise CliError(f"{where}not a readable TensorBoard event file ({type(exc).__name__})") from None
    if current:
        yield number + 1, current


# --- plain-text logs: one small parser per trainer, registered in TEXT_FORMATS ----------------------
# Each takes one line and returns a record (a dict of named numbers) or None for a line it does not know.
# Lines it does not know are the trainer's other output and are skipped. To add a format: write its
# parser and add one line to TEXT_FORMATS.
