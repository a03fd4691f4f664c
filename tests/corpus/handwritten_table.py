"""The hand-written corpus: Transformers written in the style of public code (tutorials, books, reference
implementations; tests/corpus/handwritten/, each file's docstring names its style), each run zero-config as a
new user would type it. Each file holds the correct model and one ``Buggy*`` variant whose one changed line
carries ``# injected bug``: the bug must FAIL the named check at that line; the correct model must get no FAIL
and only the non-passes EXPLAINED says are true of its code. GAPS lists what tfcheck does not do yet, each
expected to fail (strictly: a gap that closes fails its test until it is taken off the list)."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

FOLDER = Path(__file__).parent / "handwritten"
BUG_MARK = "# injected bug"


@dataclass(frozen=True)
class Handwritten:
    file: str
    correct: str  # the attribute a new user's spec names
    buggy: str
    catches: str  # the check the injected bug must FAIL

    def spec(self, attribute: str) -> str:
        return f"{FOLDER / self.file}:{attribute}"

    @property
    def bug_line(self) -> int:
        lines = (FOLDER / self.file).read_text().splitlines()
        found = [i for i, line in enumerate(lines, 1) if BUG_MARK in line]
        assert len(found) == 1, f"{self.file}: one line must carry {BUG_MARK!r}, found {found}"
        return found[0]

    @property
    def bug_statement(self) -> range:
        """The lines of the innermost simple statement holding the marked line (a call written over two lines
        is reported at its first)."""
        tree = ast.parse((FOLDER / self.file).read_text())
        spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
                 if isinstance(n, ast.stmt) and not hasattr(n, "body") and n.lineno <= self.bug_line
                 <= (n.end_lineno or n.lineno)]
        first, last = min(spans, key=lambda span: span[1] - span[0], default=(self.bug_line, self.bug_line))
        return range(first, last + 1)


HANDWRITTEN: dict[str, Handwritten] = {
    "nanogpt": Handwritten("nanogpt.py", "GPT", "BuggyGPT", "mask.causal"),
    "llms-from-scratch": Handwritten("llms_from_scratch.py", "GPTModel", "BuggyGPTModel", "attention.heads"),
    "gpt-lecture": Handwritten("karpathy_gpt_lecture.py", "GPTLanguageModel", "BuggyGPTLanguageModel",
                               "attention.scale"),
    "llama-reference": Handwritten("llama_reference.py", "Transformer", "BuggyTransformer", "mask.causal"),
    "zero-init-gpt": Handwritten("zero_init_gpt.py", "GPT", "BuggyGPT", "mask.causal"),
    "padded-vocab-gpt": Handwritten("padded_vocab_gpt.py", "GPT", "BuggyGPT", "mask.causal"),
    "annotated-transformer": Handwritten("annotated_transformer.py", "make_model", "BuggyMakeModel",
                                         "attention.scale"),
    "bentrevett-seq2seq": Handwritten("bentrevett_seq2seq.py", "build_model", "BuggyBuildModel", "mask.causal"),
    "targets-seq2seq": Handwritten("targets_seq2seq.py", "Transformer", "BuggyTransformer", "mask.causal"),
    "additive-mask-encoder": Handwritten("additive_mask_encoder.py", "TransformerEncoder", "BuggyTransformerEncoder",
                                         "position.sensitivity"),
    "relation-mask-encoder": Handwritten("relation_mask_encoder.py", "RelationAwareEncoder",
                                         "BuggyRelationAwareEncoder", "attention.heads"),
    "bert-classifier": Handwritten("bert_style_classifier.py", "BertClassifier", "BuggyBertClassifier",
                                   "mask.padding"),
    "encode-decode-project": Handwritten("encode_decode_project.py", "build_transformer", "BuggyBuildTransformer",
                                         "attention.softmax_axis"),
    "gpt-fast-caches": Handwritten("gpt_fast_caches.py", "Transformer", "BuggyTransformer", "mask.causal"),
    "longhand-options-gpt": Handwritten("longhand_options_gpt.py", "LanguageModel", "BuggyLanguageModel",
                                        "mask.causal"),
}

#: What each model is, by its authors' intent (the truth a hint is judged against): kind and causality.
TRUTH: dict[str, tuple[str, bool]] = {
    **dict.fromkeys(("nanogpt", "llms-from-scratch", "gpt-lecture", "llama-reference", "zero-init-gpt",
                     "padded-vocab-gpt", "gpt-fast-caches", "longhand-options-gpt"), ("decoder", True)),
    **dict.fromkeys(("annotated-transformer", "bentrevett-seq2seq", "targets-seq2seq", "encode-decode-project"),
                    ("seq2seq", True)),
    **dict.fromkeys(("additive-mask-encoder", "relation-mask-encoder", "bert-classifier"), ("encoder", False)),
}

MINUS_1E9_IN_HALF = ("the scores are filled with -1e9 (or -1e20), which float16 cannot hold (its largest magnitude is "
                     "65504): true of the code, and the warning says so; the model is correct in float32")

#: (model, check) -> why the correct model's non-pass there is true of its code.
EXPLAINED: dict[tuple[str, str], str] = {
    ("annotated-transformer", "numerics.half"): MINUS_1E9_IN_HALF,
    ("targets-seq2seq", "numerics.half"): MINUS_1E9_IN_HALF,
    ("encode-decode-project", "numerics.half"): MINUS_1E9_IN_HALF,
    ("bentrevett-seq2seq", "numerics.half"): (
        "the scores are filled with -1e10 (masked_fill(mask == 0, -1e10)), which float16 cannot hold (its largest "
        "magnitude is 65504): true of the code, and the warning says so; the model is correct in float32"),
    ("gpt-fast-caches", "position.sensitivity"): (
        "the keys come from the KV cache setup_caches allocates, max_seq_length long and rounded up to a multiple of "
        "8 (find_multiple): at length 7 the scores are (7, 8), not (7, 7), so the first attention is not found and "
        "the check says so (inconclusive); mask.causal and attention.heads read the same sites"),
    ("additive-mask-encoder", "embedding.scale"): (
        "the lookup is nn.Embedding's N(0, 1) init multiplied by sqrt(d_model), which drowns its sinusoidal table "
        "by a factor of about 8: true of the code, the warning names the init line"),
}

#: (model, "correct" | "bug") -> what tfcheck does not do yet on it.
GAPS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Outcome:
    """One hand-written model run as a new user would: the correct model zero-config, then its bug."""

    name: str
    ran: bool  # the battery ran on the correct model (no usage error, forward.smoke passed)
    unexplained: tuple[str, ...]  # "check: STATUS reason" of each FAIL, ERROR, WARN or skip EXPLAINED does not cover
    bug_status: str  # the status the injected bug's check got
    bug_line_named: bool  # the bug's finding points at the changed line
    detail: str  # the first line of what went wrong, for a reader

    @property
    def clean(self) -> bool:
        return self.ran and not self.unexplained

    @property
    def bug_fails(self) -> bool:
        return self.bug_status == "FAIL"


@cache
def zero_config(name: str):
    """The correct model's zero-config report, run once per process: test_hints.py follows the hints it prints."""
    import tfcheck

    entry = HANDWRITTEN[name]
    return tfcheck.run_checks(entry.spec(entry.correct))


def evaluate(name: str) -> Outcome:
    """Run one entry: the correct model's whole battery and the buggy model's one check."""
    import tfcheck
    from tfcheck import Status, UsageError

    entry = HANDWRITTEN[name]
    try:
        report = zero_config(name).models[0]
    except UsageError as exc:
        return Outcome(name, False, (), "not run", False, f"usage error: {str(exc).splitlines()[0][:160]}")
    smoke = report.result("forward.smoke")
    ran = smoke.status is Status.PASS
    unexplained = tuple(
        f"{r.check}: {r.status.name} {r.findings[0].message.splitlines()[0][:120] if r.findings else ''}"
        for r in report.results
        if r.status is not Status.PASS and (name, r.check) not in EXPLAINED
        and not any("blocked by" in f.message for f in r.findings))
    try:
        bug = tfcheck.run_checks(entry.spec(entry.buggy), only=[entry.catches]).models[0].result(entry.catches)
    except UsageError as exc:
        return Outcome(name, ran, unexplained, "not run", False, f"bug: usage error: {str(exc).splitlines()[0][:120]}")
    named = any(f.location.line in entry.bug_statement and (f.location.file or "").endswith(entry.file)
                for f in bug.findings if f.status is Status.FAIL)
    detail = unexplained[0] if unexplained else (bug.findings[0].message.splitlines()[0][:160]
                                                  if bug.findings and bug.status is not Status.FAIL else "")
    return Outcome(name, ran, unexplained, bug.status.name, named, detail)
