"""hf_case: turn a Hugging Face model and a batch into a doctor case, in one line.

Use it in a case file:

    from hf_case import case_from_hf

    def make_case():
        model = transformers.GPT2LMHeadModel(config)        # or from_pretrained(...)
        batch = next(iter(train_dataloader))                # input_ids, attention_mask, labels, ...
        return case_from_hf(model, batch)

then `python diagnostics/doctor.py --case my_case.py`. The batch is the dict your loop passes as
`model(**batch)`; it must hold `labels` (or `return_loss=True`, for CLIP's contrastive loss over the
batch), and the loss is the model's own `output.loss`, as in
`loss = model(**batch).loss`. The task hints come from the model: an encoder-decoder is `seq2seq`,
a `...ForCausalLM`/`...LMHeadModel` is `causal_lm` (its labels are the input ids; the model shifts
them), a `...Classification` head is `classification` with `config.num_labels` classes; padding in
the labels is -100, as transformers' loss expects. Pass `optimizer=` (params -> optimizer) and any
task hint as keywords to override (`case_from_hf(model, batch, clip_grad_norm=1.0)`).

Only torch and the standard library are imported here: transformers is the caller's.
"""
import argparse
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import ArgumentParser, run_command


def model_loss(output, labels):
    """The loss a transformers model computes itself when the batch holds `labels`."""
    return output.loss


def task_hints(model):
    """Task hints read from a transformers model's class name and config."""
    config = model.config
    name = type(model).__name__
    if getattr(config, "is_encoder_decoder", False):
        kind = "seq2seq"
    elif name.endswith(("ForCausalLM", "LMHeadModel")):
        kind = "causal_lm"
    elif name.endswith("Classification"):
        kind = "classification"
    else:
        kind = "other"
    task = {"kind": kind, "ignore_index": -100}
    if kind in ("causal_lm", "seq2seq") and getattr(config, "vocab_size", None):
        task["vocab_size"] = config.vocab_size
    if kind == "classification":
        task["num_classes"] = config.num_labels
    return task


def case_from_hf(model, batch, optimizer=None, **task):
    """Return the case dict (DESIGN.md, "A case") for `loss = model(**batch).loss`."""
    if not isinstance(batch, dict) or not ("labels" in batch or batch.get("return_loss") is True):
        raise ValueError("case_from_hf needs the batch as a dict that holds 'labels', or return_loss=True for a model "
                         "that scores the batch against itself (CLIP): the dict your loop passes as model(**batch)")
    if not hasattr(model, "config"):
        raise ValueError(f"case_from_hf needs a transformers model (with .config); got {type(model).__name__}")
    batch = {key: value for key, value in dict(batch).items() if isinstance(value, torch.Tensor) or key == "return_loss"}
    case = {"model": model, "batch": (batch, batch.get("labels")), "loss_fn": model_loss,
            "task": {**task_hints(model), **task}}
    if optimizer is not None:
        case["optimizer"] = optimizer
    return case


if __name__ == "__main__":
    ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.exit(run_command(print, __doc__))
