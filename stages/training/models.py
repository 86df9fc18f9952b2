"""Stock transformers models built from a size config (BERT -> ``BertForMaskedLM``, GPT -> ``GPT2LMHeadModel``,
T5 -> ``T5ForConditionalGeneration``), saved so the ``AutoModelFor...`` classes load them, and their training
FLOPs per token."""

from __future__ import annotations

from pathlib import Path

from stages.tokenization.layout import BlockLayout
from stages.training.config import ModelConfig


def model_config(layout: "BlockLayout", m: "ModelConfig"):
    """The transformers config for this paradigm and size."""
    if layout.paradigm == "bert":
        common = dict(vocab_size=layout.vocab_size, hidden_size=m.d_model, num_hidden_layers=m.layers,
                      num_attention_heads=m.heads, intermediate_size=m.d_ff, hidden_dropout_prob=m.dropout,
                      attention_probs_dropout_prob=m.dropout, max_position_embeddings=max(512, layout.seq_len),
                      pad_token_id=layout.pad_id)
        if m.arch == "deberta_v2":
            from transformers import DebertaV2Config

            # DeBERTa-v2 as in He et al. 2021: relative positions only, shared attention keys, a first-layer convolution
            return DebertaV2Config(**common, type_vocab_size=0, relative_attention=True, position_buckets=64,
                                   max_relative_positions=-1, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                                   share_att_key=True, norm_rel_ebd="layer_norm", conv_kernel_size=m.conv_kernel)
        from transformers import BertConfig

        return BertConfig(**common, type_vocab_size=2)
    if layout.paradigm == "gpt":
        from transformers import GPT2Config

        return GPT2Config(vocab_size=layout.vocab_size, n_embd=m.d_model, n_layer=m.layers, n_head=m.heads,
                          n_inner=m.d_ff, n_positions=max(1024, layout.seq_len), resid_pdrop=m.dropout,
                          embd_pdrop=m.dropout, attn_pdrop=m.dropout, bos_token_id=layout.eos_id,
                          eos_token_id=layout.eos_id, pad_token_id=layout.eos_id)
    from transformers import T5Config

    return T5Config(vocab_size=layout.vocab_size, d_model=m.d_model, d_kv=m.d_model // m.heads, d_ff=m.d_ff,
                    num_layers=m.layers, num_decoder_layers=m.layers, num_heads=m.heads, dropout_rate=m.dropout,
                    feed_forward_proj="relu", pad_token_id=layout.pad_id, eos_token_id=layout.eos_id,
                    decoder_start_token_id=layout.pad_id, tie_word_embeddings=True)


def build_model(layout: "BlockLayout", m: "ModelConfig", *, seed: int):
    """A freshly initialised model (the initialisation is fixed by ``seed``)."""
    import torch
    from transformers import BertForMaskedLM, DebertaV2ForMaskedLM, GPT2LMHeadModel, T5ForConditionalGeneration

    if m.local_bias and layout.paradigm != "t5":
        raise ValueError(f"model.local_bias: for T5's relative position biases; {layout.paradigm} has none")
    if m.cross_match and layout.paradigm != "t5":
        raise ValueError(f"model.cross_match: for T5's cross-attention; {layout.paradigm} has none")
    torch.manual_seed(seed)
    cfg = model_config(layout, m)
    cls = {"bert": BertForMaskedLM, "gpt": GPT2LMHeadModel, "t5": T5ForConditionalGeneration}[layout.paradigm]
    if cfg.model_type == "deberta-v2":
        cls = DebertaV2ForMaskedLM  # its disentangled attention has no SDPA path in transformers (eager)
    elif layout.paradigm != "t5":  # T5 takes SDPA by itself in transformers 5 (its position bias as the mask)
        cfg._attn_implementation = "sdpa"
    model = cls(cfg)
    if layout.paradigm == "t5" and m.local_bias:
        local_position_bias(model, m.local_bias)
    if layout.paradigm == "t5" and m.cross_match:
        cross_attention_match(model, m.cross_match)
    return _with_loss(model, layout.paradigm)


def local_position_bias(model, slope: float) -> None:
    """Start T5's relative position biases as ALiBi's linear distance penalty (Press et al. 2022), so attention
    starts local rather than uniform (benchmarks/transfer.md, "T5: an objective that transfers"); initial values
    only."""
    import torch

    cfg = model.config
    for stack, bidirectional in ((model.encoder, True), (model.decoder, False)):
        attn = stack.block[0].layer[0].SelfAttention
        d = torch.arange(-cfg.relative_attention_max_distance, cfg.relative_attention_max_distance + 1)
        buckets = attn._relative_position_bucket(d, bidirectional=bidirectional,
                                                 num_buckets=cfg.relative_attention_num_buckets,
                                                 max_distance=cfg.relative_attention_max_distance)
        dist = torch.full((cfg.relative_attention_num_buckets,), float(cfg.relative_attention_max_distance))
        for bucket, distance in zip(buckets.tolist(), d.abs().tolist()):
            dist[bucket] = min(dist[bucket].item(), float(distance))
        slopes = slope * 2.0 ** (-8.0 * torch.arange(cfg.num_heads, dtype=torch.float32) / cfg.num_heads)
        with torch.no_grad():
            attn.relative_attention_bias.weight.copy_(-dist[:, None] * slopes[None, :])


def cross_attention_match(model, scale: float) -> None:
    """Start the first head of every decoder cross-attention as a token matcher (query ``scale`` x identity, key
    identity on its ``d_kv`` coordinates), as span corruption's decoder needs (benchmarks/transfer.md); initial
    values only."""
    import torch

    d_kv = model.config.d_kv
    head = slice(0, d_kv)
    for block in model.decoder.block:
        attn = block.layer[1].EncDecAttention
        with torch.no_grad():
            attn.q.weight[head].zero_()
            attn.k.weight[head].zero_()
            attn.q.weight[head, head] = scale * torch.eye(d_kv)
            attn.k.weight[head, head] = torch.eye(d_kv)


def _with_loss(model, paradigm: str):
    if paradigm == "gpt":  # GPT-2's class name does not map to a loss type; it is the causal-LM loss
        model.loss_type = "ForCausalLM"
    return model


def load_model(path, paradigm: str, *, fresh: list | None = None):
    """A saved model of this paradigm (e.g. the general checkpoint that DAPT continues); ``fresh``, when given, is
    filled with the names of the weights the folder lacked (a published body's new LM head)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    cls = {"bert": AutoModelForMaskedLM, "gpt": AutoModelForCausalLM, "t5": AutoModelForSeq2SeqLM}[paradigm]
    if fresh is None:
        return _with_loss(cls.from_pretrained(str(path)), paradigm)
    model, info = cls.from_pretrained(str(path), output_loading_info=True)
    fresh.extend(sorted(info["missing_keys"]))
    return _with_loss(model, paradigm)


def attention_flops(cfg, *, width: int, layers: int, seq_len: int) -> int:
    """Training FLOPs per token of an encoder's or decoder's self-attention scores: 12 * layers * width * seq_len,
    twice for DeBERTa-v2's disentangled attention."""
    disentangled = 2 if getattr(cfg, "model_type", "") == "deberta-v2" else 1
    return 12 * disentangled * layers * width * seq_len


def flops_per_token(model, layout: "BlockLayout", *, predicted_fraction: float = 1.0,
                    targets_len: int | None = None) -> float:
    """Training FLOPs per input token: 6N + 12 * layers * d_model * seq_len (Kaplan et al. 2020; PaLM appendix B),
    N every parameter; T5's decoder side scaled by ``targets_len / seq_len``, BERT's output layer counted at the
    ``predicted_fraction`` of positions it runs at, DeBERTa-v2's disentangled attention twice."""
    n = sum(p.numel() for p in model.parameters())
    cfg = model.config
    if layout.paradigm != "t5":
        layers = getattr(cfg, "num_hidden_layers", None) or cfg.n_layer
        d = getattr(cfg, "hidden_size", None) or cfg.n_embd
        if layout.paradigm == "bert" and predicted_fraction < 1:
            n -= (1 - predicted_fraction) * (d * d + cfg.vocab_size * d)
        return 6 * n + attention_flops(cfg, width=d, layers=layers, seq_len=layout.seq_len)
    enc = sum(p.numel() for name, p in model.named_parameters() if name.startswith("encoder.block"))
    rest = n - enc  # decoder blocks, the shared embedding / output matmul and final norms
    s, t, d = layout.seq_len, targets_len or layout.targets_len, cfg.d_model
    ratio = t / s
    attention = 12 * d * (cfg.num_layers * s + cfg.num_decoder_layers * ratio * (t + s))
    return 6 * enc + 6 * rest * ratio + attention


def attach_side_head(model, name: str, activation: str, outputs: int, *, file: str, seed: int, init=None) -> None:
    """Attach ``dense(d, d) -> torch.nn.<activation>() -> dense(d, outputs)`` as the submodule ``name``
    (N(0, initializer_range) weights from ``seed``), saved by :func:`save_model` to ``file``; with ``init`` (a
    folder holding it) trained."""
    import torch

    d = model.config.hidden_size
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Sequential(torch.nn.Linear(d, d), getattr(torch.nn, activation)(), torch.nn.Linear(d, outputs))
    with torch.no_grad():
        for layer in (head[0], head[2]):
            layer.weight.normal_(0.0, model.config.initializer_range, generator=generator)
            layer.bias.zero_()
    saved = Path(init) / file if init is not None else None
    if saved is not None and saved.is_file():
        from safetensors.torch import load_file

        head.load_state_dict(load_file(str(saved)))
    setattr(model, name, head.to(next(model.parameters()).device))
    add_side_module(model, name, lambda module, folder: save_tensors(module, Path(folder) / file))


def add_side_module(model, name: str, save) -> None:
    """Record that the submodule ``name`` is an objective's own (not the stock class's): :func:`save_model`
    saves it apart with ``save(module, folder)``, so the folder still loads as the stock class."""
    model.__dict__.setdefault("side_modules", {})[name] = save


def save_tensors(module, path: Path) -> None:
    """``module``'s state dict as a safetensors file."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(path))


def save_model(model, folder) -> None:
    """``save_pretrained`` of the stock class; an objective's own modules (:func:`add_side_module`) go beside it
    in files of their own, so the folder still loads as the stock class."""
    side = {name: (getattr(model, name), save) for name, save in model.__dict__.get("side_modules", {}).items()
            if getattr(model, name, None) is not None}
    for name in side:
        delattr(model, name)
    try:
        model.save_pretrained(str(folder))
        for module, save in side.values():
            save(module, folder)
    finally:
        for name, (module, _) in side.items():
            setattr(model, name, module)
