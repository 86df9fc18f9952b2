"""Which masked-LM recipe transfers in minutes on 2 CPU cores: a standalone sweep, outside the pipeline.

Pre-trains one small model from scratch on the in-domain text (Debian descriptions outside the task's
sections, with the task guard, plus the task's training texts), then fine-tunes it and a random-init twin
on the task with the pooled head (masked mean, LayerNorm, linear), scoring validation and test macro-F1.
It is how the default recipe of params.yaml was chosen (benchmarks/transfer.md, "Pre-training that
transfers"); the figures there come from it. Needs a workspace where ingest@task and ingest@domain ran.

    python benchmarks/transfer_sweep.py bert --arch deberta_v2 --mask 0.3 --steps 1500 --lr 2e-3 \
        --sizes 300 --ftlr 1e-3,3e-4 --out /tmp/sweep
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ap = argparse.ArgumentParser()
ap.add_argument("paradigm")
ap.add_argument("--minutes", type=float, default=6)
ap.add_argument("--mask", type=float, default=0.15)
ap.add_argument("--prenorm", action="store_true")
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--ftlr", default="1e-3")
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--sizes", default="300,0")
ap.add_argument("--seeds", default="0")
ap.add_argument("--vocab", type=int, default=8192)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--ftsteps", type=int, default=300)
ap.add_argument("--head", default="mean")
ap.add_argument("--tag", default="")
ap.add_argument("--no-random", action="store_true")
ap.add_argument("--arch", default="")
ap.add_argument("--load", action="store_true")
ap.add_argument("--conv", type=int, default=3)
ap.add_argument("--steps", type=int, default=0)
ap.add_argument("--out", default="/tmp/transfer-sweep")
args = ap.parse_args()
torch.set_num_threads(2)
OUT = Path(args.out) / f"{args.paradigm}{args.tag}"
OUT.mkdir(parents=True, exist_ok=True)

task = pd.read_parquet(ROOT / "data/ingested/task/documents.parquet")
dom = pd.read_parquet(ROOT / "data/ingested/domain/documents.parquet")
# the task guard of the clean stage: nothing of a held-out package, source package or text
from stages.cleaning.task_guard import HeldOut
held = HeldOut(task, ("validation", "test"))
dom = dom[[not held.reason(t, m) for t, m in zip(dom.text, dom.meta)]]
train_texts = task[task.split == "train"].text.tolist()
unlab = dom.text.tolist() + train_texts
print("unlabeled docs", len(unlab), "chars", sum(map(len, unlab)), flush=True)

# tokenizer
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, normalizers, decoders, processors
tokp = OUT / "tok.json"
if args.paradigm == "bert":
    from transformers import BertTokenizerFast
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tr = trainers.WordPieceTrainer(vocab_size=args.vocab, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], min_frequency=2)
    tk.train_from_iterator(unlab, tr)
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tk.decoder = decoders.WordPiece()
    hf = BertTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    PAD, CLS, SEP, MASK = 0, 2, 3, 4
elif args.paradigm == "gpt":
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tk.train_from_iterator(unlab, tr)
    hf = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>", bos_token="<|endoftext|>")
    PAD = EOS = 0
else:
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.Unigram())
    tk.normalizer = normalizers.NFKC()
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    sent = [f"<extra_id_{i}>" for i in range(99, -1, -1)]
    tr = trainers.UnigramTrainer(vocab_size=args.vocab - 100, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tk.train_from_iterator(unlab, tr)
    tk.add_special_tokens(sent)
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    PAD, EOS = 0, 1
V = len(hf)
print("vocab", V, flush=True)

# blocks
ids = hf(unlab, add_special_tokens=False)["input_ids"]
SEQ = 128
if args.paradigm == "t5":
    from stages.objectives.span_corruption import input_and_target_lengths, corrupt
    RAW, TGT = input_and_target_lengths(SEQ)
else:
    RAW = SEQ - (2 if args.paradigm == "bert" else 0)
stream = []
sep = SEP if args.paradigm == "bert" else EOS
for x in ids:
    stream.extend(x); stream.append(sep)
stream = np.asarray(stream, dtype=np.int64)
nb = len(stream) // RAW
blocks = stream[: nb * RAW].reshape(nb, RAW)
print("tokens", len(stream), "blocks", nb, flush=True)
rng = np.random.default_rng(0)

from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration
d, L = args.d, args.layers
if args.paradigm == "bert":
    if args.arch == "deberta_v2":
        from transformers import DebertaV2Config, DebertaV2ForMaskedLM
        cfg = DebertaV2Config(vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=2, intermediate_size=4*d,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512, pad_token_id=PAD,
                              relative_attention=True, position_buckets=64, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                              conv_kernel_size=args.conv, type_vocab_size=0, norm_rel_ebd="layer_norm", share_att_key=True, max_relative_positions=-1)
        mk = lambda: DebertaV2ForMaskedLM(cfg)
    elif args.arch == "roformer":
        from transformers import RoFormerConfig, RoFormerForMaskedLM
        cfg = RoFormerConfig(vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=2, intermediate_size=4*d, embedding_size=d,
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512, pad_token_id=PAD)
        mk = lambda: RoFormerForMaskedLM(cfg)
    elif args.prenorm:
        from transformers import RobertaPreLayerNormConfig, RobertaPreLayerNormForMaskedLM
        cfg = RobertaPreLayerNormConfig(vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=2, intermediate_size=4*d,
                                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=514, pad_token_id=PAD, type_vocab_size=1)
        mk = lambda: RobertaPreLayerNormForMaskedLM(cfg)
    else:
        cfg = BertConfig(vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=2, intermediate_size=4*d,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512, pad_token_id=PAD)
        mk = lambda: BertForMaskedLM(cfg)
elif args.paradigm == "gpt":
    cfg = GPT2Config(vocab_size=V, n_embd=d, n_layer=L, n_head=2, n_inner=4*d, n_positions=1024, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0,
                     bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS)
    mk = lambda: GPT2LMHeadModel(cfg)
else:
    cfg = T5Config(vocab_size=V, d_model=d, d_kv=d // 2, d_ff=4*d, num_layers=L, num_decoder_layers=L, num_heads=2, dropout_rate=0.0,
                   feed_forward_proj="relu", pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD, tie_word_embeddings=True)
    mk = lambda: T5ForConditionalGeneration(cfg)
cfg._attn_implementation = "sdpa" if (args.paradigm == "gpt" or (args.paradigm == "bert" and args.arch in ("", "bert"))) else "eager"

def body(m):
    for a in ("bert", "roberta_prelayernorm", "transformer", "deberta", "roformer"):
        if hasattr(m, a): return getattr(m, a)

def make_batch(rows):
    if args.paradigm == "bert":
        x = np.concatenate([np.full((len(rows), 1), CLS), rows, np.full((len(rows), 1), SEP)], 1)
        sel = (rng.random(x.shape) < args.mask) & (x > 4)
        lab = np.where(sel, x, -100)
        r = rng.random(x.shape)
        inp = x.copy(); inp[sel & (r < .8)] = MASK
        rnd = sel & (r >= .8) & (r < .9); inp[rnd] = rng.integers(5, V, rnd.sum())
        return torch.from_numpy(inp), torch.from_numpy(lab)
    if args.paradigm == "gpt":
        x = torch.from_numpy(rows); return x, x
    pairs = [corrupt(r, sentinel_top=V - 1, eos_id=EOS, noise_density=0.15, mean_span=3.0, rng=rng) for r in rows]
    return torch.from_numpy(np.stack([p[0] for p in pairs])), torch.from_numpy(np.stack([p[1] for p in pairs]))

def lm_loss(m, inp, lab):
    if args.paradigm == "bert":
        h = body(m)(input_ids=inp)[0]
        pos = (lab.reshape(-1) != -100).nonzero().squeeze(1)
        head = m.cls if hasattr(m, "cls") else (m.lm_predictions if hasattr(m, "lm_predictions") else m.lm_head)
        logits = head(h.reshape(-1, h.size(-1)).index_select(0, pos))
        return torch.nn.functional.cross_entropy(logits, lab.reshape(-1).index_select(0, pos))
    if args.paradigm == "gpt":
        return m(input_ids=inp, labels=lab).loss
    return m(input_ids=inp, labels=lab).loss

perm = rng.permutation(nb)
held, trainb = blocks[perm[:256]], blocks[perm[256:]]
torch.manual_seed(0)
model = mk()
opt = torch.optim.AdamW([p for p in model.parameters()], lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01, fused=True)
# measure speed with 20 steps then set the schedule
B = args.batch
step = 0; k = 0
def sample():
    global k
    idx = np.arange(k, k + B) % len(trainb); k += B
    return trainb[idx]
for i in range(25):
    if i == 5: t0 = time.time()
    inp, lab = make_batch(sample()); loss = lm_loss(model, inp, lab); loss.backward(); opt.step(); opt.zero_grad()
sp = (time.time() - t0) / 20 * 1.08
total = args.steps or int(args.minutes * 60 / sp * 0.97)
print(f"{sp*1000:.0f} ms/step -> {total} steps, {total*B*SEQ/1e6:.1f} M tokens ({total*B/len(trainb):.2f} epochs)", flush=True)
torch.manual_seed(0); model = mk(); opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01, fused=True)
warm = max(1, int(0.05 * total))
def heldout():
    model.eval(); r = np.random.default_rng(1); global rng
    save = rng; rng = r
    with torch.no_grad():
        ls = [lm_loss(model, *make_batch(held[i:i + 32])).item() for i in range(0, len(held), 32)]
    rng = save; model.train(); return float(np.mean(ls))
t0 = time.time(); run = 0
if args.load:
    model.load_state_dict(torch.load(OUT / "pre.pt")); total = 0
for step in range(total):
    lr = args.lr * (step + 1) / warm if step < warm else args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm))))
    for g in opt.param_groups: g["lr"] = lr
    inp, lab = make_batch(sample()); loss = lm_loss(model, inp, lab); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=True)
    run += loss.item()
    if (step + 1) % max(1, total // 8) == 0:
        print(f"step {step+1} train {run / max(1, total // 8):.3f} held {heldout():.3f} {time.time()-t0:.0f}s", flush=True); run = 0
pre_loss = heldout()
print("final heldout", pre_loss, "pretrain s", time.time() - t0, flush=True)
pre_state = {k: v.clone() for k, v in model.state_dict().items()}
if not args.load: torch.save(pre_state, OUT / "pre.pt")

# fine-tuning
labels = sorted(task.label.unique()); L2I = {l: i for i, l in enumerate(labels)}
tr = task[task.split == "train"]; va = task[task.split == "validation"]; te = task[task.split == "test"]
from sklearn.metrics import f1_score
def enc(texts):
    if args.paradigm == "t5":
        texts = ["classify: " + t for t in texts]
    e = hf(texts, truncation=True, max_length=128, padding="longest", return_tensors="pt", add_special_tokens=args.paradigm != "gpt")
    return e["input_ids"], e["attention_mask"]
cand = None
if args.paradigm == "t5":
    ce = hf(labels)["input_ids"]; w = max(map(len, ce))
    cand = torch.full((len(labels), w), -100, dtype=torch.long)
    for i, c in enumerate(ce): cand[i, :len(c)] = torch.tensor(c)

class Clf(torch.nn.Module):
    def __init__(self, lm):
        super().__init__(); self.lm = lm
        if args.paradigm != "t5":
            self.ln = torch.nn.LayerNorm(d); self.out = torch.nn.Linear(d, len(labels))
    def hidden(self, x, m):
        if args.paradigm == "t5":
            return self.lm.get_encoder()(input_ids=x, attention_mask=m)[0]
        return body(self.lm)(input_ids=x, attention_mask=m)[0]
    def forward(self, x, m):
        h = self.hidden(x, m)
        if args.head == "last" and args.paradigm == "gpt":
            last = m.sum(1) - 1; v = h[torch.arange(len(x)), last]
        else:
            mf = m.unsqueeze(-1).float(); v = (h * mf).sum(1) / mf.sum(1)
        return self.out(self.ln(v))
    def loss(self, x, m, y):
        if args.paradigm == "t5" and args.head == "t2t":
            return self.lm(input_ids=x, attention_mask=m, labels=cand[y]).loss
        return torch.nn.functional.cross_entropy(self(x, m), y)
    @torch.no_grad()
    def predict(self, x, m):
        if args.paradigm == "t5" and args.head == "t2t":
            encd = self.lm.get_encoder()(input_ids=x, attention_mask=m)
            sc = torch.empty(len(x), len(labels))
            for c in range(len(labels)):
                t = cand[c].repeat(len(x), 1)
                lg = self.lm(encoder_outputs=encd, attention_mask=m, labels=t).logits.log_softmax(-1)
                v = t != -100
                sc[:, c] = (lg.gather(-1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1) * v).sum(-1)
            return sc.argmax(-1)
        return self(x, m).argmax(-1)

def evaluate(clf, df):
    clf.eval(); preds = []
    for i in range(0, len(df), 128):
        x, m = enc(df.text.iloc[i:i + 128].tolist()); preds.append(clf.predict(x, m))
    clf.train(); p = torch.cat(preds).numpy(); y = df.label.map(L2I).to_numpy()
    return f1_score(y, p, average="macro"), float((p == y).mean())

def finetune(init, n, seed, lr):
    torch.manual_seed(seed); lm = mk()
    if init == "pretrained": lm.load_state_dict(pre_state)
    clf = Clf(lm)
    sub = tr if n == 0 else tr.sample(n=n, random_state=seed)
    y = torch.tensor(sub.label.map(L2I).to_numpy()); texts = sub.text.tolist()
    steps = max(args.ftsteps, -(-len(sub) // 32) * 1)
    opt = torch.optim.AdamW(clf.parameters(), lr=lr, weight_decay=0.01)
    r = np.random.default_rng(seed); order = np.array([], dtype=int); best = (-1, None); t0 = time.time()
    vsub = va
    for s in range(steps):
        if len(order) < 32: order = np.concatenate([order, r.permutation(len(sub))])
        idx, order = order[:32], order[32:]
        warm = int(0.06 * steps)
        lr_s = lr * (s + 1) / warm if s < warm else lr * (steps - s) / (steps - warm)
        for g in opt.param_groups: g["lr"] = lr_s
        x, m = enc([texts[i] for i in idx]); loss = clf.loss(x, m, y[idx]); loss.backward()
        torch.nn.utils.clip_grad_norm_(clf.parameters(), 1.0); opt.step(); opt.zero_grad()
        if (s + 1) % 100 == 0 or s + 1 == steps:
            f, a = evaluate(clf, vsub)
            if f > best[0]: best = (f, {k: v.clone() for k, v in clf.state_dict().items()})
    clf.load_state_dict(best[1])
    tf, ta = evaluate(clf, te)
    return {"init": init, "n": n, "seed": seed, "lr": lr, "val_f1": round(best[0], 4), "test_f1": round(tf, 4), "test_acc": round(ta, 4), "s": round(time.time() - t0)}

res = []
inits = ["pretrained"] + ([] if args.no_random else ["random"])
for n in [int(s) for s in args.sizes.split(",")]:
    for lr in [float(x) for x in args.ftlr.split(",")]:
        for init in inits:
            for seed in [int(s) for s in args.seeds.split(",")]:
                r = finetune(init, n, seed, lr); res.append(r); print(json.dumps(r), flush=True)
json.dump({"args": vars(args), "pre_loss": pre_loss, "results": res}, open(OUT / f"result{'-load' if args.load else ''}.json", "w"), indent=1)
