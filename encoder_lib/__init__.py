"""encoder_lib: the Transformer Encoder Lab's reference implementation.

Conventions used throughout: batch-first tensors ``(B, L, D)``; boolean masks with
True = may attend; attention returns ``(output, weights_or_None)``; parameter names match
PyTorch's own modules, and every module converts both ways with ``from_torch``/``to_torch``.
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .decoder import DecoderLayer, TransformerDecoder
from .embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from .encoder import EncoderLayer, TransformerEncoder
from .feed_forward import FeedForward
from .gated_feed_forward import GatedFeedForward, feed_forward_parameter_counts, gated_d_ff
from .layer_norm import LayerNorm
from .masks import causal_mask, padding_mask, sliding_window_mask
from .minilm import (
    BertConfig,
    BertEmbeddings,
    BertEncoder,
    contrastive_loss,
    load_minilm,
    mean_pool,
    sentence_embedding,
)
from .mlm import IGNORE_INDEX, MaskedLanguageModel, fill_mask, mask_tokens, mlm_loss
from .model import EncoderConfig, SentenceEncoder
from .modern_encoder import (
    ModernEncoder,
    ModernEncoderLayer,
    ModernSelfAttention,
    grouped_query_attention,
)
from .order_task import OrderTask, make_order_task, order_sentiment
from .review_language import ReviewLanguage, make_review_language
from .rms_norm import RMSNorm, rms_norm
from .rotary import RotaryEmbedding, apply_rotary, rotary_angles
from .text import Vocabulary, load_corpus, tokenize
from .wordpiece import WordPieceTokenizer, wordpiece

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "LayerNorm",
    "FeedForward",
    "TokenEmbedding",
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "EncoderLayer",
    "TransformerEncoder",
    "DecoderLayer",
    "TransformerDecoder",
    "padding_mask",
    "causal_mask",
    "tokenize",
    "Vocabulary",
    "load_corpus",
    "EncoderConfig",
    "SentenceEncoder",
    "OrderTask",
    "make_order_task",
    "order_sentiment",
    "IGNORE_INDEX",
    "mask_tokens",
    "MaskedLanguageModel",
    "mlm_loss",
    "fill_mask",
    "ReviewLanguage",
    "make_review_language",
    "rms_norm",
    "RMSNorm",
    "GatedFeedForward",
    "gated_d_ff",
    "feed_forward_parameter_counts",
    "rotary_angles",
    "apply_rotary",
    "RotaryEmbedding",
    "sliding_window_mask",
    "grouped_query_attention",
    "ModernSelfAttention",
    "ModernEncoderLayer",
    "ModernEncoder",
    "wordpiece",
    "WordPieceTokenizer",
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "load_minilm",
    "mean_pool",
    "sentence_embedding",
    "contrastive_loss",
]

__version__ = "0.1.0"
