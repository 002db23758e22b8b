"""Warm grading kernels (encoder_lib/autograde/warm_kernels.py): forked from a source that has
imported torch, they must be indistinguishable from cold ones to the notebook, and nothing one
kernel does may reach the next or stop the source.

Every test starts real kernels through jupyter_client, as nbgrader's Execute does: cold ones with
``AsyncKernelManager`` and warm ones with ``WarmKernelManager`` (what nbgrader_config.py names).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.manager import AsyncKernelManager

from encoder_lib.autograde import warm_kernels as W

# What a notebook's kernel looks like after the setup cell, as one JSON line.
STATE = """
import json, os, sys, random, threading
import numpy, matplotlib, torch
from encoder_lib.course import setup_notebook
setup_notebook()
print(json.dumps({
    "rand": torch.rand(3).tolist(),
    "threads": torch.get_num_threads(),
    "dtype": str(torch.get_default_dtype()),
    "backend": matplotlib.get_backend(),
    "path": sys.path,
    "argv0": os.path.basename(sys.argv[0]),
    "cwd": os.getcwd(),
    "own_group": os.getpgid(0) == os.getpid(),
    "parent_polled": bool(get_ipython().kernel.parent.parent_handle),
    "env": sorted(k for k in os.environ if not k.startswith("JPY_")),
}))
"""


async def _run(
    manager_class, cwd: Path, *cells: str, env: dict[str, str] | None = None
) -> tuple[list[str], object]:
    """Start a kernel of ``manager_class`` in ``cwd`` (with ``env`` added to this process's
    environment), run ``cells``; (each cell's stdout or error, the kernel manager)."""
    km = manager_class(kernel_name="python3")
    await km.start_kernel(cwd=str(cwd), **({"env": {**os.environ, **env}} if env else {}))
    kc = km.client()
    kc.start_channels()
    outputs = []
    try:
        await kc.wait_for_ready(timeout=120)
        for code in cells:
            out: list[str] = []

            def hook(msg, out=out):
                content = msg["content"]
                if msg["msg_type"] == "stream":
                    out.append(content["text"])
                elif msg["msg_type"] == "error":
                    out.append(f"{content['ename']}: {content['evalue']}")

            await kc.execute_interactive(code, output_hook=hook, timeout=120)
            outputs.append("".join(out))
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    return outputs, km


TEXT = {"capture_output": True, "text": True, "check": True}


def run(manager_class, cwd: Path, *cells: str) -> list[str]:
    return asyncio.run(_run(manager_class, cwd, *cells))[0]


def test_a_warm_kernel_is_a_cold_kernel_after_the_setup_cell(tmp_path):
    cold = json.loads(run(AsyncKernelManager, tmp_path, STATE)[0].splitlines()[-1])
    warm_out, km = asyncio.run(_run(W.WarmKernelManager, tmp_path, STATE))
    assert km.provisioner is not None and km.provisioner.warm, "the kernel was not forked"
    warm = json.loads(warm_out[0].splitlines()[-1])
    assert warm == cold
    assert warm["cwd"] == str(tmp_path) and warm["own_group"]
    assert warm["parent_polled"]  # it exits if the grading process dies, as a cold one


def test_the_setup_cell_s_imports_are_done_in_a_warm_kernel(tmp_path):
    (out,) = run(
        W.WarmKernelManager,
        tmp_path,
        "import sys; setup = {'torch', 'encoder_lib.grading', 'ipywidgets'}\n"
        "print(sorted(setup - set(sys.modules)), 'jax' in sys.modules)",
    )
    assert out.strip() == "[] False"


# What a student's code can do to its kernel; the next kernel must see none of it.
TAMPER = """
import builtins, os, sys, random, threading, time, types
import numpy, torch, torch.nn.functional as F, encoder_lib
torch.softmax = lambda *a, **k: "patched"
F.softmax = lambda *a, **k: "patched"
encoder_lib.scaled_dot_product_attention = None
sys.modules["encoder_lib.grading"] = types.ModuleType("fake")
builtins.round = lambda *a: 42
builtins.TAMPERED = True
torch.set_default_dtype(torch.float64)
torch.manual_seed(123); random.seed(123); numpy.random.seed(123)
torch.set_num_threads(1)
os.environ["TAMPERED"] = "1"
open("left-behind.txt", "w").write("mine")
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
print("tampered")
"""
CHECK = """
import builtins, os, sys, random, threading
import numpy, torch, torch.nn.functional as F, encoder_lib, encoder_lib.grading
print(
    torch.softmax(torch.zeros(2), 0).tolist(), F.softmax(torch.zeros(2), 0).tolist(),
    encoder_lib.scaled_dot_product_attention is not None,
    type(sys.modules["encoder_lib.grading"].__dict__.get("check_layer_norm")).__name__,
    round(1.0), hasattr(builtins, "TAMPERED"), torch.get_default_dtype(), "TAMPERED" in os.environ,
    os.path.exists("left-behind.txt"), threading.active_count() < 20,
)
print(numpy.random.rand(), torch.initial_seed())
"""


def test_what_one_kernel_does_never_reaches_the_next(tmp_path):
    first, second, cold = (tmp_path / name for name in ("first", "second", "cold"))
    for folder in (first, second, cold):
        folder.mkdir()
    assert run(W.WarmKernelManager, first, TAMPER) == ["tampered\n"]
    (after,) = run(W.WarmKernelManager, second, CHECK)
    clean, state = after.splitlines()
    assert clean == "[0.5, 0.5] [0.5, 0.5] True function 1 False torch.float32 False False True"
    (cold_after,) = run(AsyncKernelManager, cold, CHECK)
    assert cold_after.splitlines()[0] == clean
    # torch's and NumPy's global generators are seeded from the OS in each kernel, as in a cold
    # one (not the source's state copied into every kernel)
    states = [state] + [run(W.WarmKernelManager, second, CHECK)[0].splitlines()[1] for _ in "ab"]
    numpy_draws, torch_seeds = zip(*(line.split() for line in states), strict=True)
    assert len(set(numpy_draws)) == 3 and len(set(torch_seeds)) == 3, states


def test_killing_its_own_group_or_forking_stops_only_that_kernel(tmp_path):
    km_outputs, km = asyncio.run(
        _run(
            W.WarmKernelManager,
            tmp_path,
            "import os\npid = os.fork()\nif pid == 0:\n    os._exit(7)\n"
            "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
        )
    )
    assert km_outputs == ["7\n"]
    source = W._source()
    km = W.WarmKernelManager(kernel_name="python3")

    async def suicide():
        await km.start_kernel(cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=120)
        kc.execute("import os, signal; os.killpg(0, signal.SIGKILL)")
        for _ in range(200):
            if not await km.is_alive():
                break
            await asyncio.sleep(0.05)
        alive = await km.is_alive()
        code = await km.provisioner.poll()
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        return alive, code

    alive, code = asyncio.run(suicide())
    assert not alive and code == -signal.SIGKILL
    assert source.alive() and W._source() is source
    assert run(W.WarmKernelManager, tmp_path, "print(1 + 1)") == ["2\n"]


def test_a_dead_source_is_started_again(tmp_path):
    run(W.WarmKernelManager, tmp_path, "pass")
    old = W._source()
    old.process.kill()
    old.process.wait()
    outputs, km = asyncio.run(_run(W.WarmKernelManager, tmp_path, "print('again')"))
    assert outputs == ["again\n"] and km.provisioner.warm
    assert W._source() is not old and W._source().alive()


def test_a_killed_grading_process_s_folder_is_removed_by_the_next_source(tmp_path, monkeypatch):
    """Each source's socket lives in a folder named after the process that started it; one whose
    process is gone (a Dask worker killed) is removed when the next source starts."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], **TEXT)
    stale = tmp_path / f"encoder-lab-warm-{ended.stdout.strip()}-x1"
    stale.mkdir()
    (stale / "source.sock").touch()
    alive = tmp_path / f"encoder-lab-warm-{os.getpid()}-x2"
    alive.mkdir()
    source = W._Source()
    try:
        assert not stale.exists() and alive.is_dir()
        assert source.folder.parent == tmp_path
        assert source.folder.name.startswith(f"encoder-lab-warm-{os.getpid()}-")
    finally:
        source.stop()
    assert not source.folder.exists()


def test_a_worker_starts_its_source_before_grading_when_asked():
    from encoder_lib.autograde import tasks

    with W._LOCK:
        for source in W._SOURCE.values():
            source.stop()
        W._SOURCE.clear()
    tasks.warm_up()
    assert not W._SOURCE  # cold kernels need no source
    tasks.warm_up(warm_kernels=True)
    assert list(W._SOURCE) == [False] and W._SOURCE[False].alive()  # no JAX source yet
    tasks.warm_up(warm_kernels=True, with_jax=True)
    assert sorted(W._SOURCE) == [False, True] and W._SOURCE[True].alive()


JAX_STATE = (
    "import sys, json\n"
    "preloaded = 'flax.nnx' in sys.modules\n"
    "import jax.numpy as jnp\n"
    "print(json.dumps([preloaded, float(jnp.arange(4.0).sum())]))\n"
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_kernel_for_a_jax_notebook_comes_from_the_source_that_imported_jax(tmp_path):
    """Asked for with ``WITH_JAX_VARIABLE`` (as ``JudgeExecute`` asks for notebook 10's), a warm
    kernel finds JAX and Flax imported and runs JAX; the source that imported them started no
    JAX runtime (its threads: the main one and torch's), and the other kernels still come from
    the source without JAX."""
    pytest.importorskip("flax.nnx")
    outputs, km = asyncio.run(
        _run(W.WarmKernelManager, tmp_path, JAX_STATE, env={W.WITH_JAX_VARIABLE: "1"})
    )
    assert km.provisioner.warm and json.loads(outputs[0]) == [True, 6.0], outputs
    source = W._source(with_jax=True)
    assert len(os.listdir(f"/proc/{source.process.pid}/task")) <= 2
    plain, _ = asyncio.run(_run(W.WarmKernelManager, tmp_path, JAX_STATE))
    assert json.loads(plain[0]) == [False, 6.0]


def test_without_a_source_the_kernel_starts_cold(tmp_path, monkeypatch):
    def broken(with_jax=False):
        raise OSError("the warm kernel source did not start (said b'')")

    monkeypatch.setattr(W, "_source", broken)
    outputs, km = asyncio.run(_run(W.WarmKernelManager, tmp_path, "print('cold')"))
    assert outputs == ["cold\n"] and not km.provisioner.warm


def test_another_interpreter_starts_cold(tmp_path):
    assert W._warm_argv(["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "c.json"]) in (
        None,
        ["-f", "c.json"],  # only if /usr/bin/python3 is this interpreter
    )
    assert W._warm_argv([os.sys.executable, "-m", "ipykernel_launcher", "-f", "c.json"]) == [
        "-f",
        "c.json",
    ]
    assert W._warm_argv([os.sys.executable, "-m", "other_kernel", "-f", "c.json"]) is None


def test_an_interrupt_reaches_a_warm_kernel(tmp_path):
    async def interrupted():
        km = W.WarmKernelManager(kernel_name="python3")
        await km.start_kernel(cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=120)
        out: list[str] = []

        def hook(msg):
            if msg["msg_type"] == "error":
                out.append(msg["content"]["ename"])

        task = asyncio.ensure_future(
            kc.execute_interactive("import time; time.sleep(60)", output_hook=hook, timeout=90)
        )
        await asyncio.sleep(1.5)
        await km.interrupt_kernel()
        await asyncio.wait_for(task, 30)
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        return out

    assert asyncio.run(interrupted()) == ["KeyboardInterrupt"]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_the_source_ran_no_torch_operation_and_no_event_loop():
    """What makes forking safe: the source only imported (a parallel torch operation leaves
    OpenMP threads a forked child would hang on; a running event loop cannot be forked)."""
    source = W._source()
    threads = len(os.listdir(f"/proc/{source.process.pid}/task"))
    status = Path(f"/proc/{source.process.pid}/status").read_text()
    assert threads <= 2, status  # the main thread and the one importing torch starts


def test_the_source_ends_with_the_process_that_started_it():
    code = (
        "from encoder_lib.autograde import warm_kernels as W\n"
        "import os\nprint(W._source().process.pid, flush=True)\nos._exit(0)\n"  # no atexit
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    pid = int(proc.stdout.split()[0])
    for _ in range(100):
        if not psutil.pid_exists(pid):
            break
        time.sleep(0.05)
    assert not psutil.pid_exists(pid), "the warm source outlived the process that started it"


def test_the_course_grades_with_the_kernels_its_config_names():
    """nbgrader's Execute fixes its kernel manager class in its constructor (config cannot change
    it): JudgeExecute's ``kernels`` setting chooses; warm in the course's nbgrader_config.py and
    by default, cold one setting away."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets.config.loader import KVArgParseConfigLoader, PyFileConfigLoader

    from encoder_lib.autograde.judge_execute import JudgeExecute

    root = Path(__file__).resolve().parents[2]
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    preprocessors = config.Autograde.autograde_preprocessors
    assert "encoder_lib.autograde.judge_execute.JudgeExecute" in preprocessors
    assert JudgeExecute(config=config).kernel_manager_class is W.WarmKernelManager
    assert JudgeExecute().kernel_manager_class is W.WarmKernelManager
    config.merge(KVArgParseConfigLoader(["--JudgeExecute.kernels=cold"]).load_config())
    assert JudgeExecute(config=config).kernel_manager_class is AsyncKernelManager
