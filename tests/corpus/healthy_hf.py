"""Healthy Hugging Face models, built from tiny configs (no download), each turned into a case in one line.

The models are transformers' own classes, unchanged; only the configs are small. Every factory builds
under a fixed seed without touching the caller's RNG, and hands the model and a batch to
`case_from_hf` (diagnostics/hf_case.py), the one line a transformers user writes.

Run one: `python diagnostics/doctor.py --case tests/corpus/healthy_hf.py:make_gpt2`.
"""
import contextlib
import os
import sys

import torch

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "diagnostics"))
from hf_case import case_from_hf  # noqa: E402


@contextlib.contextmanager
def seeded(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def progression_tokens(batch, length, vocab, low=1):
    """Rows of arithmetic progressions over the ids low..vocab-1: learnable from two tokens of context."""
    start = torch.randint(0, vocab - low, (batch, 1))
    step = torch.randint(1, 4, (batch, 1))
    return low + (start + step * torch.arange(length)) % (vocab - low)


def make_gpt2():
    """GPT-2 LM head, labels = input_ids (the model shifts them), right padding in two rows masked with -100."""
    import transformers
    with seeded(10):
        config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
        input_ids = progression_tokens(8, 16, 64)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[:2, -3:] = 0
        input_ids = input_ids.masked_fill(attention_mask == 0, 0)
        labels = input_ids.masked_fill(attention_mask == 0, -100)
    return case_from_hf(model, {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels})


def make_gpt2_unpadded():
    """GPT-2 on full-length rows: the attention mask is all ones, as in every packed pretraining batch."""
    import transformers
    with seeded(11):
        config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
        input_ids = progression_tokens(8, 16, 64)
    return case_from_hf(model, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                                "labels": input_ids.clone()})


def make_bert_classifier():
    """BERT sequence classification: the label says whether the sentence contains token 5."""
    import transformers
    with seeded(12):
        config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=32, num_labels=2)
        model = transformers.BertForSequenceClassification(config)
        input_ids = torch.randint(6, 64, (16, 12))
        labels = torch.arange(16) % 2
        input_ids[labels == 1, torch.randint(1, 12, (8,))] = 5
        input_ids[:, 0] = 2  # [CLS]
    return case_from_hf(model, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                                "token_type_ids": torch.zeros_like(input_ids), "labels": labels})


def make_t5():
    """T5 encoder-decoder: the target reverses the source; the model builds decoder inputs from the labels."""
    import transformers
    with seeded(13):
        config = transformers.T5Config(vocab_size=64, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                       decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        model = transformers.T5ForConditionalGeneration(config)
        input_ids = torch.randint(2, 64, (8, 10))
        labels = input_ids.flip(1)
    return case_from_hf(model, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels})


def make_vit():
    """ViT image classification on 16x16 images of 4x4 patches; the label says which half is brighter."""
    import transformers
    with seeded(14):
        config = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64, num_labels=2)
        model = transformers.ViTForImageClassification(config)
        labels = torch.arange(16) % 2
        pixel_values = torch.randn(16, 3, 16, 16)
        pixel_values[labels == 1, :, :8] += 1.0
        pixel_values = (pixel_values - pixel_values.mean()) / pixel_values.std()
    return case_from_hf(model, {"pixel_values": pixel_values, "labels": labels})


def make_llama():
    """Llama (RoPE, RMSNorm, SwiGLU, grouped-query attention) with left padding, as batched fine-tunes often pad."""
    import transformers
    with seeded(15):
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
        model = transformers.LlamaForCausalLM(config)
        input_ids = progression_tokens(8, 16, 64)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[:2, :3] = 0
        input_ids = input_ids.masked_fill(attention_mask == 0, 0)
        labels = input_ids.masked_fill(attention_mask == 0, -100)
    return case_from_hf(model, {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels})


def make_qwen2():
    """Qwen2 (QKV biases, grouped-query attention) on packed full-length rows, labels = input_ids."""
    import transformers
    with seeded(16):
        config = transformers.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
        model = transformers.Qwen2ForCausalLM(config)
        input_ids = progression_tokens(8, 16, 64)
    return case_from_hf(model, {"input_ids": input_ids, "labels": input_ids})


def make_whisper():
    """Whisper: log-mel frames through a conv front end into an encoder; the decoder reads it by cross-attention."""
    import transformers
    with seeded(17):
        config = transformers.WhisperConfig(vocab_size=64, num_mel_bins=80, encoder_layers=1, decoder_layers=1, d_model=32,
                                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                            decoder_ffn_dim=64, max_source_positions=16, max_target_positions=16,
                                            pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
        model = transformers.WhisperForConditionalGeneration(config)
        input_features = torch.randn(8, 80, 32)  # (B, Whisper's 80 mel bins, frames): the conv front end halves the frames to 16
        labels = progression_tokens(8, 10, 64)
    return case_from_hf(model, {"input_features": input_features, "labels": labels})


def make_mistral():
    """Mistral: sliding-window attention (a window of 8 over 16 positions), grouped-query attention."""
    import transformers
    with seeded(18):
        config = transformers.MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                            sliding_window=8)
        model = transformers.MistralForCausalLM(config)
        input_ids = progression_tokens(8, 16, 64)
    return case_from_hf(model, {"input_ids": input_ids, "labels": input_ids})


def make_clip():
    """CLIP: image and text towers scored against each other over the batch; the loss is contrastive (return_loss)."""
    import transformers
    with seeded(19):
        config = transformers.CLIPConfig(
            text_config={"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "max_position_embeddings": 16, "bos_token_id": 0, "eos_token_id": 1},
            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                           "image_size": 16, "patch_size": 4},
            projection_dim=32)
        model = transformers.CLIPModel(config)
        input_ids = torch.randint(3, 64, (8, 10))
        input_ids[:, -1] = 1  # the end token, where CLIP's text tower pools (without it, at position 0: one token)
        pixel_values = torch.randn(8, 3, 16, 16)
    return case_from_hf(model, {"input_ids": input_ids, "pixel_values": pixel_values, "return_loss": True})


def make_wav2vec2():
    """Wav2Vec2 for CTC: a conv feature encoder over raw audio, a transformer, CTC over 12 characters."""
    import transformers
    with seeded(20):
        config = transformers.Wav2Vec2Config(vocab_size=12, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                             conv_kernel=(10, 3), num_feat_extract_layers=2, num_conv_pos_embeddings=8,
                                             num_conv_pos_embedding_groups=2, pad_token_id=0, ctc_loss_reduction="mean")
        model = transformers.Wav2Vec2ForCTC(config)
        input_values = torch.randn(8, 1600)  # 0.1 s at 16 kHz
        labels = torch.randint(1, 12, (8, 6))
    return case_from_hf(model, {"input_values": input_values, "labels": labels})

HEALTHY = ["make_gpt2", "make_gpt2_unpadded", "make_bert_classifier", "make_t5", "make_vit", "make_llama", "make_qwen2",
           "make_whisper", "make_mistral", "make_clip", "make_wav2vec2"]
