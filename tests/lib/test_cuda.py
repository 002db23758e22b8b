"""The library on a CUDA device: every module moved with ``.to("cuda")`` computes what it computes
on the CPU (forward and gradients), the masks follow their inputs' device, and the layers still
match PyTorch's own modules there.

Skipped where no CUDA device exists (CI has none); a session lent a GPU runs
``python -m pytest tests/lib`` there. Tolerances: float32, with TF32 switched off so that a
matrix product on the GPU rounds like the CPU's (PyTorch's default for matmul, set explicitly).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import encoder_lib as el

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")
TOL = {"atol": 2e-5, "rtol": 2e-5}
B, L, D, H = 2, 7, 16, 4


@pytest.fixture(autouse=True)
def _no_tf32():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def _keys_mask() -> torch.Tensor:
    """(B, L) padding mask, True = may attend: the second sequence's last two keys are padding."""
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, -2:] = False
    return mask


# name -> (module factory, inputs factory); every input is moved with the module.
MODULES = {
    "MultiHeadAttention": (
        lambda: el.MultiHeadAttention(D, H, dropout=0.0),
        lambda: (_x(B, L, D), _x(B, L, D) * 0.5, _x(B, L, D) + 1, _keys_mask()[:, None, None, :]),
    ),
    "LayerNorm": (lambda: el.LayerNorm(D), lambda: (_x(B, L, D) * 3 + 1,)),
    "RMSNorm": (lambda: el.RMSNorm(D), lambda: (_x(B, L, D) * 3 + 1,)),
    "FeedForward": (lambda: el.FeedForward(D, 32, dropout=0.0), lambda: (_x(B, L, D),)),
    "GatedFeedForward": (lambda: el.GatedFeedForward(D), lambda: (_x(B, L, D),)),
    "EncoderLayer": (
        lambda: el.EncoderLayer(D, H, d_ff=32, dropout=0.0),
        lambda: (_x(B, L, D), _keys_mask()[:, None, None, :]),
    ),
    "EncoderLayer(norm_first)": (
        lambda: el.EncoderLayer(D, H, d_ff=32, dropout=0.0, norm_first=True),
        lambda: (_x(B, L, D),),
    ),
    "TransformerEncoder": (
        lambda: el.TransformerEncoder(el.EncoderLayer(D, H, d_ff=32, dropout=0.0), 2),
        lambda: (_x(B, L, D),),
    ),
    "DecoderLayer": (
        lambda: el.DecoderLayer(D, H, d_ff=32, dropout=0.0),
        lambda: (_x(B, L, D), _x(B, 5, D), el.causal_mask(L)),
    ),
    "ModernEncoder": (
        lambda: el.ModernEncoder(D, H, num_layers=3, global_every=3, window=4, num_kv_heads=2),
        lambda: (_x(B, L, D), _keys_mask()[:, None, None, :]),
    ),
    "MaskedLanguageModel": (
        lambda: el.MaskedLanguageModel(vocab_size=20, max_len=L, d_model=D, num_heads=H),
        lambda: (torch.randint(1, 20, (B, L), generator=torch.Generator().manual_seed(2)),),
    ),
}


def _output(result):
    return result[0] if isinstance(result, tuple) else result


@pytest.mark.parametrize("name", MODULES)
def test_module_on_cuda_computes_what_it_computes_on_cpu(name):
    make, inputs = MODULES[name]
    torch.manual_seed(0)
    cpu = make().eval()
    gpu = copy.deepcopy(cpu).to(CUDA)
    args = inputs()
    out_cpu = _output(cpu(*args))
    out_gpu = _output(gpu(*(a.to(CUDA) for a in args)))
    assert out_gpu.device.type == "cuda"
    assert all(t.device.type == "cuda" for t in [*gpu.parameters(), *gpu.buffers()])
    assert_close(out_gpu.cpu(), out_cpu, **TOL)
    # gradients of every parameter agree too
    weights = _x(*out_cpu.shape)
    (out_cpu * weights).sum().backward()
    (out_gpu * weights.to(CUDA)).sum().backward()
    for (pname, p_cpu), p_gpu in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
        if p_cpu.grad is None:
            assert p_gpu.grad is None, pname
        else:
            assert_close(p_gpu.grad.cpu(), p_cpu.grad, **TOL, msg=f"{name}: grad of {pname}")


def test_layers_match_pytorch_on_cuda():
    """The reference's claim, on the GPU: encoder and decoder layers agree with
    nn.TransformerEncoderLayer / nn.TransformerDecoderLayer given the same weights."""
    torch.manual_seed(0)
    ours = el.EncoderLayer(D, H, d_ff=32, dropout=0.0).to(CUDA).eval()
    theirs = ours.to_torch().to(CUDA).eval()
    x = _x(B, L, D).to(CUDA)
    keep = _keys_mask().to(CUDA)
    assert_close(ours(x, keep[:, None, None, :]), theirs(x, src_key_padding_mask=~keep), **TOL)

    dec = el.DecoderLayer(D, H, d_ff=32, dropout=0.0).to(CUDA).eval()
    ref = dec.to_torch().to(CUDA).eval()
    memory = _x(B, 5, D).to(CUDA)
    causal = el.causal_mask(L, device=CUDA)
    expected = ref(x, memory, tgt_mask=~causal)
    assert_close(dec(x, memory, tgt_mask=causal), expected, **TOL)

    attn = el.MultiHeadAttention(D, H).to(CUDA).eval()
    torch_attn = attn.to_torch().to(CUDA).eval()
    out, weights = attn(x, x, x)
    ref_out, ref_weights = torch_attn(x, x, x, average_attn_weights=False)
    assert_close(out, ref_out, **TOL)
    assert_close(weights, ref_weights, **TOL)
    norm = el.LayerNorm(D).to(CUDA)
    assert_close(norm(x), nn.functional.layer_norm(x, (D,), norm.weight, norm.bias), **TOL)


def test_masks_and_rotary_follow_the_device():
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]], device=CUDA)
    assert el.padding_mask(ids, pad_id=0).device.type == "cuda"
    assert el.causal_mask(4, device=CUDA).device.type == "cuda"
    band = el.sliding_window_mask(6, 2, device=CUDA)
    assert band.device.type == "cuda"
    assert torch.equal(band.cpu(), el.sliding_window_mask(6, 2))
    rope = el.RotaryEmbedding(8).to(CUDA)
    q, k = _x(B, H, L, 8).to(CUDA), _x(B, H, L, 8).to(CUDA)
    q_rot, k_rot = rope(q, k)
    q_cpu, k_cpu = el.RotaryEmbedding(8)(q.cpu(), k.cpu())
    assert q_rot.device.type == "cuda"
    assert_close(q_rot.cpu(), q_cpu, **TOL)
    assert_close(k_rot.cpu(), k_cpu, **TOL)


def test_mlm_corruption_and_fill_mask_on_cuda():
    """mask_tokens with a CUDA batch returns CUDA tensors, the input untouched, and the same seed
    corrupts it as it corrupts the batch on the CPU; fill_mask's answer stays on the logits'
    device."""
    ids_cpu = torch.randint(5, 30, (B, L), generator=torch.Generator().manual_seed(3))
    ids = ids_cpu.to(CUDA)
    before = ids.clone()

    def corrupt(batch):
        g = torch.Generator().manual_seed(4)
        return el.mask_tokens(batch, mask_id=1, first_word_id=5, vocab_size=30, p=0.5, generator=g)

    corrupted, labels = corrupt(ids)
    assert corrupted.device.type == labels.device.type == "cuda"
    assert torch.equal(ids, before)
    expected_corrupted, expected_labels = corrupt(ids_cpu)
    assert torch.equal(corrupted.cpu(), expected_corrupted)
    assert torch.equal(labels.cpu(), expected_labels)
    torch.manual_seed(5)  # the global generator too
    assert el.mask_tokens(ids, 1, 5, 30)[0].device.type == "cuda"
    logits = _x(B, L, 30).to(CUDA)
    top = el.fill_mask(logits, corrupted, mask_id=1, first_word_id=5, k=3)
    assert top.device.type == "cuda"
    assert torch.equal(top.cpu(), el.fill_mask(logits.cpu(), expected_corrupted, 1, 5, k=3))
