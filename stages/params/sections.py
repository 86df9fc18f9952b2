"""params.yaml's sections and the config classes of their keys."""

from __future__ import annotations

from stages.cleaning.config import CleanConfig, CleanerConfig
from stages.evaluation.config import CompareConfig, EvaluateConfig
from stages.finetuning.core import FinetuneConfig
from stages.finetuning.runs import AdaptConfig
from stages.published.config import PublishedConfig
from stages.serving.config import PackageConfig
from stages.sources.config import CorpusConfig
from stages.tokenization.config import TokensConfig
from stages.tokenization.split import SplitConfig
from stages.tokenization.trainers import TokenizerConfig
from stages.training.config import DaptConfig, PretrainConfig

# params.yaml's sections: (heading, key prefix, how the section is read, the config classes of its keys). A section
# with several classes lists them side by side at the same level (clean: the cleaner's keys, task, gate).
SECTIONS: tuple[tuple[str, str, str, tuple[type, ...]], ...] = (
    ("ingest", "ingest.<corpus>", "one section per corpus: general, domain, task", (CorpusConfig,)),
    ("clean", "clean.<corpus>", "clean.defaults, with each corpus's section merged over it", (CleanerConfig, CleanConfig)),
    ("split", "split", "the held-out split of the cleaned corpora", (SplitConfig,)),
    ("tokenizer", "tokenizer.<paradigm>", "one section per paradigm: bert, gpt, t5", (TokenizerConfig,)),
    ("tokens", "tokens.<paradigm>", "tokens.defaults, with each paradigm's section merged over it", (TokensConfig,)),
    ("pretrain", "pretrain.<paradigm>", "pretrain.defaults, with each paradigm's section merged over it", (PretrainConfig,)),
    ("dapt", "dapt.<paradigm>", "dapt.defaults, with each paradigm's section merged over it", (DaptConfig,)),
    ("finetune", "finetune.<paradigm>", "finetune.defaults, with each paradigm's section merged over it", (FinetuneConfig,)),
    ("adapt", "adapt", "adaptation runs beside the finetune stage's (frozen, LoRA), each a stage of its own",
     (AdaptConfig,)),
    ("published", "published", "published checkpoints beside the from-scratch models; profiles/published.yaml fills it",
     (PublishedConfig,)),
    ("evaluate", "evaluate", "one section", (EvaluateConfig,)),
    ("compare", "compare", "the objective comparison; profiles/compare.yaml fills it", (CompareConfig,)),
    ("package", "package", "one section", (PackageConfig,)),
)


SKIP = {CleanConfig: {"cleaner"}}  # CleanConfig.cleaner is CleanerConfig's keys, listed at the section's level
