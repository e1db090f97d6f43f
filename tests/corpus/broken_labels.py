"""Label bugs planted in real architectures (Hugging Face models from tiny configs, no download), each beside its
healthy twin: the same model and data with the line marked `# BUG:` written the right way.

    GPT-2, labels passed to the model    shifted by hand, then again by the model   | labels = input_ids, pads -100
    GPT-2, loss computed outside          targets = input_ids, the loss does not shift | the loss shifts by one
    BERT token classification, padded     pad positions keep a real tag in the labels | pads labelled -100
    BERT token classification, CE outside ignore_index=0, and tag 0 is "O"             | ignore_index=-100
    T5, labels passed to the model        (healthy only: a seq2seq that must pass)
    LSTM LM, time-major (pytorch/examples word_language_model)  targets = inputs | targets one step ahead

Run one: `python diagnostics/label_alignment.py --case tests/corpus/broken_labels.py:make_gpt2_shifted_twice`.
"""
import torch
import torch.nn.functional as F

VOCAB, PAD = 64, 0


def quiet_transformers():
    """transformers, imported when a model is built: its model classes take 5 s of CPU to import, which every test
    worker collecting this file would pay. Tiny configs make it chatty about special token ids: errors only."""
    import transformers
    transformers.utils.logging.set_verbosity_error()
    return transformers


def seeded_batch(seed, rows=4, length=16):
    """Token rows of a toy text (no token is PAD), right-padded: rows 0 and 1 are 5 and 3 tokens short."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (rows, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, -5:] = 0
    attention_mask[1, -3:] = 0
    return input_ids.masked_fill(attention_mask == 0, PAD), attention_mask


def gpt2(seed):
    transformers = quiet_transformers()
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=1,
                                     eos_token_id=1, pad_token_id=PAD)
    return transformers.GPT2LMHeadModel(config)


def gpt2_labels_case(broken):
    with torch.random.fork_rng(devices=[]):
        model = gpt2(0)
    input_ids, attention_mask = seeded_batch(0)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    if broken == "shifted_twice":
        labels = F.pad(labels[:, 1:], (0, 1), value=-100)  # BUG: shifted by hand, and GPT2LMHeadModel shifts the labels again
    if broken == "pad_in_labels":
        labels = input_ids.clone()  # BUG: the padded positions keep the pad token id as their label
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    return {"model": model, "batch": (inputs, labels), "loss_fn": lambda output, labels: output.loss,
            "task": {"kind": "causal_lm", "vocab_size": VOCAB}}


def make_gpt2_labels():
    return gpt2_labels_case(broken=None)


def make_gpt2_shifted_twice():
    return gpt2_labels_case(broken="shifted_twice")


def make_gpt2_pad_in_labels():
    return gpt2_labels_case(broken="pad_in_labels")


def lm_loss_shifted(output, targets):
    logits = output.logits[:, :-1]  # the prediction at t is scored against the token at t + 1
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets[:, 1:].reshape(-1), ignore_index=-100)


def lm_loss_unshifted(output, targets):
    return F.cross_entropy(output.logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-100)


def gpt2_outside_case(broken):
    with torch.random.fork_rng(devices=[]):
        model = gpt2(1)
    input_ids, attention_mask = seeded_batch(1)
    targets = input_ids.masked_fill(attention_mask == 0, -100)
    loss_fn = lm_loss_shifted
    if broken:
        loss_fn = lm_loss_unshifted  # BUG: targets are the input ids and this loss does not shift them
    return {"model": model, "batch": ({"input_ids": input_ids, "attention_mask": attention_mask}, targets),
            "loss_fn": loss_fn, "task": {"kind": "causal_lm", "vocab_size": VOCAB}}


def make_gpt2_loss_outside():
    return gpt2_outside_case(broken=False)


def make_gpt2_not_shifted():
    return gpt2_outside_case(broken=True)


TAGS = 5  # tag 0 is "O" (outside any entity), the most frequent tag, as in CoNLL-style token classification


def bert(seed):
    transformers = quiet_transformers()
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32, num_labels=TAGS,
                                     pad_token_id=PAD)
    return transformers.BertForTokenClassification(config)


def tags_for(input_ids, attention_mask):
    """Entity tags: most tokens are "O" (0); a token id above 48 starts an entity (1-4 by id)."""
    tags = torch.where(input_ids > 48, 1 + input_ids % 4, torch.zeros_like(input_ids))
    return tags, attention_mask


def bert_labels_case(broken):
    with torch.random.fork_rng(devices=[]):
        model = bert(2)
    input_ids, attention_mask = seeded_batch(2)
    tags, _ = tags_for(input_ids, attention_mask)
    labels = tags.masked_fill(attention_mask == 0, -100)
    if broken:
        labels = tags  # BUG: the padded positions keep tag 0 ("O") instead of -100
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    return {"model": model, "batch": (inputs, labels), "loss_fn": lambda output, labels: output.loss,
            "task": {"kind": "classification", "num_classes": TAGS}}


def make_bert_tagger():
    return bert_labels_case(broken=False)


def make_bert_pad_in_labels():
    return bert_labels_case(broken=True)


def bert_criterion_case(broken):
    with torch.random.fork_rng(devices=[]):
        model = bert(3)
    input_ids, attention_mask = seeded_batch(3)
    tags, _ = tags_for(input_ids, attention_mask)
    criterion = torch.nn.CrossEntropyLoss(ignore_index=-100)
    labels = tags.masked_fill(attention_mask == 0, -100)
    if broken:
        criterion = torch.nn.CrossEntropyLoss(ignore_index=0)  # BUG: 0 taken for padding, but tag 0 is "O", the commonest tag
        labels = tags
    return {"model": model, "batch": ({"input_ids": input_ids, "attention_mask": attention_mask}, labels),
            "loss_fn": lambda output, labels: criterion(output.logits.reshape(-1, TAGS), labels.reshape(-1)),
            "task": {"kind": "classification", "num_classes": TAGS}}


def make_bert_criterion():
    return bert_criterion_case(broken=False)


def make_bert_ignores_frequent_tag():
    return bert_criterion_case(broken=True)


def make_t5_labels():
    """A seq2seq: the decoder is scored against labels that are not the encoder's input ids."""
    transformers = quiet_transformers()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                       decoder_start_token_id=PAD, pad_token_id=PAD, eos_token_id=1)
        model = transformers.T5ForConditionalGeneration(config)
    input_ids, attention_mask = seeded_batch(4)
    labels, label_mask = seeded_batch(5, length=10)
    labels = labels.masked_fill(label_mask == 0, -100)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    return {"model": model, "batch": (inputs, labels), "loss_fn": lambda output, labels: output.loss,
            "task": {"kind": "seq2seq", "vocab_size": VOCAB}}


class RNNModel(torch.nn.Module):
    """pytorch/examples word_language_model's RNNModel (LSTM): time-major (T, B) in, (T, B, V) out, dropout 0.2."""

    def __init__(self, d=32, n_layers=2):
        super().__init__()
        self.drop = torch.nn.Dropout(0.2)
        self.encoder = torch.nn.Embedding(VOCAB, d)
        self.rnn = torch.nn.LSTM(d, d, n_layers, dropout=0.2)
        self.decoder = torch.nn.Linear(d, VOCAB)
        torch.nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        torch.nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        torch.nn.init.zeros_(self.decoder.bias)

    def forward(self, source):  # (T, B) -> (T, B, V)
        output, _ = self.rnn(self.drop(self.encoder(source)))
        return self.decoder(self.drop(output))


def get_batch(source, i, bptt):
    """word_language_model's get_batch: rows i..i+bptt of a (T_total, B) batchified stream, targets one step ahead."""
    data = source[i:i + bptt]
    target = source[i + 1:i + 1 + bptt]
    return data, target


def lstm_case(broken):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(6)
        stream = torch.randint(0, VOCAB, (41, 4))  # batchify: 4 columns of one token stream
        model = RNNModel()
    data, target = get_batch(stream, 0, 20)
    if broken:
        target = stream[0:20]  # BUG: the target rows start where the data rows do: no shift
    return {"model": model, "batch": (data, target),
            "loss_fn": lambda output, target: F.cross_entropy(output.reshape(-1, VOCAB), target.reshape(-1)),
            "task": {"kind": "causal_lm", "vocab_size": VOCAB, "batch_dim": 1, "time_dim": 0}}


def make_lstm_time_major():
    return lstm_case(broken=False)


def make_lstm_time_major_not_shifted():
    return lstm_case(broken=True)


HEALTHY = ["make_gpt2_labels", "make_gpt2_loss_outside", "make_bert_tagger", "make_bert_criterion", "make_t5_labels",
           "make_lstm_time_major"]
BROKEN = {"make_lstm_time_major_not_shifted": "make_lstm_time_major", "make_gpt2_shifted_twice": "make_gpt2_labels", "make_gpt2_pad_in_labels": "make_gpt2_labels",
          "make_gpt2_not_shifted": "make_gpt2_loss_outside", "make_bert_pad_in_labels": "make_bert_tagger",
          "make_bert_ignores_frequent_tag": "make_bert_criterion"}  # broken twin -> its healthy twin
