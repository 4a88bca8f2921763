"""Model and training hyper-parameters, with the presets of Table 3."""

import dataclasses
import numbers
import re

from keras_transformer.layers.positional import POSITIONAL_KINDS

SHA256_HEX = re.compile("[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the Transformer (Table 3 names in brackets).

    vocab_size: shared subword vocabulary size. num_layers [N]. d_model [d_model].
    num_heads [h]. d_ff [d_ff]. key_dim [d_k] and value_dim [d_v]: None means d_model / h.
    dropout [P_drop], on sub-layer outputs and embedding sums (§5.4). attention_dropout: on the
    attention weights; relu_dropout: on the feed-forward network's hidden ReLU (both not in the
    paper; 0 by default). positional: "sinusoidal" (§3.5) or
    "learned" (row E). max_length: longest sequence (learned positions, decoding bound).
    share_embeddings: one matrix for source and target embeddings (§3.4). norm_first: pre-norm
    instead of the paper's post-norm. label_smoothing [eps_ls]. warmup_steps (§5.3).
    learning_rate_scale: a factor on Eq. 3's whole learning-rate curve (1 is the paper's).
    tokens_per_batch: batch budget of source tokens and of target tokens each (§5.1: 25000).
    tokenizer_sha256: the hex SHA-256 of the sentencepiece model the model's ids come from
    (`SubwordTokenizer.sha256`), which `check_tokenizer` holds a tokenizer to; None: not
    recorded, any tokenizer of vocab_size pieces is accepted.
    """

    vocab_size: int
    num_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    key_dim: int | None = None
    value_dim: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    positional: str = "sinusoidal"
    max_length: int = 512
    share_embeddings: bool = True
    norm_first: bool = False
    label_smoothing: float = 0.1
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    tokens_per_batch: int = 25000
    tokenizer_sha256: str | None = None

    def __post_init__(self):
        for name in (
            "vocab_size",
            "num_layers",
            "d_model",
            "num_heads",
            "d_ff",
            "max_length",
            "warmup_steps",
            "tokens_per_batch",
        ):
            _check_positive_int(name, getattr(self, name))
        for name in ("key_dim", "value_dim"):
            value = getattr(self, name)
            if value is None:
                if self.d_model % self.num_heads:
                    raise ValueError(
                        f"{name}: d_model={self.d_model} is not divisible by num_heads="
                        f"{self.num_heads}; set {name} explicitly or choose divisible sizes"
                    )
            else:
                _check_positive_int(name, value)
        for name in ("dropout", "attention_dropout", "relu_dropout", "label_smoothing"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
                raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
        scale = self.learning_rate_scale
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale > 0:
            raise ValueError(f"learning_rate_scale must be a positive number, got {scale!r}")
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(
                f"positional must be one of {POSITIONAL_KINDS}, got {self.positional!r}"
            )
        for name in ("share_embeddings", "norm_first"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        digest = self.tokenizer_sha256
        if digest is not None and not (isinstance(digest, str) and SHA256_HEX.fullmatch(digest)):
            raise ValueError(
                "tokenizer_sha256 must be None or the 64 lowercase hex digits of a SHA-256 (the "
                f"tokenizer's sentencepiece model's), got {digest!r}"
            )

    @classmethod
    def preset(cls, name, **overrides):
        """A Table 3 preset ("base", "big") or "tiny" (for tests and CPUs), with overrides."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, values):
        """Builds a config from a dict, naming any key that is not a field."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; known fields: {sorted(fields)}")
        if "vocab_size" not in values:
            raise ValueError("vocab_size is required (the size of the subword vocabulary)")
        return cls(**values)

    def to_dict(self):
        return dataclasses.asdict(self)

    def check_tokenizer(self, tokenizer):
        """Raises ValueError, naming the tokenizer's file, unless `tokenizer` (a SubwordTokenizer)
        is the one the model's ids come from: vocab_size pieces and, when tokenizer_sha256 is
        recorded, that SHA-256."""
        where = f"{tokenizer.path}: " if tokenizer.path else ""
        remedy = (
            "give the tokenizer the model was trained with (the run directory's tokenizer.model)"
        )
        if tokenizer.vocab_size != self.vocab_size:
            raise ValueError(
                f"{where}the tokenizer has {tokenizer.vocab_size} pieces but the model's "
                f"vocab_size is {self.vocab_size}; {remedy}"
            )
        if self.tokenizer_sha256 not in (None, tokenizer.sha256):
            raise ValueError(
                f"{where}the tokenizer is not the one the model was trained with (SHA-256 "
                f"{tokenizer.sha256[:12]}..., the model's config records "
                f"{self.tokenizer_sha256[:12]}...): another vocabulary of the same size "
                f"translates into nonsense; {remedy}"
            )


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


PRESETS = {
    # Table 3, "base" and "big".
    "base": dict(num_layers=6, d_model=512, num_heads=8, d_ff=2048, dropout=0.1),
    "big": dict(num_layers=6, d_model=1024, num_heads=16, d_ff=4096, dropout=0.3),
    # A model for CPUs (`make demo` trains it narrowed: demo.flags): Table 3's columns, then its
    # schedule and batches.
    "small": dict(num_layers=3, d_model=256, num_heads=4, d_ff=1024, dropout=0.1, warmup_steps=800)
    | dict(tokens_per_batch=3000, max_length=256),
    # Small enough for unit tests and CPU experiments (the same two parts).
    "tiny": dict(num_layers=2, d_model=64, num_heads=4, d_ff=256, dropout=0.1)
    | dict(warmup_steps=1000, tokens_per_batch=4096),
}
