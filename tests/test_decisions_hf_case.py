"""hf_case's task hints and batch filtering, on plain stand-ins for transformers models (a class name and a `.config`
namespace): decisions found by mutation testing, which tests/test_real_models.py (the whole doctor) is too slow to pin."""
from types import SimpleNamespace

import torch

from hf_case import case_from_hf, task_hints


class GPT2LMHeadModel:
    config = SimpleNamespace(vocab_size=50, is_encoder_decoder=False)


class BertForSequenceClassification:
    config = SimpleNamespace(vocab_size=50, num_labels=3, is_encoder_decoder=False)


def _labelled_batch():
    return {"input_ids": torch.zeros(2, 3, dtype=torch.long), "labels": torch.zeros(2, 3, dtype=torch.long)}


def test_a_causal_lm_takes_its_vocab_size_from_the_config():
    assert task_hints(GPT2LMHeadModel())["vocab_size"] == 50


def test_a_classifier_gets_num_classes_from_num_labels():
    assert task_hints(BertForSequenceClassification())["num_classes"] == 3


def test_a_classifier_gets_no_vocab_size_even_when_its_config_has_one():
    # a BERT classifier's config holds the tokenizer's vocab_size: its classes are num_labels, not the vocabulary
    assert "vocab_size" not in task_hints(BertForSequenceClassification())


def test_a_batch_with_labels_and_no_return_loss_is_accepted():
    case = case_from_hf(GPT2LMHeadModel(), _labelled_batch())
    assert case["task"]["kind"] == "causal_lm"


def test_the_batch_keeps_its_tensors_and_return_loss_and_drops_other_values():
    # model(**batch) gets the tensors and CLIP's return_loss flag; a string the collator left in is dropped
    batch = {**_labelled_batch(), "return_loss": True, "source": "train.jsonl"}
    inputs, _ = case_from_hf(GPT2LMHeadModel(), batch)["batch"]
    assert set(inputs) == {"input_ids", "labels", "return_loss"}


def test_an_optimizer_passed_in_is_the_cases_optimizer():
    def adam(params):
        return torch.optim.Adam(params)
    assert case_from_hf(GPT2LMHeadModel(), _labelled_batch(), optimizer=adam)["optimizer"] is adam
