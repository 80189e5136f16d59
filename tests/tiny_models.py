"""Tiny random models of every supported family, built from configs (no download)."""

from __future__ import annotations

from pathlib import Path

FAMILIES = ("bert", "roberta", "xlm-roberta", "mpnet", "distilbert", "electra", "deberta-v2",
            "qwen2", "qwen3", "llama", "mistral")
DECODERS = ("qwen2", "qwen3", "llama", "mistral")
DEPTH = 4
HIDDEN = 32

_WORDS = ("the a an is are was were of to in on and or not no yes dog cat man woman child car house tree "
          "runs walks eats sleeps big small red blue green happy sad fast slow today tomorrow city river "
          "music food water book school computer phone play plays playing guitar piano football").split()


def make_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-éçü")
    vocab_list = specials + chars + [f"##{c}" for c in chars] + [w for w in _WORDS if w not in chars]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(vocab_list))}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64,
    )


def make_config(family: str, vocab_size: int):
    from transformers import AutoConfig

    common = dict(vocab_size=vocab_size, hidden_size=HIDDEN, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=128, pad_token_id=0)
    if family == "distilbert":
        return AutoConfig.for_model("distilbert", vocab_size=vocab_size, dim=HIDDEN, n_layers=DEPTH, n_heads=4,
                                    hidden_dim=64, max_position_embeddings=128, pad_token_id=0)
    if family == "electra":
        return AutoConfig.for_model("electra", embedding_size=HIDDEN, num_hidden_layers=DEPTH, **common)
    if family == "deberta-v2":
        return AutoConfig.for_model("deberta-v2", num_hidden_layers=DEPTH, relative_attention=True,
                                    pos_att_type=["p2c", "c2p"], position_buckets=16, max_relative_positions=-1,
                                    type_vocab_size=0, **common)
    if family in DECODERS:
        extra = {"head_dim": 8} if family == "qwen3" else {}
        return AutoConfig.for_model(family, num_hidden_layers=DEPTH, num_key_value_heads=2, **common, **extra)
    return AutoConfig.for_model(family, num_hidden_layers=DEPTH, **common)


def build(family: str, folder: Path, seed: int = 0) -> Path:
    """Save a tiny random ``family`` model with its tokenizer to ``folder`` (a plain transformers folder)."""
    import torch
    from transformers import AutoModel

    tokenizer = make_tokenizer()
    config = make_config(family, len(tokenizer))
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a tiny random model for tests\n")
    return folder
