"""The pytest plugin follows pytest's conventions: a fixture for users' own tests, markers known to
--strict-markers, ini keys, node ids that can be pasted back, -rA and --tb styles, warnings raised at the model's
line (and -W error), JUnit properties, xdist groups and the budget-overrun policy. Driven through pytester as a
user would drive it; each run selects a few cheap checks of the bundled reference models."""
from __future__ import annotations

import json
import os
import re
import shlex
import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from tfcheck.engine import registry

pytest_plugins = ["pytester"]

LM = "reference_model:TransformerLM"
HEADLESS = "reference_model.broken:LMWithoutHead"
#: A user's model file below pytester's rootdir: the reference LM, a broken one and one that warns, as theirs.
MODEL_FILE = """
from reference_model import TransformerLM as GPT  # noqa: F401
from reference_model.broken.numerics import EmbeddingDrownsPositions as LoudEmbeddingEncoder  # noqa: F401
from reference_model.broken.shapes import LMWithoutHead as HeadlessGPT  # noqa: F401
"""
FOUNDATION = ("-k", "smoke or contract")


@pytest.fixture
def model_file(pytester):
    return pytester.makepyfile(model=MODEL_FILE)


def failed_ids(result) -> list[str]:
    return [m.group(1) for line in result.stdout.lines if (m := re.match(r"FAILED (\S+)", line))]


def section(result, title: str, end: str = "tfcheck summary") -> str:
    """The text between the ``= title =`` separator and the next ``= end =`` one."""
    out = result.stdout.str()
    return out.split(f" {title} ", 1)[1].split(f" {end} ", 1)[0].split("\n", 1)[1].rsplit("\n", 1)[0]


# ----- 1. the tfcheck_run fixture -----------------------------------------------------------------------------
def test_the_fixture_checks_and_asserts_with_the_report_text_at_the_tests_own_line(pytester):
    pytester.makepyfile(test_mine=f"""
        import tfcheck

        def test_report(tfcheck_run):
            report = tfcheck_run.check("{LM}", only=["shape.contract"])
            assert report.status is tfcheck.Status.PASS  # the module is not shadowed by the fixture

        def test_broken(tfcheck_run):
            tfcheck_run.assert_pass("{HEADLESS}", only=["shape.contract"])

        def test_warning_under_the_sessions_strictness(tfcheck_run):
            tfcheck_run.assert_pass("reference_model.broken:EmbeddingDrownsPositions", only=["embedding.scale"])

        def test_strictness_given_per_call(tfcheck_run):
            tfcheck_run.assert_pass("reference_model.broken:EmbeddingDrownsPositions", only=["embedding.scale"],
                                    strict=False)
    """)
    result = pytester.runpytest("--tfcheck-strict", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "tfcheck found problems" in out and "expected (1, 1, 101)" in out and "embedding.scale" in out
    assert '>       tfcheck_run.assert_pass("reference_model.broken:LMWithoutHead"' in out  # the test's own line
    assert "pytest_plugin/fixture.py" not in out and "tfcheck/api.py" not in out  # __tracebackhide__


def test_the_fixture_follows_the_sessions_budget_policy(pytester):
    pytester.makepyfile(test_slow=f"""
        def test_slow(tfcheck_run):
            tfcheck_run.assert_pass("{LM}", only=["forward.smoke"], budget_s=0.001)
    """)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)  # an overrun is a skip by default
    for policy in ("--tfcheck-budget-overrun=fail", "--tfcheck-strict"):
        failed = pytester.runpytest(policy, "-p", "no:cacheprovider")
        failed.assert_outcomes(failed=1)
        assert "forward.smoke stopped after" in failed.stdout.str()


# ----- 2. markers ---------------------------------------------------------------------------------------------
def test_the_markers_are_registered_without_tfcheck_models(pytester):
    pytester.makepyfile(test_marked="""
        import pytest

        @pytest.mark.tfcheck
        def test_mine():
            pass
    """)
    pytester.runpytest("--strict-markers", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    listed = pytester.runpytest("--markers").stdout.str()
    for group in registry.GROUPS:
        assert f"@pytest.mark.tfcheck_{group}:" in listed
    assert "@pytest.mark.tfcheck:" in listed


def test_group_markers_select_the_checks_of_their_group(pytester):
    from tfcheck.engine.runner import applicable_checks, load_subject

    applicable = applicable_checks(load_subject(LM))
    training = [c.id for c in applicable if c.group == "training"]
    assert training  # the LM has training checks: the selection below can tell
    result = pytester.runpytest("--tfcheck", LM, "--strict-markers", "-m", "tfcheck_training", "--collect-only",
                                "-q")
    assert [line.rsplit("::", 1)[1] for line in result.stdout.lines if "::" in line] == training
    result.stdout.fnmatch_lines([f"{len(training)}/{len(applicable)} tests collected "
                                 f"({len(applicable) - len(training)} deselected)*"])


def test_a_check_of_an_unknown_group_is_refused_at_registration():
    with pytest.raises(ValueError, match="group 'slow' is not one of probe, training"):
        registry.check("test.unknown_group", "a check of no known group", rows=("output-shape",), group="slow")
    assert "test.unknown_group" not in registry._REGISTRY


# ----- 3. ini keys --------------------------------------------------------------------------------------------
def test_the_ini_file_sets_the_models_the_format_and_strictness(pytester):
    pytester.makepyprojecttoml(f"""
        [tool.pytest.ini_options]
        tfcheck = ["{HEADLESS}", "reference_model.broken:EmbeddingDrownsPositions"]
        tfcheck_strict = true
        tfcheck_format = "github"
    """)
    pytester.makepyfile(test_other="def test_other():\n    pass\n")
    result = pytester.runpytest("-k", "other or shape.contract or embedding.scale", "-p", "no:cacheprovider")
    assert failed_ids(result) == [f"tfcheck[{HEADLESS}]::shape.contract",
                                  "tfcheck[reference_model.broken:EmbeddingDrownsPositions]::embedding.scale"]
    out = result.stdout.str()
    assert "\n::error " in out and "\n::warning " in out  # tfcheck_format = "github"
    assert "test_other.py ." in out  # the project's own tests run beside them
    # Given paths, pytest runs those: the ini's models join the runs that collect from pytest's defaults.
    pytester.runpytest("test_other.py", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_command_line_overrides_the_ini_file(pytester):
    pytester.makepyprojecttoml(f"""
        [tool.pytest.ini_options]
        tfcheck = ["{HEADLESS}"]
        tfcheck_strict = true
        tfcheck_format = "github"
    """)
    result = pytester.runpytest("--tfcheck", "reference_model.broken:EmbeddingDrownsPositions", "--no-tfcheck-strict",
                                "--tfcheck-format=text", "-k", "embedding.scale", "-W", "default",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)  # not strict, and the ini's HEADLESS is not collected
    assert "::warning" not in result.stdout.str()


def test_a_bad_ini_value_is_a_usage_error_naming_the_file(pytester):
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ntfcheck_format = "xml"\n')
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tfcheck_format = 'xml' in *pyproject.toml: choose one of text, github*"])


# ----- 4. node ids that can be pasted back --------------------------------------------------------------------
def test_a_failing_items_id_pasted_back_reruns_that_item_alone(pytester, model_file):
    assert pytester.runpytest("--collect-only", "-q").ret == pytest.ExitCode.NO_TESTS_COLLECTED  # no model file
    first = pytester.runpytest("--tfcheck", "model.py:HeadlessGPT", *FOUNDATION, "-p", "no:cacheprovider")
    first.assert_outcomes(passed=1, failed=1, deselected=first.parseoutcomes()["deselected"])
    (nodeid,) = failed_ids(first)
    assert nodeid == "model.py::tfcheck[model.py:HeadlessGPT]::shape.contract"
    again = pytester.runpytest(nodeid, "-p", "no:cacheprovider")  # no --tfcheck
    again.assert_outcomes(failed=1)
    assert failed_ids(again) == [nodeid] and "collected 1 item" in again.stdout.str()


def test_a_model_listed_by_pyproject_hangs_under_pyproject_toml_and_its_id_reruns_it(pytester):
    pytester.makepyprojecttoml(f"""
        [[tool.tfcheck.models]]
        spec = "{LM}"
        name = "small"
        kwargs = {{d_model = 16, num_heads = 2}}

        [[tool.tfcheck.models]]
        spec = "{LM}"
        name = "wide"
        kwargs = {{d_model = 48, num_heads = 4}}
    """)
    listed = pytester.runpytest("--tfcheck-all", "-k", "smoke", "--collect-only", "-q")
    ids = [line for line in listed.stdout.lines if "::" in line]
    assert ids == ["pyproject.toml::tfcheck[small]::forward.smoke", "pyproject.toml::tfcheck[wide]::forward.smoke"]
    again = pytester.runpytest(ids[1], "--tfcheck-json", "r.json", "-p", "no:cacheprovider")
    again.assert_outcomes(passed=1)
    (model,) = json.loads((pytester.path / "r.json").read_text())["models"]
    assert model["spec"] == f"{LM}[wide]"
    assert next(a["value"] for a in model["assumptions"] if a["key"] == "d_model") == 48  # the wide entry's kwargs


def test_a_model_outside_the_rootdir_prints_the_command_that_reruns_a_failure(pytester):
    result = pytester.runpytest("--tfcheck", HEADLESS, "-k", "contract", "-p", "no:cacheprovider")
    (line,) = [text for text in result.stdout.lines if text.startswith("rerun: ")]
    assert line == f"rerun: pytest --tfcheck {HEADLESS} -k shape.contract"
    again = pytester.runpytest(*shlex.split(line)[2:], "-p", "no:cacheprovider")
    again.assert_outcomes(failed=1, deselected=again.parseoutcomes()["deselected"])


# ----- 5. -rA and --tb styles ---------------------------------------------------------------------------------
def test_rA_shows_each_checks_result_text(pytester):
    result = pytester.runpytest("--tfcheck", LM, "-k", "contract", "-rA", "-p", "no:cacheprovider")
    passes = section(result, "PASSES")
    assert "Captured tfcheck call" in passes and "PASS shape.contract: " in passes


@pytest.mark.parametrize("style", ["line", "short"])
def test_tb_styles_shape_the_failure(pytester, style):
    result = pytester.runpytest("--tfcheck", HEADLESS, "-k", "contract", f"--tb={style}", "-p", "no:cacheprovider")
    shown = [text for text in section(result, "FAILURES").splitlines() if text.strip()]
    if style == "line":
        assert len(shown) == 1 and re.fullmatch(r".*shapes\.py:\d+: FAIL shape\.contract: at batch 1, length 1 .*"
                                                r"\(also at 3x7, 1x64, 3x64\)", shown[0]), shown
    else:
        text = "\n".join(shown)
        assert "expected (1, 1, 101)" in text and "output-shape" in text
        assert "likely cause" not in text and "fix:" not in text  # the finding's first lines, not its row's story


# ----- 6. warnings at the model's line, and -W error ----------------------------------------------------------
def test_a_tfcheck_warning_points_at_the_model_and_under_W_error_is_a_clean_failure(pytester, model_file):
    args = ("--tfcheck", "model.py:LoudEmbeddingEncoder", "-k", "embedding.scale", "-p", "no:cacheprovider")
    shown = pytester.runpytest(*args, "-W", "default")
    shown.assert_outcomes(passed=1, warnings=1)
    shown.stdout.fnmatch_lines(["*reference_model/broken/numerics.py:*: TfcheckWarning: model.py:LoudEmbeddingEncoder "
                                "embedding.scale: *"])
    # pytest-benchmark warns at configure time when xdist is loaded (as under -n 2): not the warning meant here
    errors = pytester.runpytest(*args, "-W", "error", "-p", "no:benchmark")
    errors.assert_outcomes(failed=1)
    out = errors.stdout.str() + errors.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out and "tfcheck/pytest_plugin" not in out
    assert "raised as an error by the warning filters" in out and "positions drown in the token signal" in out


def test_a_configuration_warning_under_filterwarnings_error_is_a_usage_error_not_an_internal_error(pytester):
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n')
    result = pytester.runpytest("--tfcheck", LM, "--tfcheck", LM, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["*--tfcheck reference_model:TransformerLM given more than once*raised as an error*"])


# ----- 7. JUnit XML -------------------------------------------------------------------------------------------
def test_junit_xml_has_the_tfcheck_property_and_failure_messages_whole(pytester):
    xml = pytester.path / "junit.xml"
    pytester.runpytest("--tfcheck", HEADLESS, *FOUNDATION, f"--junitxml={xml}", "-p", "no:cacheprovider")
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    assert len(cases) == 2
    results = {}
    for case in cases:
        (prop,) = [p for p in case.iter("property") if p.get("name") == "tfcheck"]
        result = json.loads(prop.get("value"))
        assert result["spec"] == HEADLESS and case.get("name").endswith(result["check"])
        results[result["check"]] = (case, result)
    case, result = results["shape.contract"]
    message = result["findings"][0]["message"]
    assert len(message) > 80  # long enough that a terminal-width rendering wraps it
    failure = case.find("failure")
    assert failure.get("message") == f"FAIL shape.contract: {message}"
    assert message in failure.text  # the body is not hard-wrapped either


# ----- 8. xdist: one worker per model -------------------------------------------------------------------------
LOGGED_MODELS = """
import os
from pathlib import Path

from reference_model import TransformerLM

import torch

LOG = Path(__file__).with_name("events.log")


def note(event, model):
    with LOG.open("a") as log:
        worker = os.environ.get('PYTEST_XDIST_WORKER', '-')
        log.write(f"{event} {type(model).__name__} {worker} {torch.get_num_threads()}\\n")


class A(TransformerLM):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        note("built", self)

    def forward(self, tokens):
        note("forward", self)
        return super().forward(tokens)


class B(A):
    pass


class Big(A):
    pass


def big():  # over the engine's small-model line (5M parameters), below which a check runs on one thread anyway
    return Big(num_layers=1, d_model=128, num_heads=4, d_ff=256, vocab_size=40_000, max_len=64)
"""


USERS_TEST = """
from pathlib import Path

import torch


def test_users_own():
    Path(__file__).with_name("users_threads.log").write_text(str(torch.get_num_threads()))
"""


def worker_events(pytester) -> list[list[str]]:
    return [line.split() for line in (pytester.path / "events.log").read_text().splitlines()]


@pytest.mark.parametrize("dist", [("--dist", "loadgroup"), ()], ids=["loadgroup", "no --dist"])
def test_each_models_checks_run_in_one_worker(pytester, dist):
    # -n 2 alone runs as --dist loadgroup when tfcheck models are named: a model's shared work is done once.
    pytest.importorskip("xdist")
    pytester.makepyfile(logged=LOGGED_MODELS)
    result = pytester.runpytest_subprocess("--tfcheck", "logged.py:A", "--tfcheck", "logged.py:B", *FOUNDATION,
                                           "-n", "2", *dist, "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["scheduling tests via LoadGroupScheduling"])
    events = worker_events(pytester)
    for model in ("A", "B"):
        forwarded = {worker for event, name, worker, _ in events if event == "forward" and name == model}
        assert len(forwarded) == 1, (model, events)  # its trial forward and checks ran in one worker only
        # Each worker loads it once, at collection (one load may call the constructor more than once: tfcheck
        # sizes a build on the meta device first), whatever share of its items it runs.
        built = Counter(worker for event, name, worker, _ in events if event == "built" and name == model)
        assert set(built) == {"gw0", "gw1"} and built["gw0"] == built["gw1"], (model, built)


def test_a_dist_the_user_gives_is_kept(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(logged=LOGGED_MODELS)
    result = pytester.runpytest_subprocess("--tfcheck", "logged.py:A", "-k", "smoke", "-n", "2", "--dist", "load",
                                           "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["scheduling tests via LoadScheduling"])


@pytest.mark.parametrize("omp", [None, "2"], ids=["share", "user's OMP_NUM_THREADS"])
def test_a_workers_checks_use_its_share_of_the_cores(pytester, monkeypatch, omp):
    # Two workers each running one torch thread per core oversubscribe the cores; the user's own tests in the
    # worker keep torch's count, and a count the user set is kept.
    pytest.importorskip("xdist")
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    pytester.makepyfile(logged=LOGGED_MODELS, test_users=USERS_TEST)
    result = pytester.runpytest_subprocess("--tfcheck", "logged.py:big", "-k", "smoke or users", "-n", "2",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    users = int((pytester.path / "users_threads.log").read_text())
    in_checks = {int(threads) for event, _, _, threads in worker_events(pytester) if event == "forward"}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    expected = min(users, max(1, cores // 2)) if omp is None else int(omp)
    assert in_checks == {expected}, (in_checks, users, cores)


# ----- 9. budget overruns -------------------------------------------------------------------------------------
OVER = ("--tfcheck", LM, "--tfcheck-set", "budget_s=0.001", "-p", "no:cacheprovider")


# Without a policy an overrun stays the library's inconclusive skip (test_reliability's budget tests).
@pytest.mark.parametrize("policy,outcome", [(("--tfcheck-budget-overrun=fail",), "failed"),
                                            (("--tfcheck-strict",), "failed"),
                                            (("--tfcheck-strict", "--tfcheck-budget-overrun=skip"), "skipped")])
def test_a_budget_overrun_is_skipped_or_failed_as_asked(pytester, policy, outcome):
    result = pytester.runpytest(*OVER, "-k", "smoke", "-rs", *policy)
    result.assert_outcomes(**{outcome: 1}, deselected=result.parseoutcomes()["deselected"])
    assert "forward.smoke stopped after" in result.stdout.str()


def test_the_ini_policy_fails_a_check_blocked_by_an_unselected_smoke_over_budget(pytester):
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ntfcheck_budget_overrun = "fail"\n')
    result = pytester.runpytest(*OVER, "-k", "contract")
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    out = " ".join(result.stdout.str().split())
    assert "blocked by forward.smoke: forward.smoke stopped after" in out
    assert "fails under budget_overrun=fail (from ini tfcheck_budget_overrun)" in out
