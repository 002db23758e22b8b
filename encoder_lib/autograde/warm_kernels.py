"""Warm grading kernels: forked from a process that has already imported torch.

A cold grading kernel spends most of its life before the first graded line: starting Python,
then the setup cell importing torch, matplotlib, ipywidgets and encoder_lib (1.5 s of the 3 s a
PyTorch notebook takes to grade here). Every student pays the same imports again. So a **warm
source** (``python -m encoder_lib.autograde.warm_kernels SOCKET``) imports them once and then
waits; for each kernel it forks a child that becomes an ordinary IPython kernel on its own
connection file, with the environment and working folder the kernel was given. The setup cell's
imports are then already done, and everything the setup cell *does* (seeding, thread count,
warnings) it still does, in the child.

Why this is safe, and where it is not:

- **Fork before anything runs.** The source imports modules and never runs student code, a
  torch operation or an event loop: a process that has run a parallel torch operation leaves
  OpenMP's threads behind, and a forked child hangs at its first parallel operation
  (pytorch/pytorch#21956); a running asyncio loop cannot be forked (ipykernel's own attempt,
  ipykernel PR #410, was closed for that). The child starts its event loop after the fork.
- **Every kernel is a fresh process.** What student code does in one kernel (patching torch or
  encoder_lib, ``sys.modules``, builtins, the default dtype, RNG state, environment variables,
  threads) happens in that child's copy of the memory and dies with it. Each child is the leader
  of its own session and process group, so killing its group (as Jupyter does) never reaches the
  source or another kernel. The source reaps its children and tells each kernel's provisioner
  its exit status.
- **Not a sandbox.** The children share the file system with everything else, as cold kernels
  do (see docs/GRADING.md).
- **Stale code.** The source keeps the code it imported: after editing ``encoder_lib``, start a
  new grading command (each starts its own source).

A notebook that imports JAX (10) has its kernels forked from a second source, which has imported
JAX, Flax and optax as well (``PRELOAD_JAX``; asked for with ``WITH_JAX_VARIABLE``).

``WarmProvisioner`` is the jupyter_client kernel provisioner that uses it (entry point
``encoder-lab-warm`` in pyproject.toml). A kernel whose command is not this interpreter running
``ipykernel_launcher``, or a source that cannot be started or reached, is launched cold, exactly
as Jupyter's own ``LocalProvisioner`` does; the source is started again at the next kernel after
it died.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from encoder_lib.autograde import scratch

__all__ = [
    "PRELOAD",
    "PRELOAD_JAX",
    "WITH_JAX_VARIABLE",
    "WarmKernelManager",
    "WarmProvisioner",
    "serve",
    "start_source",
]

PRELOAD = (
    "math",
    "torch",
    "torch.nn.functional",
    "matplotlib",
    "matplotlib.pyplot",
    "ipywidgets",
    "IPython",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "encoder_lib",
    "encoder_lib.grading",
    "encoder_lib.pretraining",
    "encoder_lib.course",
)
"""What every notebook's setup cell imports (``SETUP_NAMES``), and the kernel itself; JAX is not
preloaded here (notebook 10 imports it: 113 MB that the other notebooks would carry for
nothing)."""

PRELOAD_JAX = ("jax", "jax.numpy", "flax.nnx", "optax")
"""What a notebook that imports JAX (10) also imports, in a warm source of its own: its kernels
are asked for with ``WITH_JAX_VARIABLE`` set to 1 in their environment (``JudgeExecute`` does,
for a notebook with a line importing JAX or Flax). Importing JAX starts nothing a fork breaks:
its runtime and its threads start at its first operation, in the kernel (JAX warns at a fork
only once its runtime has started). JAX reads a few ``JAX_*`` variables as it is imported: the
source's, which are the grading process's, as a cold kernel's would be."""

WITH_JAX_VARIABLE = "ENCODER_LAB_WARM_WITH_JAX"

_LAUNCHER = "ipykernel_launcher"
START_TIMEOUT = 120.0
"""Seconds the source may take to import ``PRELOAD`` (a cold disk on a busy machine)."""
_READY = b"ready\n"


# --- the source: imports once, forks one child per kernel ----------------------------------------


def serve(path: str, with_jax: bool = False) -> None:
    """Import ``PRELOAD`` (and ``PRELOAD_JAX``), listen on the Unix socket ``path``, fork a kernel
    per request."""
    import importlib

    parent = os.getppid()
    # As ipykernel_launcher does: the folder it started in is not on sys.path (IPython adds
    # what it adds when each kernel starts).
    if sys.path and Path(sys.path[0] or ".").resolve() == Path.cwd().resolve():
        del sys.path[0]
    # matplotlib reads MPLBACKEND when it is imported: each child tells it the kernel's backend
    # (see _become_kernel).
    os.environ.pop("MPLBACKEND", None)
    for name in (*PRELOAD, *PRELOAD_JAX) if with_jax else PRELOAD:
        importlib.import_module(name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    sys.stdout.buffer.write(_READY)
    sys.stdout.flush()
    # Nobody reads the pipe after this line: the source's and its kernels' fd 1 go where fd 2 goes
    # (a kernel writing to a full pipe would block).
    os.dup2(2, 1)

    waiting: dict[int, socket.socket] = {}  # child pid -> the provisioner that launched it
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while os.getppid() == parent:  # the process that started it ended: so does the source
        for _key, _ in selector.select(timeout=0.05):
            conn, _ = listener.accept()
            pid = _fork_kernel(conn, (listener, selector, *waiting.values()))
            if pid is not None:
                waiting[pid] = conn
        _reap(waiting)


def _fork_kernel(conn: socket.socket, inherited: tuple) -> int | None:
    """Read one request (a JSON line: argv, env, cwd), fork its kernel, answer with its pid."""
    try:
        conn.settimeout(10)
        request = json.loads(conn.makefile("rb").readline())
        argv, env, cwd = request["argv"], request["env"], request["cwd"]
    except (OSError, ValueError, KeyError, TypeError):
        conn.close()
        return None
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            for held in (*inherited, conn):
                held.close()
            _become_kernel(argv, env, cwd)
        finally:
            os._exit(1)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return pid


def _become_kernel(argv: list[str], env: dict[str, str], cwd: str) -> None:
    """In the forked child: take the kernel's session, folder and environment, then run it."""
    os.setsid()  # its own process group: Jupyter's killpg reaches this kernel and its children
    for signum in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    with open(os.devnull, "rb") as null:
        os.dup2(null.fileno(), 0)
    # Python's `random` draws a new seed in a forked child by itself; torch's and NumPy's global
    # generators would be the source's in every kernel: a cold kernel seeds them from the OS, so
    # this one does (the setup cell then seeds torch with 0, in both).
    import torch

    torch.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    import importlib.util

    sys.argv = [importlib.util.find_spec(_LAUNCHER).origin, *argv]  # as the launcher's
    from ipykernel.kernelapp import IPKernelApp

    # Trait defaults read from the environment were read when the source imported ipykernel:
    # the parent to watch (the grading process, as for a cold kernel) is given here.
    app = IPKernelApp.instance(parent_handle=int(env.get("JPY_PARENT_PID") or 0))
    app.initialize(argv)
    # ipykernel chose matplotlib's backend through MPLBACKEND while it initialised (the inline
    # one, unless the environment names another); matplotlib, imported by the source, read that
    # variable before it was set, so it is told here, before any of the student's code runs.
    import matplotlib

    matplotlib.rcParams["backend"] = os.environ["MPLBACKEND"]
    app.start()
    os._exit(0)


def _reap(waiting: dict[int, socket.socket]) -> None:
    """Collect the children that ended and tell each one's provisioner how it ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
            conn.close()


# --- the grading process's side -----------------------------------------------------------------


class _Source:
    """A warm source this process started (one of each kind per process, the kind with JAX only
    when a notebook that imports it is graded; started again if it died)."""

    def __init__(self, with_jax: bool = False) -> None:
        # The folder holds the socket; one that a killed grading process left behind is
        # removed by the next source on the machine.
        self.folder = scratch.make("encoder-lab-warm", Path(tempfile.gettempdir()))
        self.path = str(self.folder / "source.sock")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "encoder_lib.autograde.warm_kernels",
                self.path,
                *(["--jax"] if with_jax else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            cwd=self.folder,
        )
        # "ready" comes after the imports: about 2 s on a quiet machine
        ready = b""
        if select.select([self.process.stdout], [], [], START_TIMEOUT)[0]:
            ready = self.process.stdout.readline()
        self.process.stdout.close()
        if ready != _READY:
            self.process.kill()
            raise OSError(f"the warm kernel source did not start (said {ready!r})")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            self.folder.rmdir()

    def fork(self, argv: list[str], env: dict[str, str], cwd: str) -> _ForkedKernel:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(30)
        conn.connect(self.path)
        conn.sendall(json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode() + b"\n")
        kernel = _ForkedKernel(conn)
        while kernel.pid is None:
            if not kernel.receive(block=True):
                conn.close()
                raise OSError("the warm kernel source closed the connection")
        return kernel


_LOCK = threading.Lock()
_SOURCE: dict[bool, _Source] = {}
"""This process's sources, by whether they import JAX."""


def _source(with_jax: bool = False) -> _Source:
    with _LOCK:
        if with_jax in _SOURCE and not _SOURCE[with_jax].alive():
            _SOURCE.pop(with_jax).stop()
        if with_jax not in _SOURCE:
            _SOURCE[with_jax] = _Source(with_jax)
            atexit.register(_SOURCE[with_jax].stop)
        return _SOURCE[with_jax]


def start_source(with_jax: bool = False) -> None:
    """Start this process's warm source now (the one that also imports JAX, with ``with_jax``),
    if it is not running (the first warm kernel would start it): a grading worker can pay for
    its imports before the clock starts."""
    _source(with_jax)


class _ForkedKernel:
    """What Jupyter's provisioner expects of a ``Popen``, for a kernel the source forked: its
    pid, then its exit status, arrive as JSON lines on the connection that asked for it."""

    stdin = stdout = stderr = None

    def __init__(self, conn: socket.socket) -> None:
        self.pid: int | None = None
        self.returncode: int | None = None
        self._conn, self._buffer, self._open = conn, b"", True

    def receive(self, block: bool = False) -> bool:
        """Read what the source sent (without waiting unless ``block``); False at its end."""
        if not self._open:
            return False
        if not block and not select.select([self._conn], [], [], 0)[0]:
            return True
        try:
            data = self._conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._open = False
            self._conn.close()
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            self.pid = message.get("pid", self.pid)
            if "exit" in message:
                self.returncode = message["exit"]
        return self._open

    def poll(self) -> int | None:
        open_ = self.returncode is not None or self.receive()
        if self.returncode is None and not open_ and not psutil.pid_exists(self.pid):
            self.returncode = -signal.SIGKILL  # the source died before telling
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _warm_argv(cmd: list[str]) -> list[str] | None:
    """The kernel's own arguments when ``cmd`` is this interpreter running ipykernel_launcher."""
    if len(cmd) < 3 or cmd[1:3] != ["-m", _LAUNCHER]:
        return None
    if os.path.realpath(cmd[0]) != os.path.realpath(sys.executable):
        return None
    return cmd[3:]


class WarmProvisioner(LocalProvisioner):
    """Jupyter's ``LocalProvisioner``, except that a python kernel is forked from the warm
    source instead of started cold. Other tools select it by its entry point (for example
    ``JUPYTER_DEFAULT_PROVISIONER_NAME=encoder-lab-warm``); grading uses ``WarmKernelManager``."""

    warm: bool = False
    """Whether this kernel came from the warm source (False: launched cold)."""

    async def launch_kernel(self, cmd: list[str], **kwargs: Any):
        argv = _warm_argv(cmd)
        if argv is not None:
            env = dict(kwargs.get("env") or os.environ)
            env.setdefault("JPY_PARENT_PID", str(os.getpid()))  # as jupyter_client's launcher
            cwd = str(kwargs.get("cwd") or os.getcwd())
            try:
                forked = _source(env.get(WITH_JAX_VARIABLE) == "1").fork(argv, env, cwd)
            except (OSError, ValueError, KeyError) as problem:
                self.log.warning(
                    "warm kernel source unavailable (%s): starting a cold kernel", problem
                )
            else:
                self.process, self.pid, self.pgid = forked, forked.pid, forked.pid
                self.cwd, self.warm = cwd, True
                return self.connection_info
        return await super().launch_kernel(cmd, **kwargs)


class WarmKernelManager(AsyncKernelManager):
    """nbclient's kernel manager with ``WarmProvisioner`` chosen directly (not through the
    entry point, which a stale ``*.egg-info`` folder in the working directory can hide):
    ``JudgeExecute`` uses it when its ``kernels`` setting is ``"warm"``."""

    async def _async_pre_start_kernel(self, **kw: Any):
        self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
        if self.provisioner is None:
            self.provisioner = WarmProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
        return await super()._async_pre_start_kernel(**kw)


if __name__ == "__main__":
    serve(sys.argv[1], with_jax="--jax" in sys.argv[2:])
