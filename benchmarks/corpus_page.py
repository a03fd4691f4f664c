"""Writes docs/models/corpus.md from a real run of the battery on every corpus model (run: python
benchmarks/corpus_page.py, with the corpus extra installed: pip install -c constraints.txt -e ".[test,corpus]").

Each model of tests/corpus/corpus.py is run zero-config (or with the one declaration the corpus gives it), and the
page lists its package and version, its spec, its status and every check that did not pass, with the reason from
the corpus tables (a warning or skip explained, the real bug of a package, or a known false alarm of tfcheck),
then the packages left out and why. A result that no table explains stops the script: the page never says more
than the run showed. The page carries a fingerprint of this script, the corpus definition, the package versions
and the model list; tests/corpus/test_corpus_page.py recomputes it, so a page older than any of them fails.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import tfcheck
from tfcheck import Status

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "tests" / "corpus"
PAGE = ROOT / "docs" / "models" / "corpus.md"
#: the files whose content decides what the page says, besides the run itself
SOURCES = (Path(__file__).resolve(), CORPUS_DIR / "corpus.py", CORPUS_DIR / "corpus_models.py")
MARK = "<!-- corpus fingerprint: "

sys.path.insert(0, str(CORPUS_DIR))

from corpus import CORPUS, DROPPED, EXPLAINED, KNOWN_FALSE_ALARMS, REAL_BUGS  # noqa: E402


def fingerprint() -> str:
    digest = hashlib.sha256()
    for path in SOURCES:
        digest.update(path.read_bytes())
    for name, member in CORPUS.items():
        digest.update(f"{name}={member.package}=={member.version}:{member.spec}:{sorted(member.declared.items())}\n"
                      .encode())
    return digest.hexdigest()[:16]


def stated_fingerprint(text: str) -> str | None:
    start = text.find(MARK)
    return text[start + len(MARK):].split(" ", 1)[0] if start >= 0 else None


def why(name: str, check: str) -> tuple[str, str]:
    """(which table, the reason) of a check that did not pass."""
    for label, table in (("explained", EXPLAINED), ("real bug", REAL_BUGS), ("false alarm", KNOWN_FALSE_ALARMS)):
        if (name, check) in table:
            return label, table[(name, check)]
    raise SystemExit(f"{name}: {check} did not pass and no corpus table explains it: fix tests/corpus/corpus.py")


def run(name: str) -> tuple[str, int, list[tuple[str, str, str, str]]]:
    """(model status, passes, [(check, status, table, reason)]) from one zero-config run."""
    member = CORPUS[name]
    report = tfcheck.run_checks(member.spec, **member.declared).models[0]
    rows = [(r.check, r.status.value, *why(name, r.check)) for r in report.results if r.status is not Status.PASS]
    return report.status.value, sum(r.status is Status.PASS for r in report.results), rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def page(results: dict[str, tuple[str, int, list]]) -> str:
    import torch  # only here: importing the script (the page test does) needs no torch

    lines = [
        "# The corpus: real implementations from PyPI",
        "",
        f"{MARK}{fingerprint()} (written by benchmarks/corpus_page.py; do not edit by hand) -->",
        "",
        "Transformer implementations installed from PyPI as they are (the `corpus` extra of `pyproject.toml`, "
        "every package pinned), run by",
        "`tests/corpus/` zero-config: no failure and no error except where listed below, every warning and skip "
        "explained, and one",
        "injected defect per package caught by the right check. Install and run them with",
        "",
        "<!-- console: not run: installs packages and runs the corpus tests (minutes); .ci/run runs them -->",
        "```console",
        "pip install -c constraints.txt -e \".[test,corpus]\" && pytest tests/corpus -n 2",
        "```",
        "",
        "(`constraints.txt` pins torch, which the corpus packages would otherwise let pip replace with a CUDA build.) "
        "The factories",
        "named `corpus_models:...` are in `tests/corpus/corpus_models.py`: each calls its package's README "
        "constructor at tiny sizes.",
        "",
        f"Written from a run with tfcheck {tfcheck.__version__} and torch {torch.__version__}.",
        "",
        "| model | package | spec | status | pass | not passed |",
        "|-------|---------|------|--------|------|------------|",
    ]
    for name, (status, passes, rows) in results.items():
        member = CORPUS[name]
        spec = f"`{member.spec}`" + "".join(f" `{k}={v}`" for k, v in member.declared.items())
        checks = ", ".join(f"`{check}` {state}" for check, state, _, _ in rows) or "—"
        lines.append(f"| {name} | {member.package}=={member.version} | {spec} | {status} | {passes} | {checks} |")
    lines += ["", "## Every result that is not a pass, and why", "",
              "`explained`: a correct model gets it, and must; `real bug`: the package has the bug; `false alarm`: "
              "tfcheck is wrong",
              "there (the cause and the place of the fix; expected by the tests until the fix lands).", "",
              "| model | check | status | kind | why |", "|-------|-------|--------|------|-----|"]
    for name, (_, _, rows) in results.items():
        lines += [f"| {name} | `{check}` | {state} | {label} | {_cell(reason)} |" for check, state, label, reason
                  in rows]
    lines += ["", "## Packages left out", "", "| package | why |", "|---------|-----|"]
    lines += [f"| {package} | {_cell(reason)} |" for package, reason in DROPPED.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the page's fingerprint is current")
    args = parser.parse_args()
    if args.check:
        current = stated_fingerprint(PAGE.read_text("utf-8")) == fingerprint()
        print("current" if current else "stale: run python benchmarks/corpus_page.py")
        raise SystemExit(0 if current else 1)
    missing = sorted({m.package for m in CORPUS.values() if m.version is None})
    if missing:
        raise SystemExit(f"not installed: {', '.join(missing)} (pip install -c constraints.txt -e '.[test,corpus]')")
    results = {}
    for name in CORPUS:
        results[name] = run(name)
        print(f"{name:24} {results[name][0]}")
    PAGE.write_text(page(results), "utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
