"""A small Hugging Face BERT trained as a causal LM from a tiny config (no download), the model computing its loss
from `labels`, in the usual `loss = model(**batch).loss` loop.

Planted bug: the config leaves is_decoder False, so BERT's attention stays bidirectional: each position sees the
tokens it is asked to predict.
"""
import torch
from transformers import BertConfig, BertLMHeadModel

from tinydata import token_stream

VOCAB, CONTEXT = 32, 16


def collate(windows):
    """Right-pad variable-length windows; padding is masked out of attention and out of the loss (-100)."""
    input_ids = torch.zeros(len(windows), CONTEXT, dtype=torch.long)  # 0 is the pad id
    attention_mask = torch.zeros_like(input_ids)
    for row, window in enumerate(windows):
        input_ids[row, :len(window)] = window
        attention_mask[row, :len(window)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": input_ids.masked_fill(attention_mask == 0, -100)}


def main():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=CONTEXT, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, is_decoder=False)  # BUG: is_decoder=False: bidirectional attention
    model = BertLMHeadModel(config)
    stream = token_stream()
    lengths = torch.randint(CONTEXT // 2, CONTEXT + 1, (len(stream) // CONTEXT,)).tolist()
    windows = [stream[i * CONTEXT:i * CONTEXT + n] for i, n in enumerate(lengths)]
    loader = torch.utils.data.DataLoader(windows, batch_size=8, shuffle=True, collate_fn=collate)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for batch in loader:
        outputs = model(**batch)
        loss = outputs.loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
