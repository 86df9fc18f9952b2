"""Stock transformers models built from a size config, and their training FLOPs per token.

BERT -> ``BertForMaskedLM``, GPT -> ``GPT2LMHeadModel``, T5 -> ``T5ForConditionalGeneration`` (with
``decoder_start_token_id`` = pad, as T5). SDPA attention where the class supports it. Saved with
``save_pretrained`` (safetensors) they load with ``AutoModelForMaskedLM`` / ``AutoModelForCausalLM`` /
``AutoModelForSeq2SeqLM`` and work in ``pipeline("fill-mask")`` and ``generate()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.tokenization.layout import BlockLayout
    from stages.training.config import ModelConfig


def model_config(layout: "BlockLayout", m: "ModelConfig"):
    """The transformers config for this paradigm and size."""
    if layout.paradigm == "bert" and m.arch == "deberta_v2":
        from transformers import DebertaV2Config

        # DeBERTa-v2 as in He et al. 2021: relative positions (c2p + p2c, log buckets), no absolute position
        # input, shared attention keys, the first layer's convolution over ``conv_kernel`` neighbours.
        return DebertaV2Config(vocab_size=layout.vocab_size, hidden_size=m.d_model, num_hidden_layers=m.layers,
                               num_attention_heads=m.heads, intermediate_size=m.d_ff, hidden_dropout_prob=m.dropout,
                               attention_probs_dropout_prob=m.dropout, max_position_embeddings=max(512, layout.seq_len),
                               pad_token_id=layout.pad_id, type_vocab_size=0, relative_attention=True,
                               position_buckets=64, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
                               position_biased_input=False, share_att_key=True, norm_rel_ebd="layer_norm",
                               conv_kernel_size=m.conv_kernel)
    if layout.paradigm == "bert":
        from transformers import BertConfig

        return BertConfig(vocab_size=layout.vocab_size, hidden_size=m.d_model, num_hidden_layers=m.layers,
                          num_attention_heads=m.heads, intermediate_size=m.d_ff, hidden_dropout_prob=m.dropout,
                          attention_probs_dropout_prob=m.dropout, max_position_embeddings=max(512, layout.seq_len),
                          pad_token_id=layout.pad_id, type_vocab_size=2)
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
    """Start T5's relative position biases as a linear penalty on distance, ALiBi's form (Press et al. 2022):
    bucket b of head h of n gets ``-slope * 2**(-8h/n) * d(b)``, d(b) the smallest distance in the bucket
    (ALiBi's geometric slopes, scaled so the first head's is ``slope``): the first head attends to its
    neighbours from the first step, the last one nearly everywhere, and the biases are learned from there.
    With T5's own init (small random biases, no absolute positions) attention starts uniform and a position
    learns nothing of its neighbours until the biases have been learned (benchmarks/README.md, "T5: an
    objective that transfers").
    The model stays a stock ``T5ForConditionalGeneration``: only initial values change."""
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
    """Start the first head of every decoder cross-attention as a token matcher: its query projection is
    ``scale`` x the identity and its key projection the identity on that head's ``d_kv`` coordinates (zero
    elsewhere), so the score of decoder position i for encoder position j is ``scale`` x the dot product of
    their (normalised) states, largest where both hold the same token. Span corruption asks the decoder,
    after it writes sentinel k, for the tokens the encoder saw at sentinel k; with random projections
    attention starts uniform, and the decoder first learns to predict sentinels and word frequencies (a
    plateau near loss 4.9) until matching is learned, after a number of steps that varies with the random
    stream. Matched from the start, the model leaves that plateau in every stream measured
    (benchmarks/README.md, "T5: an objective that transfers"). The other heads keep T5's initialisation,
    and the model stays a stock ``T5ForConditionalGeneration``: only initial values change."""
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


def load_model(path, paradigm: str):
    """A saved model of this paradigm (e.g. the general checkpoint that DAPT continues)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    cls = {"bert": AutoModelForMaskedLM, "gpt": AutoModelForCausalLM, "t5": AutoModelForSeq2SeqLM}[paradigm]
    return _with_loss(cls.from_pretrained(str(path)), paradigm)


def flops_per_token(model, layout: "BlockLayout", *, predicted_fraction: float = 1.0,
                    targets_len: int | None = None) -> float:
    """Training FLOPs per input token: 6N + 12 * layers * d_model * seq_len (Kaplan et al. 2020; PaLM
    appendix B; nanoGPT's MFU), N counting every parameter (the tied embedding is the output matmul).

    T5 runs its encoder on ``seq_len`` tokens but its decoder and output layer on only ``targets_len``, so
    its decoder-side terms are scaled by ``targets_len / seq_len``, and its attention term counts the
    encoder's self-attention plus the decoder's self- and cross-attention over their lengths. ``targets_len``
    is the decoder width the objective uses (default: the layout's, span corruption's).

    BERT trained through :func:`training_view` computes its output layer (transform + vocabulary
    projection) at ``predicted_fraction`` of the positions only (the MLM selection rate), so only that share
    of those matmuls is counted: MFU counts the work done, not the work a dense head would do.

    DeBERTa-v2's disentangled attention adds two score matrices (content-to-position and
    position-to-content, each a ``seq_len`` x relative-positions product) to the content-to-content one,
    so its attention term is counted twice: scores 3 x 2sd plus the weighted sum 2sd per token and layer,
    against 2sd + 2sd for standard attention (the relative-position projections are a few per-sequence
    matmuls, left out)."""
    n = sum(p.numel() for p in model.parameters())
    cfg = model.config
    if layout.paradigm != "t5":
        layers = getattr(cfg, "num_hidden_layers", None) or cfg.n_layer
        d = getattr(cfg, "hidden_size", None) or cfg.n_embd
        if layout.paradigm == "bert" and predicted_fraction < 1:
            n -= (1 - predicted_fraction) * (d * d + cfg.vocab_size * d)
        disentangled = 2 if getattr(cfg, "model_type", "") == "deberta-v2" else 1
        return 6 * n + 12 * disentangled * layers * d * layout.seq_len
    enc = sum(p.numel() for name, p in model.named_parameters() if name.startswith("encoder.block"))
    rest = n - enc  # decoder blocks, the shared embedding / output matmul and final norms
    s, t, d = layout.seq_len, targets_len or layout.targets_len, cfg.d_model
    ratio = t / s
    attention = 12 * d * (cfg.num_layers * s + cfg.num_decoder_layers * ratio * (t + s))
    return 6 * enc + 6 * rest * ratio + attention


def _masked_positions(batch: dict) -> dict:
    """The flat indices of the selected positions, listed on the host before the batch moves to the device."""
    positions = (batch["labels"].reshape(-1) != -100).nonzero().squeeze(1)
    return {**batch, "positions": positions}


def training_view(model, objective_name: str, *, rtd_weight: float = 50.0):
    """The module the training loop calls: ``model`` itself, or for BERT's MLM a view that applies the output
    layer (transform + vocabulary projection) at the selected positions only. The stock forward projects
    every position and then ignores 85% of them; for a small model the projection is most of the compute
    (d_model 128, 8,192 words: 70% of the FLOPs), so the view gives the same loss (the mean cross-entropy
    over the selected positions; a test checks loss and gradients) for about half the work. The model
    itself is unchanged and saves as a stock ``BertForMaskedLM``.

    Returns (module, prepare) where ``prepare(batch)`` runs on the host before the batch moves, so the
    view's forward needs no device-to-host sync."""
    import torch

    body_name = next((n for n in ("bert", "deberta") if hasattr(model, n)), None)
    if objective_name == "electra":
        return _electra_view(model, body_name, rtd_weight), _masked_positions
    if objective_name in ("nsp", "sop"):
        return _pair_view(model, body_name), _masked_positions
    if objective_name == "permuted":
        return _permuted_view(model), (lambda batch: batch)
    if objective_name != "masked_lm" or body_name is None or not hasattr(model, "cls"):
        return model, (lambda batch: batch)

    class _View(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask=None, labels=None, positions=None, **kwargs):
            return _sparse_mlm(self.inner, body_name, input_ids, attention_mask, labels, positions, **kwargs)

    return _View(model), _masked_positions


def _sparse_mlm(inner, body_name: str, input_ids, attention_mask, labels, positions, **kwargs):
    """The masked-LM loss with the output layer at the selected ``positions`` only (``training_view``);
    returns (loss, logits, labels) of those positions."""
    hidden = getattr(inner, body_name)(input_ids=input_ids, attention_mask=attention_mask, **kwargs)[0]
    picked = hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)
    target = labels.reshape(-1).index_select(0, positions)
    return _mlm_result(inner.cls(picked), target, positions)


def _mlm_result(logits, target, positions):
    """(loss, logits, labels) of the selected positions: the mean cross-entropy over them."""
    from types import SimpleNamespace

    import torch

    # sum / max(count, 1): an empty selection gives 0 (not NaN) without asking the device for the count
    loss = torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum") / max(len(positions), 1)
    return SimpleNamespace(loss=loss, logits=logits, labels=target)


def _attach_side_head(model, name: str, activation, outputs: int, *, seed: int, init=None) -> None:
    """Attach ``dense(d, d) -> activation -> dense(d, outputs)`` as the submodule ``name`` (N(0,
    initializer_range) weights from ``seed``, zero biases), so the optimizer and checkpoints include it; with
    ``init`` (a model folder holding its file, ``side_heads()[name]``, e.g. the general model DAPT continues)
    the trained weights."""
    from pathlib import Path

    import torch

    d = model.config.hidden_size
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Sequential(torch.nn.Linear(d, d), activation, torch.nn.Linear(d, outputs))
    with torch.no_grad():
        for layer in (head[0], head[2]):
            layer.weight.normal_(0.0, model.config.initializer_range, generator=generator)
            layer.bias.zero_()
    saved = Path(init) / side_heads()[name] if init is not None else None
    if saved is not None and saved.is_file():
        from safetensors.torch import load_file

        head.load_state_dict(load_file(str(saved)))
    setattr(model, name, head.to(next(model.parameters()).device))


def attach_rtd_head(model, *, seed: int, init=None) -> None:
    """Give a masked-LM model ELECTRA's discriminator head (dense, GELU, one logit per token) as the
    submodule ``rtd_head``; with ``init`` its trained weights from ``rtd_head.safetensors``."""
    import torch

    _attach_side_head(model, "rtd_head", torch.nn.GELU(), 1, seed=seed, init=init)


def attach_pair_head(model, *, seed: int, init=None) -> None:
    """Give a masked-LM model BERT's sentence-pair head (its pooler, dense + tanh on ``[CLS]``, then two
    logits) as the submodule ``pair_head`` (``stages.objectives.sentence_pairs``); with ``init`` its trained
    weights from ``pair_head.safetensors``."""
    import torch

    _attach_side_head(model, "pair_head", torch.nn.Tanh(), 2, seed=seed, init=init)


def side_heads() -> dict[str, str]:
    """Submodules a pre-training objective attaches beside the stock model -> the file each is saved in."""
    from stages.objectives.electra import RTD_HEAD_FILE
    from stages.objectives.sentence_pairs import PAIR_HEAD_FILE

    return {"rtd_head": RTD_HEAD_FILE, "pair_head": PAIR_HEAD_FILE}


def save_model(model, folder) -> None:
    """``save_pretrained`` of the stock class; an objective's own heads (ELECTRA's discriminator head and
    separate generator, the sentence-pair head) go beside it in files of their own, so the folder still
    loads as the stock masked-LM model."""
    from pathlib import Path

    heads = {name: getattr(model, name) for name in side_heads() if getattr(model, name, None) is not None}
    generator = getattr(model, "electra_generator", None)
    if not heads and generator is None:
        model.save_pretrained(str(folder))
        return
    from safetensors.torch import save_file

    for name in heads:
        delattr(model, name)
    if generator is not None:
        del model.electra_generator
    try:
        model.save_pretrained(str(folder))
        for name, head in heads.items():
            save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
                      str(Path(folder) / side_heads()[name]))
        if generator is not None:
            from stages.training.electra import save_generator

            save_generator(generator, folder)
    finally:
        for name, head in heads.items():
            setattr(model, name, head)
        if generator is not None:
            model.electra_generator = generator


def permuted_flops_per_token(model, layout: "BlockLayout", targets: int) -> float:
    """Permuted LM on GPT-2 (``stages.objectives.permuted_lm``): the transformer runs over ``seq_len`` content
    rows plus one query row per target, densely masked (attention over ``seq_len + targets`` keys), and the
    tied output layer at the ``targets`` query rows only; per input token, as :func:`flops_per_token` counts."""
    cfg = model.config
    s, d = layout.seq_len, cfg.n_embd
    rows = s + targets
    output = cfg.vocab_size * d
    body = sum(p.numel() for p in model.parameters()) - output
    return 6 * body * rows / s + 6 * output * targets / s + 12 * cfg.n_layer * d * rows * rows / s


def electra_flops_per_token(model, layout: "BlockLayout", *, select: float) -> float:
    """ELECTRA with tied generator and discriminator: the masked-LM pass of :func:`flops_per_token` (output
    layer at the selected share) plus a second pass of the transformer on the corrupted text and the
    discriminator head at every position (6 x its parameters per token). With a separate generator
    (``stages.training.electra``): one pass of the discriminator's transformer and head at every position
    (its masked-LM output layer is not run) plus the generator's own count."""
    cfg = model.config
    head = getattr(model, "rtd_head", None)
    generator = getattr(model, "electra_generator", None)
    head_params = sum(p.numel() for p in head.parameters()) if head is not None else 0
    gen_params = sum(p.numel() for p in generator.parameters()) if generator is not None else 0
    n = sum(p.numel() for p in model.parameters()) - head_params - gen_params
    d, layers = cfg.hidden_size, cfg.num_hidden_layers
    body = 6 * (n - (d * d + cfg.vocab_size * d))  # without the vocabulary output layer
    disentangled = 2 if getattr(cfg, "model_type", "") == "deberta-v2" else 1
    attention = 12 * disentangled * layers * d * layout.seq_len
    if generator is not None:
        from stages.training.electra import generator_flops_per_token

        return (body + attention + 6 * head_params
                + generator_flops_per_token(generator, seq_len=layout.seq_len, select=select))
    # flops_per_token counts every parameter of ``model``, the head's included (6 x its size per token)
    return flops_per_token(model, layout, predicted_fraction=select) + body + attention


def _electra_view(model, body_name, rtd_weight: float):
    """The training module of ELECTRA (tied generator and discriminator, see ``stages.objectives.electra``, or
    a separate smaller generator, ``stages.training.electra``): the generator's masked-LM loss at the selected positions, replacements sampled from its distribution by
    inverse CDF with the batch's uniform numbers (no gradient through the sampling, as the paper), the
    discriminator's binary cross-entropy over every real token. In evaluation (the model in eval mode) the
    loss is the generator's masked-LM loss alone, comparable with masked-LM runs at the same rate."""
    from types import SimpleNamespace

    import torch

    if body_name is None or not hasattr(model, "cls") or not hasattr(model, "rtd_head"):
        raise ValueError("electra: needs a masked-LM model with an rtd_head "
                         "(stages.training.models.attach_rtd_head)")

    class _Electra(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask=None, labels=None, positions=None, original_ids=None,
                    sample_u=None, **kwargs):
            separate = getattr(self.inner, "electra_generator", None)
            if separate is None:
                generator = _sparse_mlm(self.inner, body_name, input_ids, attention_mask, labels, positions, **kwargs)
            else:  # the smaller generator, on the shared word embeddings
                embeddings = getattr(self.inner, body_name).embeddings.word_embeddings
                generator = _mlm_result(separate(input_ids, attention_mask, positions, embeddings),
                                        labels.reshape(-1).index_select(0, positions), positions)
            if not self.inner.training:
                return generator
            with torch.no_grad():
                cdf = torch.softmax(generator.logits.float(), dim=-1).cumsum(-1)
                u = sample_u.reshape(-1).index_select(0, positions).unsqueeze(1) * cdf[:, -1:]
                sampled = torch.searchsorted(cdf, u).squeeze(1).clamp(max=cdf.size(1) - 1)
                corrupted = original_ids.reshape(-1).clone()
                corrupted[positions] = sampled
                corrupted = corrupted.view_as(original_ids)
                replaced = (corrupted != original_ids).float()
            disc = getattr(self.inner, body_name)(input_ids=corrupted, attention_mask=attention_mask, **kwargs)[0]
            rtd_logits = self.inner.rtd_head(disc).squeeze(-1).float()
            real = attention_mask.bool() if attention_mask is not None else torch.ones_like(replaced, dtype=torch.bool)
            rtd = torch.nn.functional.binary_cross_entropy_with_logits(rtd_logits[real], replaced[real])
            return SimpleNamespace(loss=generator.loss + rtd_weight * rtd, logits=generator.logits,
                                   labels=generator.labels, mlm_loss=generator.loss, rtd_loss=rtd)

    return _Electra(model)


def _pair_view(model, body_name):
    """The training module of masked LM with a sentence-pair task (``stages.objectives.sentence_pairs``): one
    pass of the transformer, the masked-LM output layer at the selected positions and the pair head on
    ``[CLS]``; the loss is their sum, as BERT's. In evaluation (the model in eval mode) the loss is the masked-LM
    loss alone, comparable with masked-LM runs at the same rate; ``pair_accuracy`` says how well the head
    tells the pairs apart."""
    from types import SimpleNamespace

    import torch

    if body_name is None or not hasattr(model, "cls") or not hasattr(model, "pair_head"):
        raise ValueError("nsp / sop: needs a masked-LM model with a pair_head "
                         "(stages.training.models.attach_pair_head)")

    class _Pairs(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask=None, labels=None, positions=None, pair_labels=None, **kwargs):
            hidden = getattr(self.inner, body_name)(input_ids=input_ids, attention_mask=attention_mask, **kwargs)[0]
            picked = hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)
            mlm = _mlm_result(self.inner.cls(picked), labels.reshape(-1).index_select(0, positions), positions)
            pair_logits = self.inner.pair_head(hidden[:, 0]).float()
            pair = torch.nn.functional.cross_entropy(pair_logits, pair_labels)
            accuracy = (pair_logits.argmax(-1) == pair_labels).float().mean()
            loss = mlm.loss + pair if self.inner.training else mlm.loss
            return SimpleNamespace(loss=loss, logits=mlm.logits, labels=mlm.labels, mlm_loss=mlm.loss,
                                   pair_loss=pair, pair_accuracy=accuracy)

    return _Pairs(model)


def _permuted_view(model):
    """The training module of permuted LM (``stages.objectives.permuted_lm``): GPT-2's transformer over the
    content and query rows with the two-stream mask and the query rows' positions, its tied output layer at the
    query rows only; returns (loss, logits, labels) of the targets. The model saves as a stock
    ``GPT2LMHeadModel``."""
    from types import SimpleNamespace

    import torch

    if not hasattr(model, "transformer") or not hasattr(model, "lm_head"):
        raise ValueError("permuted: needs a GPT-2 language model (GPT2LMHeadModel)")

    class _Permuted(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, position_ids, attention_mask, labels, **kwargs):
            if getattr(self.inner.config, "_attn_implementation", None) != "sdpa":  # eager adds the mask to scores
                attention_mask = torch.zeros(attention_mask.shape, device=attention_mask.device).masked_fill(
                    ~attention_mask, torch.finfo(torch.float32).min)
            hidden = self.inner.transformer(input_ids=input_ids, position_ids=position_ids,
                                            attention_mask=attention_mask, use_cache=False, **kwargs)[0]
            queries = hidden[:, hidden.size(1) - labels.size(1):]
            logits = self.inner.lm_head(queries)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))
            return SimpleNamespace(loss=loss, logits=logits, labels=labels)

    return _Permuted(model)
