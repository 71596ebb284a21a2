"""Measure one run: wall time, peak RSS of the whole process tree, and RSS over time.

Two ways in, both run the work in a *separate process* so that one measurement never
inherits the memory of another (or of the harness):

* :func:`measure_command` runs an argv with ``subprocess`` (a CLI, a shell pipeline).
* :func:`measure_callable` runs a module-level Python function in a fresh interpreter
  (``python measure.py --child PAYLOAD``); its arguments and return value travel by
  pickle.  The function may return a dict with ``"seconds"`` -- the time of the phase it
  cares about, taken inside the process with ``time.perf_counter`` (so interpreter
  start-up and imports are left out); otherwise the call's own time is used.

While the child runs, a thread in this process samples every ``interval`` seconds (20 ms
by default) the ``VmRSS`` of the child and of all its descendants (found through the
parent pid in ``/proc/*/stat``; the tree is re-scanned every ``rescan_every`` samples to
keep the sampler cheap on a 2-core machine) and records their sum.  The peak of that sum
is ``tree_peak_rss``.  Each sample also reads ``VmHWM``, the kernel's own peak RSS of
the process (monotonic, so it catches spikes shorter than a sampling interval; exec resets
it); ``vm_hwm`` is the largest last-sampled VmHWM of any one process of the tree.
``peak_rss`` is the larger of ``tree_peak_rss`` and ``vm_hwm``.  The same samples split
RSS into ``RssAnon`` (heap, stacks: memory the process really holds) and ``RssFile`` +
``RssShmem`` (clean pages of mapped files, e.g. LMDB maps, which the kernel can drop at
will); ``tree_peak_anon`` and ``tree_peak_file`` are the peaks of their sums over the tree
(sampled only: there is no kernel high-water mark for them).

The ``getrusage`` cross-checks are recorded too, with a caveat: ``wait4`` gives the
child's ``ru_maxrss`` and ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` is read after
the run (a high-water mark over every child this harness has waited for), but Linux folds
the peak RSS of the address space a child had *before* its exec -- the harness's, shared
through fork/vfork -- into that figure, so it is never below the harness's own peak RSS
(recorded as ``harness_maxrss``).  The harness therefore keeps itself small (it streams
files instead of loading them), and ``ru_maxrss`` is only trusted when it is above that
floor.  Summing RSS over processes counts shared pages once per
process, so for multi-process trees (a fork pool) the sum is an upper bound; for those the
sampler also reads the summed ``Pss`` from ``/proc/PID/smaps_rollup`` every ~200 ms
(``tree_peak_pss``), which splits shared pages among the processes that map them.

Only the standard library is used (no psutil).  :func:`plot_rss` draws RSS-over-time
curves with matplotlib when it is importable and otherwise says it skipped the plot.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

MB = 1e6
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- /proc ---------------------------------------------------------------------------
def _ppid_of(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ..." -- comm may hold spaces and parentheses.
    try:
        return int(data[data.rindex(b")") + 2 :].split(None, 2)[1])
    except (ValueError, IndexError):
        return None


def process_tree(root: int) -> List[int]:
    """``root`` and all its live descendants, from the parent pids in ``/proc/*/stat``."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        ppid = _ppid_of(pid)
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def rss_of(pid: int) -> Tuple[int, int]:
    """``(VmRSS, VmHWM)`` of one process in bytes ((0, 0) when it is gone or a zombie).
    VmHWM is the peak RSS of the process's current address space (reset by exec)."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
                elif line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    return rss, hwm


def rss_parts(pid: int) -> Tuple[int, int, int, int]:
    """``(VmRSS, VmHWM, RssAnon, RssFile + RssShmem)`` of one process in bytes (zeros when
    it is gone or a zombie)."""
    rss = hwm = anon = file_ = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
                elif line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith(b"RssAnon:"):
                    anon = int(line.split()[1]) * 1024
                elif line.startswith(b"RssFile:"):
                    file_ += int(line.split()[1]) * 1024
                elif line.startswith(b"RssShmem:"):
                    file_ += int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    return rss, hwm, anon, file_


def pss_of(pid: int) -> int:
    """``Pss`` of one process in bytes, from ``/proc/PID/smaps_rollup`` (0 if unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def busy_cpu_seconds() -> float:
    """CPU seconds all cores of the machine have spent not idle since boot (``/proc/stat``)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


class RssSampler(threading.Thread):
    """Samples the summed RSS of ``pid``'s process tree until :meth:`stop`."""

    def __init__(self, pid: int, t0: float, interval: float = 0.02, rescan_every: int = 5, pss_every: int = 10):
        super().__init__(daemon=True)
        self.pid, self.t0, self.interval = pid, t0, interval
        self.rescan_every, self.pss_every = rescan_every, pss_every
        self.samples: List[Tuple[float, int]] = []
        self.parts: List[Tuple[float, int, int]] = []  # (seconds, anonymous, mapped files) at each sample
        self.peak = 0
        self.peak_anon = 0  # peak of the summed RssAnon
        self.peak_file = 0  # peak of the summed RssFile + RssShmem (mapped files)
        self.peak_pss = 0  # only sampled while the tree has more than one process
        self.hwm: Dict[int, int] = {}  # pid -> VmHWM at its last sample (the last one is after exec)
        self.max_processes = 1
        self._halt = threading.Event()

    def run(self) -> None:
        tree = [self.pid]
        n, last_pss = 0, -self.pss_every
        while not self._halt.is_set():
            if n % self.rescan_every == 0:
                tree = process_tree(self.pid)
                self.max_processes = max(self.max_processes, len(tree))
            # PSS shares pages among the processes that map them (fair for fork pools);
            # smaps_rollup costs milliseconds, so only for trees of several processes, rarely.
            if len(tree) > 1 and n - last_pss >= self.pss_every:
                last_pss = n
                self.peak_pss = max(self.peak_pss, sum(pss_of(p) for p in tree))
            n += 1
            total = anon = file_ = 0
            for p in tree:
                rss, hwm, a, f = rss_parts(p)
                total += rss
                anon += a
                file_ += f
                if hwm:
                    self.hwm[p] = hwm
            if total:
                t = time.perf_counter() - self.t0
                self.samples.append((t, total))
                self.parts.append((t, anon, file_))
                self.peak = max(self.peak, total)
                self.peak_anon = max(self.peak_anon, anon)
                self.peak_file = max(self.peak_file, file_)
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


# -- results -------------------------------------------------------------------------
@dataclass
class Measurement:
    label: str
    argv: List[str]
    returncode: int
    wall_s: float  # of the whole child process, start-up included
    seconds: float  # the phase time: wall_s for commands, the in-process time for callables
    cpu_s: float  # user + system CPU of the child and its waited-for descendants
    tree_peak_rss: int  # bytes, the peak of the sampled sum over the process tree
    vm_hwm: int  # bytes, the largest VmHWM (kernel's peak RSS) of any one process of the tree, as last sampled
    ru_maxrss: int  # bytes, wait4's ru_maxrss of the child (see the module docstring for its caveat)
    rusage_children_maxrss: int  # bytes, getrusage(RUSAGE_CHILDREN) high-water mark after the run
    samples: List[Tuple[float, int]] = field(default_factory=list)  # (seconds since start, bytes)
    parts: List[Tuple[float, int, int]] = field(default_factory=list)  # (seconds, RssAnon, RssFile + RssShmem) summed
    max_processes: int = 1
    tree_peak_pss: int = 0  # bytes, sampled every ~200 ms while the tree had several processes (else 0)
    tree_peak_anon: int = 0  # bytes, the peak of the sampled sum of RssAnon over the tree
    tree_peak_file: int = 0  # bytes, the peak of the sampled sum of RssFile + RssShmem (mapped files)
    harness_maxrss: int = 0  # bytes, this process's own peak RSS when the run ended (ru_maxrss's floor)
    others_cpu_s: float = 0.0  # CPU the rest of the machine used meanwhile (noise; this harness excluded)
    loadavg: float = 0.0  # 1-minute load average when the run started
    stderr_tail: str = ""
    result: Any = None  # what a callable returned

    @property
    def peak_rss(self) -> int:
        return max(self.tree_peak_rss, self.vm_hwm)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def others_cores(self) -> float:
        """Cores the rest of the machine kept busy during the run, on average."""
        return self.others_cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self, max_samples: int = 400) -> dict:
        """A JSON-ready dict; the RSS series is thinned to at most ``max_samples`` points
        (keeping each stretch's maximum so the peak survives)."""
        d = asdict(self)
        d.pop("result", None)
        d["peak_rss"] = self.peak_rss
        d["cores"] = self.cores
        d["others_cores"] = self.others_cores
        d["samples"] = thin(self.samples, max_samples)
        d.pop("parts", None)  # the plot's; the JSON keeps the total and the two peaks
        return d


def thin(samples: Sequence[Tuple[float, int]], limit: int) -> List[Tuple[float, int]]:
    if len(samples) <= limit:
        return [(round(t, 3), r) for t, r in samples]
    step = len(samples) / limit
    out = []
    for i in range(limit):
        block = samples[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)]
        t, r = max(block, key=lambda s: s[1])
        out.append((round(t, 3), r))
    return out


class MeasureError(RuntimeError):
    pass


# -- running ---------------------------------------------------------------------------
def measure_command(
    argv: Sequence[str],
    *,
    label: Optional[str] = None,
    stdin: Optional[str] = None,
    stdout: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[str] = None,
    interval: float = 0.02,
    check: bool = True,
) -> Measurement:
    """Runs ``argv``; ``stdin``/``stdout`` are file paths (stdout defaults to /dev/null).
    Stderr is kept (its tail is in the result).  ``check``: raise on a non-zero exit."""
    argv = [str(a) for a in argv]
    full_env = dict(os.environ, **(env or {}))
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as err, open(stdin or os.devnull, "rb") as fin, open(stdout or os.devnull, "wb") as fout:
        busy0, self0 = busy_cpu_seconds(), resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=err, env=full_env, cwd=cwd)
        sampler = RssSampler(proc.pid, t0, interval)
        sampler.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            sampler.stop()
            raise
        wall = time.perf_counter() - t0
        busy1, self1 = busy_cpu_seconds(), resource.getrusage(resource.RUSAGE_SELF)
        sampler.stop()
        own = (self1.ru_utime - self0.ru_utime) + (self1.ru_stime - self0.ru_stime)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-4000:].decode("utf-8", "replace")
    m = Measurement(
        label=label or os.path.basename(argv[0]),
        argv=argv,
        returncode=proc.returncode,
        wall_s=wall,
        seconds=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        tree_peak_rss=sampler.peak,
        vm_hwm=max(sampler.hwm.values(), default=0),
        ru_maxrss=usage.ru_maxrss * 1024,
        rusage_children_maxrss=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        samples=sampler.samples,
        parts=sampler.parts,
        max_processes=sampler.max_processes,
        tree_peak_pss=sampler.peak_pss,
        tree_peak_anon=sampler.peak_anon,
        tree_peak_file=sampler.peak_file,
        others_cpu_s=max(0.0, (busy1 - busy0) - own - (usage.ru_utime + usage.ru_stime)),
        loadavg=load,
        harness_maxrss=self1.ru_maxrss * 1024,
        stderr_tail=tail,
    )
    if check and not m.ok:
        raise MeasureError(f"{m.label}: exit status {m.returncode}: {' '.join(argv)}\n{tail.strip()}")
    return m


def _function_ref(func: Callable) -> Tuple[str, str]:
    """(file of the module, qualified name) -- works for functions of a script run as __main__."""
    module = sys.modules.get(func.__module__)
    path = getattr(module, "__file__", None)
    if not path or "<locals>" in func.__qualname__:
        raise MeasureError(f"{func!r} must be a module-level function of a file (it runs in a fresh interpreter)")
    return os.path.abspath(path), func.__qualname__


def measure_callable(
    func: Callable,
    *args,
    label: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    interval: float = 0.02,
    python: Optional[str] = None,
    **kwargs,
) -> Measurement:
    """Runs ``func(*args, **kwargs)`` in a fresh interpreter (same Python unless ``python``)
    and measures it like :func:`measure_command`; the return value is in ``.result``."""
    path, qualname = _function_ref(func)
    with tempfile.TemporaryDirectory(prefix="bench-child-") as tmp:
        payload = os.path.join(tmp, "payload.pkl")
        answer = os.path.join(tmp, "result.pkl")
        with open(payload, "wb") as f:
            pickle.dump({"path": path, "qualname": qualname, "args": args, "kwargs": kwargs, "answer": answer}, f)
        argv = [python or sys.executable, os.path.abspath(__file__), "--child", payload]
        m = measure_command(argv, label=label or qualname, env=env, interval=interval, check=False)
        if not m.ok or not os.path.exists(answer):
            raise MeasureError(f"{m.label}: the child failed (exit status {m.returncode})\n{m.stderr_tail.strip()}")
        with open(answer, "rb") as f:
            out = pickle.load(f)
    m.result = out["value"]
    inner = out["value"].get("seconds") if isinstance(out["value"], dict) else None
    m.seconds = inner if isinstance(inner, (int, float)) else out["call_seconds"]
    return m


def _child_main(payload_path: str) -> None:
    with open(payload_path, "rb") as f:
        job = pickle.load(f)
    sys.path.insert(0, os.path.dirname(job["path"]))
    spec = importlib.util.spec_from_file_location("_bench_target", job["path"])
    module = importlib.util.module_from_spec(spec)
    sys.modules["_bench_target"] = module
    spec.loader.exec_module(module)
    func: Any = module
    for part in job["qualname"].split("."):
        func = getattr(func, part)
    t0 = time.perf_counter()
    value = func(*job["args"], **job["kwargs"])
    call_seconds = time.perf_counter() - t0
    with open(job["answer"], "wb") as f:
        pickle.dump({"value": value, "call_seconds": call_seconds}, f)


# -- plotting --------------------------------------------------------------------------
_PLOT_WARNED = False


def plot_rss(runs: Iterable[Measurement], path: str, title: str = "RSS over time", split: bool = False) -> Optional[str]:
    """One line per run (RSS in MB against seconds since its start); with ``split``, two per
    run: its anonymous memory (solid) and its mapped file pages (dashed), each summed over
    the tree.  Returns the PNG path, or ``None`` (with a message on stderr) when matplotlib
    is not installed."""
    global _PLOT_WARNED
    runs = [r for r in runs if r.samples]
    if not runs:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if not _PLOT_WARNED:
            print("matplotlib is not installed (pip install -e '.[bench]'); skipping the RSS plots", file=sys.stderr)
            _PLOT_WARNED = True
        return None
    fig, ax = plt.subplots(figsize=(9, 5))
    for r in runs:
        if split and r.parts:
            xs = [t for t, _, _ in r.parts]
            (line,) = ax.plot(xs, [a / MB for _, a, _ in r.parts],
                              label=f"{r.label}: anonymous (peak {r.tree_peak_anon / MB:,.0f} MB, {r.wall_s:.1f} s)")
            ax.plot(xs, [f / MB for _, _, f in r.parts], linestyle="--", color=line.get_color(),
                    label=f"{r.label}: mapped files (peak {r.tree_peak_file / MB:,.0f} MB)")
            continue
        xs = [t for t, _ in r.samples]
        ys = [b / MB for _, b in r.samples]
        ax.plot(xs, ys, label=f"{r.label} (peak {r.peak_rss / MB:,.0f} MB, {r.wall_s:.1f} s)")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("memory of the process tree (MB)" if split else "RSS of the process tree (MB)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child_main(sys.argv[2])
    else:
        # A tiny self-check: python benchmarks/measure.py CMD ARGS...
        if len(sys.argv) < 2:
            sys.exit("usage: measure.py COMMAND [ARGS...]")
        run = measure_command(sys.argv[1:], check=False)
        print(
            f"exit {run.returncode}; {run.wall_s:.3f} s wall, {run.cpu_s:.3f} s CPU; peak RSS {run.peak_rss / MB:,.1f} MB "
            f"(anon {run.tree_peak_anon / MB:,.1f} MB, mapped files {run.tree_peak_file / MB:,.1f} MB) "
            f"(sampled tree {run.tree_peak_rss / MB:,.1f} MB over {len(run.samples)} samples, up to {run.max_processes} "
            f"processes; VmHWM {run.vm_hwm / MB:,.1f} MB; ru_maxrss {run.ru_maxrss / MB:,.1f} MB, "
            f"harness {run.harness_maxrss / MB:,.1f} MB)"
        )
