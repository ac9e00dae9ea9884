"""scripts/gpu_check.sh on a machine without a GPU, through its dry run (each stage's commands, one per line, run
nothing): every pytest command requires the extension and a GPU, the sanitizer's too; quoting survives and the knobs
can be set empty; a carried wheel is installed instead of building; each stage's selection, collected here by pytest
(GPU tests are collected without a GPU, they would skip at setup), holds what lab/gpu-verification.md's runbook
promises, no test twice, and leaves out only the leak check, whose subprocess may outlast a device command; the
runbook's at most five commands dry-run in the order the issue asks for. Nothing here runs on a GPU.
"""

import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.sh")
# Issue 62's command first (the frontends on cuDNN's persistent kernels, the GPU rule's table, the whole bench, the
# traces), then issue 39's order: what proves most first.
RUNBOOK_ORDER = ["rule", "load", "core", "features", "memcheck", "matrix"]
FLAGS = ("JAX_CUDNN_RNN_REQUIRE_EXTENSION=1", "JAX_CUDNN_RNN_REQUIRE_GPU=1", "PYTHONSAFEPATH=1")


def dry_run(*args, **env) -> list[tuple[str, list[str]]]:
    """(stage, command words) for every line the dry run prints."""
    result = subprocess.run(
        ["bash", SCRIPT, "--dry-run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "OUT": "/nonexistent/out", "PYTHON": sys.executable, **env},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    commands = []
    for line in result.stdout.splitlines():
        stage, separator, command = line.partition(": ")
        assert separator and re.fullmatch(r"[a-z][a-z-]*", stage), line
        commands.append((stage, shlex.split(command)))
    return commands


def uncapped(words: list[str]) -> list[str]:
    """A printed command without its hard cap (``timeout -k 10 SECONDS``), if it has one."""
    return words[4:] if words[:3] == ["timeout", "-k", "10"] else words


def pytest_args(words: list[str]) -> list[str]:
    """The selection of a printed pytest command: what follows `-m pytest`, without the run-only options."""
    args = words[words.index("pytest") + 1 :]
    selection, skip_next = [], False
    for word in args:
        if skip_next:
            skip_next = False
        elif word in ("-n", "--timeout", "-p"):
            skip_next = True
        elif word not in ("-rfEs", "-v"):
            selection.append(word)
    return selection


def collect(words: list[str]) -> list[str]:
    """The node ids the printed pytest command selects, collected here (the installed package imported, as the
    script's PYTHONSAFEPATH=1 has it, not the checkout's uncompiled copy)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *pytest_args(words)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def runbook_stages():
    return dry_run(*RUNBOOK_ORDER)


@pytest.fixture(scope="module")
def collected(runbook_stages) -> dict[str, list[str]]:
    """{stage: the node ids its pytest commands select} for the runbook's test stages."""
    nodes = {}
    for stage, words in runbook_stages:
        if "pytest" in words:
            nodes.setdefault(stage, []).extend(collect(words))
    return nodes


def test_every_test_command_requires_the_extension_and_a_gpu(runbook_stages):
    stages = [stage for stage, _ in runbook_stages]
    assert list(dict.fromkeys(stages)) == RUNBOOK_ORDER
    for stage, words in runbook_stages + dry_run("tests", "whole", "leaks", "racecheck"):
        if "pytest" not in words:
            continue
        words = uncapped(words)
        assert words[0] == "env", (stage, words)
        environment = words[1 : words.index(sys.executable)]
        assert all(flag in environment for flag in FLAGS), (stage, words)
    memcheck = [words for stage, words in runbook_stages if stage == "memcheck"]
    # The log records the kernel and the sanitizer's version; then one run under XLA's platform allocator, so that the
    # pool hides no out-of-bounds write from the sanitizer (issue 39).
    assert memcheck[:2] == [["uname", "-r"], ["compute-sanitizer", "--version"]]
    (run,) = memcheck[2:]
    sanitizer = run.index("compute-sanitizer")
    assert run[:1] == ["env"] and all(flag in run[:sanitizer] for flag in FLAGS)
    assert "XLA_PYTHON_CLIENT_ALLOCATOR=platform" in run[:sanitizer]
    assert run[sanitizer : sanitizer + 3] == ["compute-sanitizer", "--tool", "memcheck"]
    # The rule stage checks the extension and a GPU before it tunes and benches.
    rule = [uncapped(words) for stage, words in runbook_stages if stage == "rule"]
    check = next(i for i, words in enumerate(rule) if "extension_loaded()" in words[-1])
    assert all("tune" not in words and "bench" not in words for words in rule[:check])


def test_the_stages_select_what_the_runbook_promises(collected):
    # No test runs twice, but memcheck's four, which rerun under the sanitizer.
    for stage, nodes in collected.items():
        assert [node for node, n in Counter(nodes).items() if n > 1] == [], stage
    for stage in ("load", "core", "features", "matrix"):
        for other in ("load", "core", "features", "matrix"):
            if stage < other:
                assert not set(collected[stage]) & set(collected[other]), (stage, other)

    def names(stage, prefix):
        return [node for node in collected[stage] if node.split("::")[1].startswith(prefix)]

    assert "tests/cudnn/test_cudnn_gpu.py::test_default_implementation_on_gpu_is_cudnn" in collected["load"]
    assert len(names("load", "test_loaded_means_no_error")) == 1
    core = {node.split("::")[1].split("[")[0] for node in collected["core"]}
    assert {
        "test_trace_time_queries_go_to_the_named_device",
        "test_eager_vjp_twice_reuses_then_rewrites_the_reserve_space",
        "test_cpu_placed_calls_on_a_gpu_host_run_the_xla_implementation",
        "test_the_recipes_export_runs_on_the_gpu",
        "test_threads_cudnn",
        "test_cudnn_bit_identical_across_processes",
        "test_batch_sharded_over_local_gpus_matches_unsharded",
    } <= core
    matrix = names("core", "test_matches_xla")
    assert len(matrix) == 32 and all("-float32-" in node for node in matrix)
    features = collected["features"]
    assert {
        "tests/cudnn/test_cudnn_gpu.py::test_max_time_steps_with_gradients_under_the_heuristic_match_xla[None]",
        "tests/cudnn/test_cudnn_gpu.py::test_max_time_steps_with_gradients_under_the_heuristic_match_xla[ragged]",
        "tests/cudnn/test_cudnn_gpu.py::test_max_time_steps_in_one_call_and_one_more_chunked",
        "tests/backends/test_fuzz.py::test_cudnn_matches_the_oracle_and_the_xla_gradients",
    } <= set(features)
    for prefix, n in (
        ("test_resets", 10),
        ("test_options_match_xla", 6),
        ("test_persist_static_matches_xla", 9),
        ("test_dropout_matches_xla", 2),
        ("test_sequences_longer_than_max_time_steps", 4),
    ):
        assert len(names("features", prefix)) == n, prefix
    assert len(collected["memcheck"]) == 4
    assert len(names("matrix", "test_matches_xla")) == 96 and len(names("matrix", "test_half_gradients")) == 16
    assert len(names("matrix", "test_layout_matches_cudnn")) == 69


def test_the_runbook_leaves_out_only_the_leak_check(collected):
    """Every GPU test runs in a runbook stage except the leak check (3000 calls in a subprocess allowed 900 s, longer
    than one device command), which has its own stage; the former single run's default selection leaves it out too."""
    every_gpu_test = set(collect(["pytest", "-m", "gpu", "tests"]))
    covered = {node for nodes in collected.values() for node in nodes}
    assert every_gpu_test - covered == {"tests/cudnn/test_leaks_gpu.py::test_cudnn_calls_do_not_grow_memory"}
    (tests_stage, _) = [words for stage, words in dry_run("tests") if stage == "tests"]
    assert "tests/cudnn/test_leaks_gpu.py::test_cudnn_calls_do_not_grow_memory" not in collect(tests_stage)
    selection = pytest_args(tests_stage)
    assert selection[selection.index("-m") + 1] == "gpu and not slow"
    (leaks,) = [words for stage, words in dry_run("leaks")]
    assert collect(leaks) == ["tests/cudnn/test_leaks_gpu.py::test_cudnn_calls_do_not_grow_memory"]


def test_quoting_survives_and_knobs_can_be_empty():
    command = [words for stage, words in dry_run("memcheck", "--", "-k", "lstm or gru")][-1]
    assert command[-2:] == ["-k", "lstm or gru"]
    first, _ = [
        words for stage, words in dry_run("tests", PYTEST_EXTRA='-k "lstm or gru" tests/cudnn/test_cudnn_gpu.py')
    ]
    assert first[-3:] == ["-k", "lstm or gru", "tests/cudnn/test_cudnn_gpu.py"]
    (only,) = [words for stage, words in dry_run("tests", PYTEST_EXTRA="", PYTEST_WHOLE="", PYTEST_SELECT="")]
    assert only[-3:] == ["-m", "", "--continue-on-collection-errors"]
    assert dry_run("whole", PYTEST_WHOLE="") == []
    memcheck = [words for _, words in dry_run("memcheck", MEMCHECK_TESTS="tests/test_x.py::a tests/test_x.py::b")][-1]
    assert memcheck[-2:] == ["tests/test_x.py::a", "tests/test_x.py::b"]


def test_a_carried_wheel_is_installed_instead_of_building(tmp_path):
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    other = "cp39" if tag != "cp39" else "cp310"
    for name in (f"jax_cudnn_rnn-0.1.0-{tag}-{tag}-linux_x86_64.whl", f"jax_cudnn_rnn-0.1.0-{other}-{other}-any.whl"):
        (tmp_path / name).write_bytes(b"")
    commands = dry_run("--wheel", str(tmp_path), "load", "core")
    assert commands[0] == (
        "install",
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            str(tmp_path / f"jax_cudnn_rnn-0.1.0-{tag}-{tag}-linux_x86_64.whl"),
        ],
    )
    assert not any("wheel" in words or "-e" in words for stage, words in commands[1:])
    # A directory without a wheel for this Python stops the run before any stage, saying what to do.
    (tmp_path / f"jax_cudnn_rnn-0.1.0-{tag}-{tag}-linux_x86_64.whl").unlink()
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", SCRIPT, "--wheel", str(tmp_path), "load"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "OUT": str(out), "PYTHON": sys.executable},
    )
    assert result.returncode == 1
    assert f"no jax_cudnn_rnn wheel for {tag}" in result.stderr and "wheel stage" in result.stderr
    assert sorted(os.listdir(out)) == ["install.log"]


def test_unknown_stages_and_options_are_refused():
    for args, message in ((["nope"], "unknown stage 'nope'"), (["--nope"], "unknown option --nope")):
        result = subprocess.run(
            ["bash", SCRIPT, "--dry-run", *args], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert result.returncode == 2 and message in result.stderr


def runbook_rows() -> list[tuple[str, str]]:
    """(device command, expected duration) of each numbered row of lab/gpu-verification.md's runbook."""
    with open(os.path.join(ROOT, "lab", "gpu-verification.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Runbook") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| (\d) \| `([^`]+)`[^|]*\|([^|]*)\|([^|]*)\|", section, re.MULTILINE)
    assert [int(number) for number, *_ in rows] == list(range(1, len(rows) + 1))
    return [(command, duration.strip()) for _, command, duration, _ in rows]


def test_the_runbook_is_at_most_five_commands_in_the_issues_order():
    rows = runbook_rows()
    assert 1 <= len(rows) <= 5
    stages = []
    for command, duration in rows:
        words = shlex.split(command)
        assert words[:2] == ["bash", "scripts/gpu_check.sh"], command
        minutes = re.fullmatch(r"about (\d+) min", duration)
        assert minutes and int(minutes.group(1)) <= 8, duration
        # Every command installs the carried wheel; none builds on the device.
        assert words[words.index("--wheel") + 1] == "dist" and "wheel" not in words[2:], command
        for stage, _ in dry_run(*words[2:]):
            if stage not in stages:
                stages.append(stage)
    assert stages == ["install", *RUNBOOK_ORDER]


def test_the_runbook_carries_an_isolated_build_for_the_devices_python():
    """The wheel is built on the CPU machine for Python 3.12 by scripts/build_wheel.sh, an isolated `pip wheel`: the
    pinned oldest jaxlib's FFI headers and cuDNN's (issue 37), as a user's binary is built."""
    with open(os.path.join(ROOT, "lab", "gpu-verification.md"), encoding="utf-8") as f:
        runbook = f.read().split("## Runbook", 1)[1]
    assert "PYTHON=/root/.pyenv/versions/3.12.1/bin/python3.12 bash scripts/build_wheel.sh dist" in runbook
    with open(os.path.join(ROOT, "scripts", "build_wheel.sh"), encoding="utf-8") as f:
        script = f.read()
    assert "pip wheel -q --no-deps . -w" in script and "--no-build-isolation" not in script


def test_the_first_command_proves_the_most_under_hard_caps(tmp_path):
    """Issue 52: a lending's first command installs the carried wheel and runs the `first` stage, every part under a
    hard cap (timeout, then SIGKILL 10 s later), so that it returns its logs within 8 minutes whatever hangs; it
    selects the extension tests, the default's choice, the float32 matrix (4 modes, both directions, 2 layers, lengths,
    resets, projection), one bfloat16 case, and bench F in float32 and bfloat16 against PyTorch."""
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    (tmp_path / f"jax_cudnn_rnn-0.1.0-{tag}-{tag}-linux_x86_64.whl").write_bytes(b"")
    commands = dry_run("--wheel", str(tmp_path), "first")
    assert [stage for stage, _ in commands] == ["install"] + ["first"] * 5
    worst = 0
    for _, words in commands:
        assert words[:3] == ["timeout", "-k", "10"], words
        worst += int(words[3]) + 10
    assert worst <= 8 * 60, worst
    tests = [collect(words[4:]) for _, words in commands if "pytest" in words]
    load, matrix = tests
    assert "tests/cudnn/test_cudnn_gpu.py::test_default_implementation_on_gpu_is_cudnn" in load
    assert sum(node.startswith("tests/cudnn/test_extension.py::") for node in load) == len(load) - 1 >= 20
    cases = {node.split("::")[1] for node in matrix}
    float32 = [case for case in cases if case.startswith("test_matches_xla[") and "-float32-" in case]
    assert len(float32) == 32 and {case.split("[")[1].split("-")[0] for case in float32} == {
        "lstm",
        "gru",
        "rnn_tanh",
        "rnn_relu",
    }
    assert [case for case in cases if "bfloat16" in case] == [
        "test_matches_xla[lstm-bidirectional-linear_input-bfloat16-heuristic]"
    ]
    for prefix, n in (("test_seq_lengths_match_xla", 6), ("test_resets_match_xla", 6), ("test_options_match_xla", 2)):
        assert len([case for case in cases if case.startswith(prefix)]) == n, prefix
    assert "test_resets_with_dropout_and_projection_match_xla" in cases and len(cases) == 52
    bench = commands[-1][1]
    assert bench[bench.index("bench") :][:7] == [
        "bench",
        "--configs",
        "F",
        "--dtypes",
        "float32,bfloat16",
        "--contenders",
        "jcr-default,torch",
    ]


RULE_PARTS = ["smi", "info", "tests", "check", "tune", "info-after", "trace", "bench-f", "bench"]


def _option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_issue_62s_command_runs_everything_it_asks_for_under_one_deadline(tmp_path):
    """Issue 62 item 4: one command of at most 8 minutes: the carried wheel, the tests touching item 1, `tune` into this
    GPU's table, `info` again, the forward traces of A and F, the whole bench A-G with jcr-default, jcr-flax and
    PyTorch in float32 and bfloat16 (F in 2 rounds), every part under a hard cap, the tune and the benches bounding
    themselves inside it, and at most 8 files back under $OUT, none in a folder."""
    from jax_cudnn_rnn.tools.bench import contenders

    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    (tmp_path / f"jax_cudnn_rnn-0.1.0-{tag}-{tag}-linux_x86_64.whl").write_bytes(b"")
    commands = dry_run("--wheel", str(tmp_path), "rule")
    assert [stage for stage, _ in commands] == ["install"] + ["rule"] * len(RULE_PARTS)
    caps = {}
    for name, (_, words) in zip(["install", *RULE_PARTS], commands, strict=True):
        assert words[:3] == ["timeout", "-k", "10"], words
        caps[name] = int(words[3])
    parts = dict(zip(RULE_PARTS, (uncapped(words) for _, words in commands[1:]), strict=True))
    # The deadline: the script's, counted from its start (the install included), leaves the kills' 10 s and the
    # final lines inside 8 minutes.
    with open(SCRIPT, encoding="utf-8") as f:
        deadline = int(re.search(r'RULE_SECONDS="\$\{RULE_SECONDS:-(\d+)\}"', f.read()).group(1))
    assert caps["install"] + 10 <= deadline <= 8 * 60 - 10
    # Item 1's tests: the frontends' default modules against double bias (CPU), the GPU rule, the linen and NNX modules
    # on cuDNN, cuDNN on single-bias spaces.
    tests = {node.split("::")[1].split("[")[0] for node in collect(parts["tests"])}
    assert {
        "test_every_frontends_default_module_gets_the_algorithm_double_bias_gets",
        "test_the_registrys_picks_are_within_5_percent_of_the_fastest_in_every_synthetic_cell",
        "test_linen_module_matches_the_oracle",
        "test_nnx_module_matches_the_oracle",
        "test_single_bias_without_lengths_matches_xla",
    } <= tests
    assert not any(node.startswith("test_matches_xla") for node in tests)  # none of the matrix
    # Item 2: this GPU's table, bounded inside its cap, written under $OUT.
    tune = parts["tune"]
    assert tune[tune.index("tune") :][:3] == ["tune", "--platform", "gpu"]
    assert 0 < float(_option(tune, "--budget-seconds")) <= caps["tune"] - 20
    assert _option(tune, "--configs").split(",")[:2] == ["F", "A"]
    assert set(_option(tune, "--configs").split(",")) == {c.name for c in contenders.GPU_CONFIGS}
    assert parts["info-after"][-1] == "info"
    # Item 3: ours and PyTorch's forward traced at A and F.
    trace = parts["trace"]
    assert trace[trace.index("benchmarks/trace_forward.py") :][:3] == [
        "benchmarks/trace_forward.py",
        "--configs",
        "A,F",
    ]
    assert "torch" in _option(trace, "--contenders").split(",")
    # Item 4: the whole bench, F in two rounds, each bench bounded inside its cap.
    benches = [parts["bench-f"], parts["bench"]]
    configs = set()
    for words in benches:
        assert _option(words, "--contenders") == "jcr-default,jcr-flax,torch"
        assert _option(words, "--dtypes") == "float32,bfloat16" and "--same-process" not in words
        configs |= set(_option(words, "--configs").split(","))
    assert configs == {c.name for c in contenders.GPU_CONFIGS}
    assert _option(parts["bench-f"], "--configs") == "F" and _option(parts["bench-f"], "--rounds") == "2"
    for name in ("bench-f", "bench"):
        assert 0 < float(_option(parts[name], "--budget-seconds")) <= caps[name] - 20
    # What comes back: the two logs and the files the parts write, each directly under $OUT (the tool's limit: 8).
    written = [
        _option(words, flag)
        for words in parts.values()
        for flag in ("--json", "--gpu-json", "--summary", "--archive")
        if flag in words
    ]
    assert all(os.path.dirname(path) == "/nonexistent/out" for path in written), written
    assert len({"install.log", "rule.log", *map(os.path.basename, written)}) == 2 + len(written) <= 8


def test_the_rule_stage_stops_at_its_deadline(tmp_path):
    """Run for real with a Python that hangs (no GPU here, and no wait for one): `info`, whose own cap is larger than
    what is left of a 31 s deadline, is capped at what is left (less the kill's 10 s) and stopped there; the bench,
    with under 20 s left, is skipped and says so; the command fails within its deadline."""
    hanging = tmp_path / "python"
    hanging.write_text('#!/bin/bash\ncase " $* " in *" -c "*) exit 1 ;; esac\nexec sleep 120\n')
    hanging.chmod(0o755)
    out = tmp_path / "out"
    env = {"OUT": str(out), "PYTHON": str(hanging), "RULE_SECONDS": "31", "RULE_PARTS": "info bench"}
    env["RULE_CAPS"] = "10 300 90 30 140 30 60 100 300"
    started = time.monotonic()
    result = subprocess.run(
        ["bash", SCRIPT, "rule"], capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, **env}
    )
    assert time.monotonic() - started < 31
    assert result.returncode == 1, result.stdout[-2000:]
    log = (out / "rule.log").read_text()
    cap = int(
        re.search(r"\$ timeout -k 10 (\d+) env PYTHONSAFEPATH=1 \S+ -m jax_cudnn_rnn.tools.cli info", log).group(1)
    )
    assert 17 <= cap <= 21
    assert f"[exit status 124 after {cap} s]" in log or f"[exit status 124 after {cap + 1} s]" in log
    assert "skipped bench, the command's 31 s are spent" in log
    assert sorted(os.listdir(out)) == ["rule.log"]
