"""The commands of README.md and docs/*.md run, and end as the page says.

A fenced block is tested when an HTML comment stands right above it (GitHub shows nothing):

    <!-- docs-test: exit=2 -->
    ```console
    $ harness precision=fp8
    harness: error: precision='fp8' is not valid: ...
    ```

Options (shlex words; `N:OPTION` gives an option to the block's N-th command only):

  exit=N        the command exits N (default 0)
  shrink        add the suite's small settings (tests/conftest.py FAST) for each key the command
                does not set itself; data.* only with the built-in data; `shrink=-batch_size`
                leaves those keys out
  ci            a command that trains, run for real in CI too (a representative one); without
                it CI only checks that Hydra composes it (`--cfg job`, the first value of each
                swept key) and the full set runs it. A `harness` command is forked from the
                suite's fork server (tests/forked_harness.py) unless a signal stops it or it
                sets what a process reads as it starts
  compose       never run, only composed (too costly for any machine the tests run on)
  full          the full set only: a command that is no `harness` run (a
                `harness-mlflow-upload` of the page's run, `find outputs`), or an error
                example whose kind another runs in CI (a `harness` command is composed in CI)
  skip="why"    never run: it needs what no test machine has (CUDA, SLURM, Nsight Systems)
                or stands for the user's own (a placeholder)
  file=PATH     the block is a file of the page's example project: written, not run
  script        a Python block, run as a script in the page's folder (`ci`: in CI too)
  signal=SIG@S[@J]  send SIG once the run (job J of the sweep) did S training steps
                (tests/step_beacon.py counts them): the Ctrl-C / SIGTERM examples
  hand-made     `DIR`, `A`, `B` are the hand-made sweeps, even where the page ran its own
                (two sweeps of the page that share no point: the one compared to is not run)
  columns=N     the terminal's width (default 80)    timeout=S  per command (default 300)

What runs in CI: every command that stops before training (an `exit=2`, `--cfg`, `--help`,
`--info`, `harness-report` on the page's sweep or a hand-made one), the `ci` commands and
scripts, and the composition of every other `harness` command: under 90 s on 2 cores.
HARNESS_DOCS=full runs every command for real (about 10 minutes on 2 cores): run it when
the docs or what they show change. `python tests/test_docs_commands.py` lists the plan.

Each page gets one scratch folder, its blocks run there in page order: its `file=` blocks are
written first, `docs/` and `benchmarks/` are linked in (`PYTHONPATH=docs/examples harness`),
and `DIR`, `A`, `B`, `multirun/<date>/<time>` name the page's sweeps (newest last; hand-made
ones when the page ran none), `outputs/<date>/<time>` its newest run.

Every command is held to: its exit status; each `harness: error:`, `warning:` and
`interrupted` line the page shows after it, on stderr (paths, dates, run ids aside); no Python
traceback, no line of torch's C++ side or TorchDynamo's on the terminal unless verbose=true;
no report that failed; at the terminal's width, no table line wider and no heading cut short.
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import forked_harness
import pytest
from conftest import FAST
from sweep_files import metrics, steps, write_job

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent
FULL = os.environ.get("HARNESS_DOCS", "").strip().lower() == "full"
TIMES = os.environ.get("HARNESS_DOCS_TIMES")  # read once: a forked start swaps os.environ (_ENVIRON)

MARK = re.compile(r"<!--\s*docs-test:(?P<opts>[^>]*)-->[ \t]*\n[ \t]*(?P<fence>```+)(?P<lang>[\w-]*)"
                  r"[^\n]*\n(?P<body>.*?)\n[ \t]*(?P=fence)", re.S)
FENCE = re.compile(r"^[ \t]*```")
# a line that runs one of the commands: `harness ...`, `$ harness ...`, `X=y harness-report ...`
COMMAND = re.compile(r"^\s*(\$ )?([A-Za-z_]\w*=\S* )*(harness|harness-report|harness-mlflow-upload)"
                     r"(\s|$)")
# torch's C++ side (kineto's `USDT:...`, c10's `[W1125 17:44:07.356 CPUAllocator.cpp:245] ...`)
# and torch's own log handler (`W1125 18:21:46.802000 11459 torch/_dynamo/...`)
NATIVE = re.compile(r"^(USDT:|\[[WEI]\d{4} |[WEI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ )", re.M)
# words standing for the page's own sweeps and runs
PLACEHOLDER = re.compile(r"^(DIR|A|B|(multirun|outputs)/(<date>/<time>|\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d))$")
# the lines of a page that say how a command ended
OUTCOME = re.compile(r"^(harness(?:-report|-mlflow-upload)?): (error: |warning: |interrupted )")
BEFORE_TRAINING = {"--cfg", "-c", "--help", "-h", "--info", "-i", "--hydra-help"}
BUILT_IN_DATA = (None, "synthetic", "synthetic_cpu")


@dataclass
class Command:
    text: str
    index: int  # 1-based, in its block
    expected: list[str] = field(default_factory=list)  # the page's outcome lines after it
    variables: dict[str, str] = field(default_factory=dict)  # the block's `$ W="..."` lines


@dataclass
class Block:
    page: Path
    line: int  # of the fence
    lang: str
    opts: dict[str, str]
    body: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def options(self, index: int) -> dict[str, str]:
        """The block's options with the `index`-th command's own (`N:key=value`) over them."""
        opts = {k: v for k, v in self.opts.items() if not re.match(r"\d+:", k)}
        for key, value in self.opts.items():
            number, _, own = key.partition(":")
            if number.isdigit() and int(number) == index:
                opts[own] = value
        return opts

    def commands(self) -> list[Command]:
        lines = re.sub(r"\\\n\s*", " ", self.body).splitlines()
        found: list[Command] = []
        variables: dict[str, str] = {}
        if self.lang == "console" or any(ln.startswith("$ ") for ln in lines):
            for ln in lines:
                assignment = re.fullmatch(r"\$ ([A-Za-z_]\w*)=(.*)", ln)
                if assignment and len(shlex.split(assignment[2])) == 1:
                    variables[assignment[1]] = shlex.split(assignment[2])[0]
                elif ln.startswith("$ "):
                    found.append(Command(ln[2:], len(found) + 1, variables=dict(variables)))
                elif found and OUTCOME.match(ln):
                    found[-1].expected.append(ln)
        else:
            for ln in lines:
                if ln.strip() and not ln.lstrip().startswith("#"):
                    found.append(Command(ln, len(found) + 1))
        return found


def _blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in MARK.finditer(text):
            opts = {}
            for token in shlex.split(m["opts"]):
                key, _, value = token.partition("=")
                opts[key] = value
            found.append(Block(page, text.count("\n", 0, m.start("fence")) + 1, m["lang"], opts,
                               m["body"]))
    return found


ALL = _blocks()


# -- what a command becomes -------------------------------------------------------------------
@dataclass
class Step:
    how: str  # "run", "compose", "skip", "full only"
    words: list[str]  # the command to run: assignments (X=y) first
    why: str = ""


def _words(command: Command) -> list[str]:
    text = command.text
    for name, value in command.variables.items():  # `harness $W ...`
        text = re.sub(rf"\${name}\b|\${{{name}}}", value.replace("\\", r"\\"), text)
    return shlex.split(text, comments=True)


def _shell_line(command: Command) -> bool:
    """A pipe, a redirection or a list: run as written, in bash."""
    text = re.sub(r"<[\w-]+>", "X", command.text)  # `multirun/<date>/<time>` is a word
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    return any(token in ("|", "||", "&&", ";", ">", ">>", "<", "&") for token in lexer)


def _split_env(words: list[str]) -> tuple[list[str], list[str]]:
    n = next((n for n, w in enumerate(words) if not re.match(r"[A-Za-z_]\w*=", w)), len(words))
    return words[:n], words[n:]


def _keys(words: list[str]) -> dict[str, str]:
    return {w.partition("=")[0].lstrip("+~"): w.partition("=")[2] for w in words
            if "=" in w and not w.startswith("-")}


def shrunk(words: list[str], spec: str = "") -> list[str]:
    """The suite's small settings for every key the command leaves alone."""
    given = _keys(words)
    given.update({k.lstrip("-"): "" for k in spec.split(",") if k.startswith("-")})
    own_data = given.get("data") not in BUILT_IN_DATA or "data._target_" in given or (
        {"-cd", "--config-dir"} & set(words))
    def set_by_command(key: str) -> bool:  # `logger.tracking_uri=...` keeps the logger
        return key in given or any(k.startswith(f"{key}.") for k in given)

    return words + [s for s in FAST if not set_by_command(s.partition("=")[0])
                    and not (own_data and s.startswith("data."))]


def composed(words: list[str]) -> list[str]:
    """`harness -m a=1,2 b=x` -> `harness a=1 b=x --cfg job`: what Hydra composes for the
    first job (a sweep's named options included)."""
    out = []
    for w in words:
        if w in ("-m", "--multirun"):
            continue
        key, eq, value = w.partition("=")
        if eq and "," in value and not value.startswith(("[", "{", "'", '"')) and "(" not in value:
            value = value.split(",")[0]
        out.append(f"{key}{eq}{value}" if eq else w)
    return [*out, "--cfg", "job"]


def plan(block: Block, command: Command, full: bool = FULL) -> Step:
    opts = block.options(command.index)
    if "skip" in opts:
        return Step("skip", [], opts["skip"])
    env, words = _split_env(_words(command))
    tool = words[0] if words else ""
    if tool == "harness" and "compose" in opts:
        return Step("compose", env + composed(words), "too costly to run anywhere")
    if tool == "harness" and "shrink" in opts and not BEFORE_TRAINING & set(words):
        words = shrunk(words, opts["shrink"])
    before_training = (tool == "harness" and (BEFORE_TRAINING & set(words) or opts.get("exit") == "2")
                       or tool == "harness-report")
    if full or "ci" in opts or (before_training and "full" not in opts):
        return Step("run", env + words)
    if tool == "harness":
        return Step("compose", env + composed(words), "trains: HARNESS_DOCS=full runs it")
    return Step("full only", env + words, "reads what the page's runs wrote: HARNESS_DOCS=full")


# -- the page's folder ------------------------------------------------------------------------
@dataclass
class PageDir:
    path: Path

    def runs(self, pattern: str) -> list[Path]:
        return sorted((p for p in self.path.glob(pattern) if p.is_dir()),
                      key=lambda p: p.stat().st_mtime)

    def stand_in(self, word: str, older: bool = False, hand_made: bool = False) -> str:
        """The page's own run or sweep for `outputs/<date>/<time>`, `DIR`, `multirun/...`: its
        newest; `older`: the one before (`A` of `harness-report A B`); `hand_made`: the
        hand-made pair, whatever the page ran."""
        if word.startswith("outputs/"):
            runs = self.runs("outputs/*/*")
            return str(runs[-1]) if runs else word
        sweeps = [] if hand_made else self.runs("multirun/*/*")
        if not sweeps:
            sweeps = [_hand_made_sweep(self.path / "hand-made" / name) for name in ("a", "b")]
        return str(sweeps[-2] if older and len(sweeps) > 1 else sweeps[-1])


def _hand_made_sweep(where: Path) -> Path:
    """batch_size 1, 2 x precision fp32, bf16 (bf16 twice as fast), two rounds with their step
    figures, as a sweep with repeat=2 leaves them (a point run once decides no gate)."""
    if not where.exists():
        points = [(b, p, r) for r in (0, 1) for b in (1, 2) for p in ("fp32", "bf16")]
        for n, (bs, p, r) in enumerate(points):
            train, inference = 10.0 * bs * (2 if p == "bf16" else 1) * (1 + r / 100), 30.0 * bs
            write_job(where / str(n), [f"batch_size={bs}", f"precision={p}", "repeat=2",
                                       f"+sweep_round={r}"], sweep_round=r, schema_version=3,
                      values={**metrics(train, inference, batch_size=bs),
                              **steps(train, batch_size=bs),
                              **steps(inference, batch_size=bs, phase="inference")})
    return where


_DIRS: dict[Path, PageDir] = {}


def page_dir(root: Path, page: Path) -> PageDir:
    if page not in _DIRS:
        path = root / page.relative_to(ROOT).as_posix().replace("/", "_")
        path.mkdir()
        for block in (b for b in ALL if b.page == page and "file" in b.opts):
            target = path / block.opts["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body + "\n")
            if target.suffix == ".py":  # mypkg/workload.py: mypkg a package
                for parent in target.relative_to(path).parents[:-1]:
                    (path / parent / "__init__.py").touch()
        for name in ("docs", "benchmarks"):
            (path / name).symlink_to(ROOT / name)
        _DIRS[page] = PageDir(path)
    return _DIRS[page]


# -- running and checking ---------------------------------------------------------------------
# A forked run (tests/forked_harness.py) swaps os.environ for a moment as it starts: the page
# threads start one, or read the environment, one at a time.
_ENVIRON = threading.Lock()


def _env(opts: dict[str, str]) -> dict[str, str]:
    with _ENVIRON:
        env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_VERBOSE", "MLFLOW_TRACKING_URI")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
    env["COLUMNS"] = opts.get("columns", "80")
    return env


def _send_when_steps(proc: subprocess.Popen, page: PageDir, spec: str, timeout: float) -> None:
    name, steps, *job = spec.split("@")
    pattern = f"multirun/*/*/{int(job[0]) - 1}/steps" if job else "outputs/*/*/steps"
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for beacon in page.path.glob(pattern):
            text = beacon.read_text().strip()
            if text.isdigit() and int(text) >= int(steps):
                proc.send_signal(getattr(signal, name))
                return
        time.sleep(0.2)


def _normal(line: str) -> str:
    """Paths, dates, times and run ids differ from run to run."""
    line = re.sub(r"(/[\w.\-<>]+)+/?", "<path>", line)
    line = re.sub(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d(_\d+)?", "<when>", line)
    return re.sub(r"\b[0-9a-f]{32}\b", "<id>", line).strip()


def terminal_problems(stdout: str, stderr: str, verbose: bool, width: int) -> list[str]:
    problems = []
    if "Traceback (most recent call last)" in stdout + stderr:
        problems.append("a Python traceback reached the terminal")
    broken = re.search(r"^harness: warning: (\w+ report: .*)$", stderr, re.M)
    if broken:  # a preset's report failed (result.json's report_errors)
        problems.append(f"a report failed: {broken[1][:160]}")
    native = NATIVE.search(stdout + stderr)
    if native and not verbose:
        line = (stdout + stderr)[native.start():].splitlines()[0]
        problems.append(f"torch's own output on the terminal: {line[:120]}")
    for line in stdout.splitlines():
        boxed = line[:1] in "┏┃┡│├└┌╭"
        if boxed and len(line) > width:
            problems.append(f"a table line of {len(line)} columns at {width}: {line[:60]}...")
            break
        if line.startswith("┃") and "…" in line:
            problems.append(f"a table heading cut short: {line.strip()}")
            break
    return problems


def run_step(block: Block, command: Command, step: Step, page: PageDir) -> None:
    opts = block.options(command.index)
    env_words, words = _split_env(step.words)
    if "signal" in opts and step.how == "run":
        words += ["+profiler.beacon._target_=step_beacon.StepBeacon",
                  "+profiler.beacon.path=${hydra:runtime.output_dir}/steps"]
    dirs = [w for w in words if PLACEHOLDER.match(w)]  # `A B`, or two dated sweeps: older first
    words = [page.stand_in(w, older=len(dirs) > 1 and w == dirs[0], hand_made="hand-made" in opts)
             if w in dirs else w for w in words]
    # `find outputs -type f | sort` as written; else exec: a signal reaches harness itself
    line = command.text if _shell_line(command) else "exec " + shlex.join(
        (["env", *env_words] if env_words else []) + words)
    timeout = float(opts.get("timeout", 300))
    started, cpu = time.monotonic(), _children_cpu()
    env = _env(opts)
    forked_env = {**env, **dict(w.split("=", 1) for w in env_words)}
    if (words[:1] == ["harness"] and "signal" not in opts and not _shell_line(command)
            and not forked_harness.read_at_start(forked_env)):
        returncode, out, err = _forked(words, page.path, forked_env, timeout, block.id)
    else:
        returncode, out, err = _run(line, page, env, opts, timeout, block.id)
    _record_time(block, line, step.how, started, cpu)
    expected = int(opts.get("exit", 0))
    tail = f"\n$ {line}\n--- stdout (end)\n{out[-2000:]}\n--- stderr (end)\n{err[-2000:]}"
    if step.how == "compose":  # it composes, or fails there as the page says it fails
        assert returncode in (0, expected), (
            f"{block.id}: `--cfg job` exits {returncode}, the page says {expected}{tail}")
        return
    assert returncode == expected, (
        f"{block.id}: exit {returncode}, the page says {expected}{tail}")
    said = {_normal(ln) for ln in err.splitlines()}
    for want in command.expected:
        assert _normal(want) in said, f"{block.id}: the page's line is not on stderr: {want}{tail}"
    problems = terminal_problems(out, err, any(w == "verbose=true" for w in words),
                                 int(opts.get("columns", "80")))
    assert not problems, f"{block.id}: " + "; ".join(problems) + tail


def _run(line: str, page: PageDir, env: dict[str, str], opts: dict[str, str], timeout: float,
         where: str) -> tuple[int, str, str]:
    """The command line as typed, in bash: (exit status, stdout, stderr)."""
    with subprocess.Popen(["bash", "-c", line], cwd=page.path, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        if "signal" in opts:
            threading.Thread(target=_send_when_steps, daemon=True,
                             args=(proc, page, opts["signal"], timeout)).start()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"{where}: `{line}` ran past {timeout:.0f} s\n{err[-2000:]}")
    return proc.returncode, out, err


def _forked(words: list[str], cwd: Path, env: dict[str, str], timeout: float,
            where: str) -> tuple[int, str, str]:
    """`harness ...` forked from the suite's fork server (tests/forked_harness.py), which
    imported the libraries already: what it does and prints is the same, a Python start and
    the libraries' import less per command (seconds of CPU for one that trains). A command
    that a signal stops, or that sets what a process reads as it starts, runs for real."""
    with _ENVIRON:
        run = forked_harness.start([str(BIN / words[0]), *words[1:]], cwd, env)
    try:
        out, err = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: `{shlex.join(words)}` ran past {timeout:.0f} s")
    assert run.returncode is not None  # communicate waited for its end
    return run.returncode, out, err


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _record_time(block: Block, line: str, how: str, started: float, cpu: float) -> None:
    """$HARNESS_DOCS_TIMES: a line per command, its wall and CPU seconds (the CPU seconds are
    its own with HARNESS_DOCS_JOBS=1 only: children's times are the process's; a forked
    compose's are the fork server's, not counted)."""
    if TIMES:
        with open(TIMES, "a") as out:
            out.write(f"{time.monotonic() - started:7.1f} s {_children_cpu() - cpu:6.1f} cpu-s"
                      f"  {how:7} {block.id}  {line[:150]}\n")


def run_script(block: Block, page: PageDir) -> None:
    script = page.path / f"block_{block.line}.py"
    script.write_text(block.body + "\n")
    started, cpu = time.monotonic(), _children_cpu()
    proc = subprocess.run([sys.executable, script.name], cwd=page.path, env=_env(block.opts),
                          text=True, capture_output=True, timeout=float(block.opts.get("timeout", 300)))
    _record_time(block, f"python {script.name}", "script", started, cpu)
    expected = int(block.opts.get("exit", 0))
    assert proc.returncode == expected, (
        f"{block.id}: the script exited {proc.returncode}, the page says {expected}\n"
        f"{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")


def run_block(block: Block, page: PageDir) -> None:
    if _is_script(block):
        run_script(block, page)
        return
    for command in block.commands():
        step = plan(block, command)
        if step.how in ("run", "compose"):
            run_step(block, command, step, page)


def _is_script(block: Block) -> bool:
    return "script" in block.opts


def _runs_anything(block: Block) -> bool:
    if "file" in block.opts:
        return False
    if _is_script(block):
        return FULL or "ci" in block.opts
    return any(plan(block, c).how in ("run", "compose") for c in block.commands())


RUNNABLE = [b for b in ALL if _runs_anything(b)]


class Pages:
    """Runs the selected blocks: pages two at a time (they share nothing: CI has 2 cores, and
    a harness run keeps about one busy), each page's blocks in page order. A test waits for
    its block's outcome."""

    def __init__(self, scratch: Path, selected: set[str]) -> None:
        self.outcomes: dict[str, Future] = {b.id: Future() for b in RUNNABLE if b.id in selected}
        by_page: dict[Path, list[Block]] = {}
        for block in RUNNABLE:
            if block.id in self.outcomes:
                by_page.setdefault(block.page, []).append(block)
        workers = int(os.environ.get("HARNESS_DOCS_JOBS", min(2, os.cpu_count() or 1)))
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="docs-page")
        # the pages with the most to run first: the two workers end together
        for page, blocks in sorted(by_page.items(), key=lambda kv: -_weight(kv[1])):
            self.pool.submit(self._page, scratch, page, blocks)

    def _page(self, scratch: Path, page: Path, blocks: list[Block]) -> None:
        where = page_dir(scratch, page)
        for block in blocks:
            outcome = self.outcomes[block.id]
            try:
                run_block(block, where)
            except BaseException as err:  # noqa: BLE001 - the block's test raises it
                outcome.set_exception(err)
            else:
                outcome.set_result(None)

    def wait(self, block: Block) -> None:
        self.outcomes[block.id].result()


def _weight(blocks: list[Block]) -> int:
    """What a page costs, roughly: its commands that run (a script as much as one)."""
    return sum(1 if _is_script(b) else sum(plan(b, c).how == "run" for c in b.commands())
               for b in blocks)


@pytest.fixture(scope="module")
def pages(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    selected = {item.callspec.params["block"].id for item in request.session.items
                if item.originalname == "test_docs_block"}
    running = Pages(tmp_path_factory.mktemp("docs"), selected)
    yield running
    running.pool.shutdown(wait=True, cancel_futures=True)


# One pytest-xdist worker runs them all: every worker collects every test, and each worker's
# `pages` starts the whole plan (it ran twice side by side, once per worker).
@pytest.mark.slow
@pytest.mark.xdist_group("docs")
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_docs_block(block: Block, pages: Pages) -> None:
    pages.wait(block)


# -- every command block is marked -----------------------------------------------------------
def unmarked_blocks() -> list[str]:
    """Fenced blocks (not Python, YAML or JSON) with a line that runs harness, harness-report or
    harness-mlflow-upload, and no docs-test mark."""
    marked = {(b.page, b.line) for b in ALL}
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        start = None
        for n, line in enumerate(lines, 1):
            if not FENCE.match(line):
                continue
            if start is None:
                start = n
                continue
            lang = lines[start - 1].strip().strip("`").strip()
            body = lines[start:n - 1]
            if lang not in ("python", "yaml", "json", "toml") and any(COMMAND.match(b) for b in body) and (
                    (page, start) not in marked):
                found.append(f"{page.relative_to(ROOT)}:{start}")
            start = None
    return found


def test_every_command_block_is_marked() -> None:
    """A new example cannot slip in untested: it is marked to run, compose or skip (and why)."""
    assert not unmarked_blocks(), ("command blocks without a `<!-- docs-test: ... -->` mark"
                                   " (tests/test_docs_commands.py says how): "
                                   + ", ".join(unmarked_blocks()))
    no_reason = [b.id for b in ALL for n in range(1, len(b.commands()) + 1)
                 if "skip" in b.options(n) and not b.options(n)["skip"].strip()]
    assert not no_reason, f"skip marks without a reason: {', '.join(no_reason)}"


def _summary(full: bool) -> str:
    counts: dict[str, int] = {}
    why: dict[str, int] = {}
    for block in ALL:
        if "file" in block.opts:
            continue
        if _is_script(block):
            how = "run" if full or "ci" in block.opts else "full only"
            counts[f"script {how}"] = counts.get(f"script {how}", 0) + 1
            continue
        for command in block.commands():
            step = plan(block, command, full)
            counts[step.how] = counts.get(step.how, 0) + 1
            if step.how == "skip":
                why[step.why] = why.get(step.why, 0) + 1
    lines = [f"{'full set' if full else 'CI set'}: " + ", ".join(f"{n} {k}" for k, n in counts.items())]
    lines += [f"  skipped {n}: {reason}" for reason, n in sorted(why.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


if __name__ == "__main__":  # the plan: what CI and the full set run
    print(f"{len(ALL)} marked blocks")
    print(_summary(full=False))
    print(_summary(full=True))
    if "-v" in sys.argv:
        for block in (b for b in ALL if "file" not in b.opts and not _is_script(b)):
            for command in block.commands():
                step = plan(block, command)
                print(f"{block.id:40} {step.how:9} {shlex.join(step.words)[:110]}")
