"""Notebook 10's kernels keep the programs JAX compiles on disk (``encoder_lib.course``).

The cache is decided at a process's first compilation, and this test process has compiled long
before a test runs: each case runs in a fresh interpreter, as a kernel would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

from encoder_lib.course import JAX_CACHE_VARIABLE, jax_cache_dir

# What a kernel does: the setup cell's imports, setup_notebook, then eager JAX of a few shapes
# (each shape is a new program). It prints what JAX's own counters saw and the results' bytes.
KERNEL = """
import json, os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp
from flax import nnx
from encoder_lib.course import setup_notebook
counts = {"hits": 0, "misses": 0}
def listen(event, **kwargs):
    for name in counts:
        if event == "/jax/compilation_cache/cache_" + name:
            counts[name] += 1
jax.monitoring.register_event_listener(listen)
setup_notebook()
x = jnp.arange(12.0).reshape(3, 4)
layer = nnx.Linear(4, 5, rngs=nnx.Rngs(0))
out = jax.nn.softmax(layer(x) / 3.0, axis=-1) + jnp.tanh(x).sum()
cache = jax.config.jax_compilation_cache_dir
print(json.dumps({**counts, "cache": cache, "out": out.tolist()}))
"""


def _kernel(env: dict[str, str]) -> dict:
    full = {
        k: v
        for k, v in os.environ.items()
        if k not in (JAX_CACHE_VARIABLE, "JAX_COMPILATION_CACHE_DIR")
    }
    proc = subprocess.run(
        [sys.executable, "-c", KERNEL],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


def test_the_second_kernel_loads_what_the_first_compiled(tmp_path):
    folder = tmp_path / "jax"
    first = _kernel({JAX_CACHE_VARIABLE: str(folder)})
    assert first["cache"] == str(folder)
    assert first["misses"] > 5 and first["hits"] == 0, first
    written = list(folder.glob("*-cache"))
    assert len(written) == first["misses"], sorted(p.name for p in written)

    second = _kernel({JAX_CACHE_VARIABLE: str(folder)})
    assert second["misses"] == 0 and second["hits"] == first["misses"], second
    assert second["out"] == first["out"]  # the same programs: the same floats, bit for bit
    assert sorted(folder.glob("*-cache")) == sorted(written)


def test_a_broken_entry_is_compiled_again_without_a_word(tmp_path):
    """An entry another kernel is still writing (or one a killed kernel left half-written) reads
    as garbage: JAX compiles the program itself, and its warning does not reach the student."""
    folder = tmp_path / "jax"
    first = _kernel({JAX_CACHE_VARIABLE: str(folder)})
    for entry in folder.glob("*-cache"):
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    second = _kernel({JAX_CACHE_VARIABLE: str(folder)})
    assert second["hits"] == 0 and second["out"] == first["out"], second
    assert second["stderr"] == "", second["stderr"]


def test_an_empty_variable_turns_the_cache_off(tmp_path):
    out = _kernel({JAX_CACHE_VARIABLE: "", "XDG_CACHE_HOME": str(tmp_path)})
    assert out["cache"] is None and out["hits"] == out["misses"] == 0
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_cannot_be_made_means_no_cache_and_no_message(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = _kernel({JAX_CACHE_VARIABLE: str(blocker / "jax")})
    assert out["cache"] is None and out["misses"] == 0


def test_where_the_cache_lives(monkeypatch, tmp_path):
    for name in (JAX_CACHE_VARIABLE, "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert jax_cache_dir() == str(tmp_path / ".cache" / "encoder_lab" / "jax")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jax_cache_dir() == str(tmp_path / "xdg" / "encoder_lab" / "jax")
    monkeypatch.setenv(JAX_CACHE_VARIABLE, str(tmp_path / "mine"))
    assert jax_cache_dir() == str(tmp_path / "mine")
    monkeypatch.setenv(JAX_CACHE_VARIABLE, "")
    assert jax_cache_dir() is None
    # JAX's own setting wins: the course leaves it alone
    monkeypatch.setenv(JAX_CACHE_VARIABLE, str(tmp_path / "mine"))
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "theirs"))
    assert jax_cache_dir() is None


def test_notebooks_without_jax_never_import_it(tmp_path):
    code = (
        "import sys\nfrom encoder_lib.course import setup_notebook\nsetup_notebook()\n"
        "print('jax' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, JAX_CACHE_VARIABLE: str(tmp_path / "jax")},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"
    assert not Path(tmp_path / "jax").exists()
