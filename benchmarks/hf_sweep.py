"""Writes docs/models/huggingface-sweep.md from a real run of the battery on the text model classes transformers
ships (run: nohup nice -n 19 python benchmarks/hf_sweep.py --jobs 1 > /tmp/hf_sweep.log 2>&1 &).

The classes are read from transformers' auto mappings (MODEL_FOR_CAUSAL_LM, MODEL_FOR_MASKED_LM,
MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM and MODEL_MAPPING, the *_NAMES tables: each lists the class of every family for
one head, without importing a model), keeping the names ending in ForCausalLM, ForMaskedLM,
ForConditionalGeneration or Model (never *PreTrainedModel). A class is text when its forward takes input_ids
(and main_input_name says so), no pixel, image, video, audio or feature input, no box per token (bbox), and its
config is no vision or audio config, has no such sub-config, and asks for nothing beside the tokens (codebook rows
of audio codes, read from a num_codebooks or a delay_pattern of one delay per codebook in the config or a sub-config;
a language for a forward lang_ids that has no default); and the class runs alone: its forward does not raise without
inputs that only another model makes (an `if X is None: raise` over parameters other than the tokens and the mask,
read from its source by tfcheck.model.facts.required_inputs, as tfcheck's own build refuses it). The others
are listed as skipped with the input, config or line that says so. A class the mappings list but transformers does
not export at its top level is built from the modeling module of its family.
Each text class is built by tfcheck from a small config on CPU with HF_HUB_OFFLINE=1 in a worker process, which
is killed past --class-limit seconds (each check also has tfcheck's own budget_s), so one slow or crashing class
cannot stall the sweep. A build error that asks for a download or a package/kernel not installed is a skip with
its first line; any other is "could not be built:" with tfcheck's own reason (the config fields the constructor reads
unset and the declaration that gives them) where it says one, else the error's first line.

Every text class is swept, one class per family first (the seq2seq LM, else the causal LM, else the masked LM,
else the base model; families alphabetically), then the others, for at most --minutes (--scope family stops
after the first pass); the page names every class not swept and why. Results are cached per class (keyed by the
versions, tfcheck's own source and the limits, not by this script's page layout), so a run that was stopped
resumes and --only CLASS reruns one class; the page is always written from the cache.

The page carries a fingerprint of this script, the tfcheck/transformers/torch versions and the class list;
--check recomputes it and exits 1 when the page is stale (tests/integration/test_hf_sweep_page.py runs it).
benchmarks/corpus_page.py's helpers are tied to its own page marker and import the corpus tables, so the few
lines they share are written again here rather than imported.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import inspect
import json
import multiprocessing
import os
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "models" / "huggingface-sweep.md"
MARK = "<!-- hf sweep fingerprint: "
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tfcheck" / "hf_sweep"

#: head -> the auto mapping that lists its class per family, in the order one class per family is chosen
HEADS = {  # the seq2seq class first: an encoder-decoder family's ForCausalLM is its decoder alone
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "base": "MODEL_MAPPING_NAMES",
}
SUFFIXES = ("ForCausalLM", "ForMaskedLM", "ForConditionalGeneration", "Model")
NON_TEXT_INPUT = re.compile(r"pixel|image|video|visual|audio|speech|spectrogram|input_features|input_values|latents")
NON_TEXT_CONFIG = re.compile(r"vision|visual|image|video|audio|speech|acoustic|codec|backbone|vq_|vlm|multimodal")
#: Inputs beside the tokens that make a class more than a text model, read from its forward and its default config:
#: a box per token (a document-layout model: Bros raises without it, LiLT and LayoutLM fill zeros), codebook rows
#: (input_ids of batch x num_codebooks rows of audio codes: Musicgen), a language the model must be told (a forward
#: lang_ids beside a config whose default_language is unset: Xmod raises without one).
LAYOUT_INPUT = re.compile(r"bbox|boxes")
CODEBOOKS_FIELD, DELAYS_FIELD = "num_codebooks", "delay_pattern"
#: Forward parameters tfcheck gives every model: a forward that raises without any other is not standalone.
GIVEN_INPUTS = ("input_ids", "attention_mask")
LANGUAGE_INPUT, DEFAULT_LANGUAGE_FIELD = "lang_ids", "default_language"
NEEDS_DOWNLOAD = re.compile(r"offline|couldn't connect|huggingface\.co|from_pretrained|pretrained weights", re.I)
NEEDS_PACKAGE = re.compile(r"requires? the .* librar|pip install|no module named|is not installed|cuda|kernel|"
                           r"flash.?attn|triton", re.I)

#: seconds each check may run (tfcheck's budget_s) and each class may take, build included (the worker is killed)
CHECK_BUDGET_S = 15.0
CLASS_LIMIT_S = 120.0
SWEEP_MINUTES = 60.0
#: how often and how long a worker that cannot import tfcheck (another edit half-way) is waited for
STARTUP_RETRIES, STARTUP_WAIT_S = 5, 60.0
#: bumped whenever sweep_one or build_error changes what one class's outcome says
CACHE_FORMAT = 2


@dataclass(frozen=True)
class Candidate:
    name: str
    family: str  # the model_type the mapping lists it under
    head: str


@dataclass
class Outcome:
    result: str  # PASS, WARN, FAIL, ERROR, SKIP, NOT BUILT, CRASHED
    reason: str = ""
    #: (check, status, the first line of its first finding) for every check that warned, failed or erred
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    skipped_checks: int = 0
    seconds: float = 0.0  # wall time as the sweep saw it, build included
    tfcheck_source: str = ""  # tfcheck_source_digest() of the run: --only adds to an older run's results


# ----- the class list and the fingerprint (no torch needed) ---------------------------------------------------

def candidates() -> list[Candidate]:
    """Every mapped class with a text-model name, once (under the first head and family that list it)."""
    from transformers.models.auto import modeling_auto

    found: dict[str, Candidate] = {}
    for head, mapping in HEADS.items():
        for family, names in sorted(getattr(modeling_auto, mapping).items()):
            for name in names if isinstance(names, list | tuple) else [names]:
                if name.endswith(SUFFIXES) and not name.lower().endswith("pretrainedmodel"):
                    found[name] = _better(found.get(name), Candidate(name, family, head))
    return sorted(found.values(), key=lambda c: (c.family, list(HEADS).index(c.head), c.name))


def _better(known: Candidate | None, other: Candidate) -> Candidate:
    """Of two listings of one class, the first, unless only the other's family names the class (GPT2LMHeadModel
    is listed under gpt-sw3 before gpt2)."""
    if known is None:
        return other
    return other if _names(other) and not _names(known) else known


def _names(candidate: Candidate) -> bool:
    return candidate.name.lower().startswith(re.sub(r"[-_]", "", candidate.family))


def versions() -> dict[str, str]:
    return {package: importlib.metadata.version(package) for package in ("tfcheck", "transformers", "torch")}


def fingerprint() -> str:
    digest = hashlib.sha256(Path(__file__).resolve().read_bytes())
    digest.update(json.dumps(versions(), sort_keys=True).encode())
    digest.update("".join(f"{c.family}:{c.head}:{c.name}\n" for c in candidates()).encode())
    return digest.hexdigest()[:16]


def stated_fingerprint(text: str) -> str | None:
    start = text.find(MARK)
    return text[start + len(MARK):].split(" ", 1)[0] if start >= 0 else None


def tfcheck_source_digest() -> str:
    """The cache is only good for the tfcheck that produced it: the version string does not change with edits."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "tfcheck").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".toml", ".json"):
            digest.update(path.relative_to(ROOT).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(budget_s: float, class_limit_s: float) -> str:
    """What decides one class's outcome: not this script's page layout (so the page can be rewritten from a
    cache), but the versions, tfcheck's source, the limits and how a class is run (CACHE_FORMAT)."""
    digest = hashlib.sha256(json.dumps([CACHE_FORMAT, versions(), budget_s, class_limit_s]).encode())
    return f"{digest.hexdigest()[:12]}-{tfcheck_source_digest()}"


# ----- which classes are text ----------------------------------------------------------------------------------

def model_spec(name: str) -> str:
    """tfcheck's spec for a mapped class: transformers' top level, else the modeling module of the family the
    mappings list it under (VoxtralRealtimeTextModel is mapped but not exported)."""
    import transformers

    if hasattr(transformers, name):
        return f"transformers:{name}"
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    family = next((c.family for c in candidates() if c.name == name), None)
    if family is None:
        return f"transformers:{name}"
    package = model_type_to_module_name(family)
    return f"transformers.models.{package}.modeling_{package}:{name}"


def model_class(name: str) -> type:
    module, attribute = model_spec(name).split(":")
    return getattr(importlib.import_module(module), attribute)


def non_text_reason(name: str) -> str | None:
    """Why a class is not a text model (from its main input, its forward's inputs, its config), or None."""
    cls = model_class(name)
    main = getattr(cls, "main_input_name", "input_ids")
    if main != "input_ids":
        return f"non-text input: main_input_name = {main!r}"
    parameters = [p for p in inspect.signature(cls.forward).parameters if p not in ("self", "args", "kwargs")]
    if "input_ids" not in parameters:
        first = parameters[0] if parameters else None
        return f"non-text input: forward takes no input_ids (its first input is {first})"
    inputs = [p for p in parameters if NON_TEXT_INPUT.search(p)]
    if inputs:
        return f"non-text input: forward takes {', '.join(inputs[:3])}"
    layout = [p for p in parameters if LAYOUT_INPUT.fullmatch(p)]
    if layout:
        return f"layout input: forward takes {layout[0]} (a box per token, beside the text)"
    config = cls.config_class
    if NON_TEXT_CONFIG.search(config.__name__.lower()) or NON_TEXT_CONFIG.search(str(config.model_type)):
        return f"non-text config: {config.__name__} (model_type {config.model_type!r})"
    subs = [k for k in getattr(config, "sub_configs", None) or {} if NON_TEXT_CONFIG.search(k)]
    if subs:
        return f"multimodal: {config.__name__} has {', '.join(subs[:3])}"
    return _extra_input(config, parameters) or _not_standalone(cls)


def _not_standalone(cls: type) -> str | None:
    """The line where the forward raises without inputs only another model makes, or None."""
    from tfcheck.model.facts.required_inputs import required_at_runtime

    needed = required_at_runtime(cls.forward)
    missing = [n for n in needed.names if n not in GIVEN_INPUTS] if needed else []
    if not needed or not missing:
        return None
    return (f"not standalone: forward raises when {' or '.join(missing)} is None ({Path(needed.file).name}:"
            f"{needed.line}): it runs on inputs another model makes; declare inputs= to check it")


def _extra_input(config: type, parameters: list[str]) -> str | None:
    """An input the default config says the tokens need beside them (codebook rows, a language), or None."""
    try:
        default = config()
    except Exception:  # a config that cannot be built alone is left to the worker, whose build reports it
        return None
    codebooks = _codebooks(default)
    if codebooks is not None:
        field_name, count = codebooks
        return f"audio codes: {field_name} = {count}: its ids are {count} audio codes per position, one per codebook"
    if LANGUAGE_INPUT in parameters and getattr(default, DEFAULT_LANGUAGE_FIELD, "") is None:
        return (f"needs a language: forward takes {LANGUAGE_INPUT} and {config.__name__}.{DEFAULT_LANGUAGE_FIELD} "
                "is unset (the model raises without one)")
    return None


def _codebooks(default) -> tuple[str, int] | None:
    """(the field, how many codebooks) where the config or one of its sub-configs counts codebooks: num_codebooks,
    or a delay_pattern (Dia's decoder takes one delayed row of audio codes per entry)."""
    configs = [("", default)] + [(f"{key}.", getattr(default, key, None)) for key in
                                 getattr(default, "sub_configs", None) or {}]
    for prefix, config in configs:
        count = getattr(config, CODEBOOKS_FIELD, None)
        if isinstance(count, int) and count > 1:
            return f"{type(default).__name__}.{prefix}{CODEBOOKS_FIELD}", count
        delays = getattr(config, DELAYS_FIELD, None)
        if isinstance(delays, list | tuple) and len(delays) > 1:
            return f"{type(default).__name__}.{prefix}{DELAYS_FIELD} (one delay per codebook)", len(delays)
    return None


def classify(all_candidates: Iterable[Candidate]) -> dict[str, str | None]:
    """Class name -> the reason it is not swept as text (None: text). A class that cannot even be imported is
    left to the worker, whose build reports the error."""
    reasons = {}
    for candidate in all_candidates:
        try:
            reasons[candidate.name] = non_text_reason(candidate.name)
        except Exception:
            reasons[candidate.name] = None
    return reasons


def one_per_family(text: list[Candidate]) -> list[Candidate]:
    chosen: dict[str, Candidate] = {}
    for candidate in text:  # candidates() orders each family's heads by preference
        chosen.setdefault(candidate.family, candidate)
    return list(chosen.values())


# ----- one class, in a worker ----------------------------------------------------------------------------------

def first_line(exc: BaseException) -> str:
    """The exception's first line, and the next one where the first only introduces it ("raised ImportError:")."""
    text = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = " ".join(text[:2]) if len(text) > 1 and text[0].endswith(":") else text[0] if text else ""
    return f"{type(exc).__name__}: {head}"[:240]


def build_error(exc: BaseException) -> Outcome:
    line = first_line(exc)
    if NEEDS_DOWNLOAD.search(str(exc)):  # the whole message: tfcheck's first line names the call, not the cause
        return Outcome("SKIP", f"needs downloaded weights or files: {line}")
    if NEEDS_PACKAGE.search(str(exc)):
        return Outcome("SKIP", f"needs a package or kernel not installed: {line}")
    return Outcome("NOT BUILT", f"could not be built: {build_reason(exc)}")


def build_reason(exc: BaseException) -> str:
    """tfcheck's refusal as a reader needs it: what the constructor raised, where (a file name, not the path), and
    the declaration that gives what it needs; the first line where tfcheck says no more than the error."""
    text = " ".join(str(exc).split())
    advice = re.search(r"(The constructor reads|Give the constructor)", text)
    if advice is None:
        return first_line(exc)
    raised = re.search(r"raised (\w+: .*?) \((/[^()]*?/)?([^/()]+\.py:\d+)\)", text[:advice.start()])
    what = f"the constructor raised {raised.group(1)} at {raised.group(3)}. " if raised else ""
    return (what + re.sub(r"/[^ ()]*/([^/ ()]+[.]py)", r"\1", text[advice.start():]))[:600]


def sweep_one(name: str, budget_s: float) -> Outcome:
    import tfcheck
    from tfcheck import Status

    try:
        report = tfcheck.run_checks(model_spec(name), budget_s=budget_s).models[0]
    except Exception as exc:  # run_checks raises only when the subject cannot be built; checks report their own
        return build_error(exc)
    problems = [(r.check, r.status.value, _finding_line(r)) for r in report.results
                if r.status in (Status.WARN, Status.FAIL, Status.ERROR)]
    worst = {p[1] for p in problems}
    result = "ERROR" if "error" in worst else "FAIL" if "fail" in worst else "WARN" if worst else "PASS"
    return Outcome(result, problems=problems, skipped_checks=sum(r.status is Status.SKIP for r in report.results))


def _finding_line(result) -> str:
    messages = [f.message for f in result.findings if f.status is result.status] or [""]
    return messages[0].strip().splitlines()[0][:200] if messages[0].strip() else ""


def worker(conn: Connection, budget_s: float) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers  # noqa: F401

        import tfcheck  # noqa: F401
    except Exception as exc:  # tfcheck half-way through another edit: the parent waits and starts a new worker
        conn.send(("startup", first_line(exc)))
        return
    conn.send(("ready", ""))
    while (name := conn.recv()) is not None:
        conn.send(("done", asdict(sweep_one(name, budget_s))))


# ----- the sweep: workers, the per-class limit, the cache ------------------------------------------------------

class Slot:
    """One worker process and the class it is running (if any)."""

    def __init__(self, budget_s: float):
        parent, child = multiprocessing.get_context("spawn").Pipe()
        self.conn = parent
        self.process = multiprocessing.get_context("spawn").Process(target=worker, args=(child, budget_s),
                                                                    daemon=True)
        self.process.start()
        child.close()
        try:
            kind, message = self.conn.recv() if self.conn.poll(300) else ("startup", "no answer in 300 s")
        except EOFError:
            kind, message = "startup", f"the worker died (exit code {self.process.exitcode})"
        if kind != "ready":
            self.stop()
            raise RuntimeError(message)
        self.name: str | None = None
        self.started = 0.0

    def give(self, name: str) -> None:
        self.name, self.started = name, time.monotonic()
        self.conn.send(name)

    def stop(self) -> None:
        self.process.kill()
        self.process.join()


def start_slot(budget_s: float) -> Slot:
    for _ in range(STARTUP_RETRIES):
        try:
            return Slot(budget_s)
        except RuntimeError as exc:
            print(f"worker could not start ({exc}); waiting {STARTUP_WAIT_S:g} s", flush=True)
            time.sleep(STARTUP_WAIT_S)
    raise SystemExit("no worker could import tfcheck: rerun when the tree is consistent")


class Cache:
    """Per-class outcomes, one JSON line each, in a file named for what decides them."""

    def __init__(self, key: str, latest: bool = False):
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        self.path = CACHE_DIR / f"{key}.jsonl"
        if latest:  # the newest run with these versions and limits, whatever tfcheck's source was then
            runs = sorted(CACHE_DIR.glob(f"{key.split('-')[0]}-*.jsonl"), key=lambda p: p.stat().st_mtime)
            self.path = runs[-1] if runs else self.path
        self.outcomes: dict[str, Outcome] = {}
        if self.path.exists():
            for line in self.path.read_text("utf-8").splitlines():
                entry = json.loads(line)
                name, problems = entry.pop("name"), [tuple(p) for p in entry.pop("problems")]
                entry.setdefault("tfcheck_source", self.path.stem.split("-")[-1])  # the run the file is named for
                self.outcomes[name] = Outcome(**entry, problems=problems)  # a later line (--only) replaces it

    def put(self, name: str, outcome: Outcome) -> None:
        self.outcomes[name] = outcome
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"name": name, **asdict(outcome)}) + "\n")


def sweep(names: list[str], cache: Cache, jobs: int, class_limit_s: float, minutes: float, budget_s: float) -> None:
    queue = [n for n in names if n not in cache.outcomes]
    if not queue:
        return
    stop_at = time.monotonic() + minutes * 60
    slots = [start_slot(budget_s) for _ in range(min(jobs, len(queue)))]
    try:
        _feed(slots, queue, cache, class_limit_s, stop_at, budget_s)
    finally:
        for slot in slots:
            slot.stop()


def _feed(slots: list[Slot], queue: list[str], cache: Cache, class_limit_s: float, stop_at: float,
          budget_s: float) -> None:
    source = tfcheck_source_digest()
    while True:
        for slot in slots:
            if slot.name is None and slot.process.is_alive() and queue and time.monotonic() < stop_at:
                slot.give(queue.pop(0))
        busy = [s for s in slots if s.name is not None]
        if not busy:
            return
        next_limit = min(s.started + class_limit_s for s in busy) - time.monotonic()
        wait([s.conn for s in busy] + [s.process.sentinel for s in busy], timeout=max(next_limit, 0.1))
        for i, slot in enumerate(slots):
            outcome = _collect(slot, class_limit_s)
            if outcome is None:
                continue
            outcome.tfcheck_source = source
            cache.put(slot.name, outcome)
            print(f"{slot.name:48} {outcome.result:9} {outcome.seconds:6.1f} s {outcome.reason[:80]}", flush=True)
            slot.name = None
            if not slot.process.is_alive() and queue and time.monotonic() < stop_at:  # killed past its limit, or died
                slots[i] = start_slot(budget_s)


def _collect(slot: Slot, class_limit_s: float) -> Outcome | None:
    """The outcome of the slot's class once there is one: its answer, its death, or its time running out."""
    if slot.name is None:
        return None
    elapsed = round(time.monotonic() - slot.started, 1)
    if slot.conn.poll():
        try:
            _, answer = slot.conn.recv()
            answer["problems"] = [tuple(p) for p in answer["problems"]]
            return Outcome(**{**answer, "seconds": elapsed})
        except EOFError:
            pass
    if not slot.process.is_alive():
        return Outcome("CRASHED", f"the worker process died (exit code {slot.process.exitcode})", seconds=elapsed)
    if elapsed > class_limit_s:
        slot.stop()
        return Outcome("SKIP", f"over the sweep's limit of {class_limit_s:g} s per class (build and battery)",
                       seconds=elapsed)
    return None


# ----- the page ------------------------------------------------------------------------------------------------

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


#: Failures found to be true, in transformers' own code (class -> (check, the evidence and the line)): the page marks
#: them, so that a reader can tell a bug tfcheck found from a false alarm still to fix. Each was measured against
#: the model's code by hand; a class whose failure is gone, or that fails another check, is not marked.
TRUE_FINDINGS: dict[str, tuple[str, str]] = {
    "VoxtralRealtimeTextModel": ("forward.smoke", (
        "its decoder layers apply ada_rms_norm(t_cond) unconditionally (modeling_voxtral_realtime.py:728), t_cond "
        "defaulting to None, and only the parent VoxtralRealtimeModel computes it (:989) and passes it through "
        "**kwargs (:998): called alone with input_ids, as MODEL_MAPPING lists it, the class raises whatever its "
        "config")),
    **dict.fromkeys(("YosoModel", "YosoForMaskedLM"), ("mask.padding", (
        "modeling_yoso.py:356 reads the mask as additive (1.0 + mask / 10000.0, then .int()), but YosoModel.forward "
        "passes the raw 0/1 mask: both values become 1 and the pads are attended"))),
    **dict.fromkeys(("FSMTModel", "FSMTForConditionalGeneration"), ("mask.causal", (
        "modeling_fsmt.py:857-866 builds the decoder's causal mask only when use_cache is off, and config.use_cache "
        "defaults to True: position 0 moves with position 4 (3.3e-4) with use_cache on, exactly 0 with it off; "
        "decode.cache fails with it"))),
    **dict.fromkeys(("CpmAntModel", "CpmAntForCausalLM"), ("mask.causal", (
        "modeling_cpmant.py:626 sets context to 1 everywhere, so _prepare_attention_mask (:565) lets every position "
        "attend to every other: the forward is bidirectional (position 2 moves by 20 when position 15 changes)"))),
    "ProphetNetForConditionalGeneration": ("decode.cache", (
        "get_predict_relative_pos_embeddings (modeling_prophetnet.py:803-821) lays the embeddings out (batch, seq, "
        "ngram, heads) but gathers buckets laid out (ngram, batch, heads, seq): position 0's logits change with the "
        "decoder's length alone (4.6e-4 to 7.1e-4); zeroing the relative embeddings removes it")),
    "ProphetNetForCausalLM": ("decode.cache", (
        "as ProphetNetForConditionalGeneration: its logits are the first predicting stream's, whose relative "
        "position buckets get_predict_relative_pos_embeddings (modeling_prophetnet.py:803-821) gathers in the wrong "
        "layout; with the decoder's relative_pos_embeddings zeroed decode.cache passes (difference 0)")),
    **dict.fromkeys(("DeepseekV4Model", "DeepseekV4ForCausalLM"), ("mask.padding", (
        "DeepseekV4Attention.forward calls its compressor without the attention mask (modeling_deepseek_v4.py:840): "
        "the gated softmax pools every window of compress_rates['compressed_sparse_attention'] tokens, pads included "
        "(:684), and the block_bias it returns carries causality and the indexer's picks only (:711); with 4 left pads "
        "changing only the pads moved every real position by 0.51 to 1.29"))),
    "MraModel": ("train.grad_flow", (
        "without the hub kernel, mra2_attention returns torch.zeros_like(query).requires_grad_() "
        "(modeling_mra.py:363-364): attention contributes nothing and query, key and value never train")),
    "MraForMaskedLM": ("train.grad_flow", "as MraModel: modeling_mra.py:363-364's zeros_like fallback"),
    **dict.fromkeys(("BltModel", "BltForCausalLM"), ("forward.smoke", (
        "BltModel.forward builds its cache with DynamicCache(config=self.config) (modeling_blt.py:1190) from the "
        "top-level BltConfig, which has no num_hidden_layers (only its encoder/decoder/global/patcher sub-configs do, "
        "and get_text_config finds none of them): with use_cache on, the config's default, it raises AttributeError "
        "at any size; with use_cache=False the same small model runs"))),
    **dict.fromkeys(("BambaForCausalLM", "BambaModel", "GraniteMoeHybridForCausalLM", "GraniteMoeHybridModel"), (
        "forward.smoke", "the default config lays out Mamba layers only, and transformers' cache raises "
        "get_seq_length on a stack with no attention layer, at any size; with one attention layer "
        "(kwargs config attn_layer_indices=[1]) forward.smoke passes")),
}


def true_finding(name: str, outcome: Outcome) -> str | None:
    """The evidence that this class's failure is a bug of the model, when the page knows it and it still holds."""
    known = TRUE_FINDINGS.get(name)
    failed = {check for check, status, _ in outcome.problems if status in ("fail", "error")}
    return known[1] if known and known[0] in failed else None


def page(plan: Plan, cache: Cache, settings: str) -> str:
    order = list(HEADS)
    swept = sorted((c for c in plan.chosen if c.name in cache.outcomes),
                   key=lambda c: (c.family, order.index(c.head), c.name))
    outcomes = [cache.outcomes[c.name] for c in swept]
    counts = {r: sum(o.result == r for o in outcomes) for r in ("PASS", "WARN", "FAIL", "ERROR", "SKIP", "NOT BUILT",
                                                               "CRASHED")}
    lines = [
        "# Hugging Face sweep: every text model class transformers ships",
        "",
        f"{MARK}{fingerprint()} (written by benchmarks/hf_sweep.py; do not edit by hand) -->",
        "",
        "The battery run zero-config on the text model classes of transformers, each built by tfcheck from a small "
        "config",
        "on CPU with random weights and nothing downloaded (`HF_HUB_OFFLINE=1`). How the classes are listed and "
        "classified is",
        "the docstring of `benchmarks/hf_sweep.py`; rerun it with `python benchmarks/hf_sweep.py` "
        "(`--only CLASS` for one class).",
        "",
        "Written from a run with " + ", ".join(f"{k} {v}" for k, v in versions().items()) + f"; {settings}.",
        "",
        f"Of {len(plan.all)} mapped classes with a text-model name, {len(plan.non_text)} are not text models "
        f"or do not run alone (listed at the end) and {len(plan.text)} are, in {len(plan.families)} families; "
        f"{len(plan.chosen)} were chosen ({plan.scope}), {len(swept)} swept.",
        "",
        "Results: " + ", ".join(f"{n} {r.lower()}" for r, n in counts.items()) + ".",
        "",
        f"The swept classes took {sum(o.seconds for o in outcomes) / 60:.0f} minutes in all (build included), "
        "one at a time, with tfcheck's source at digest " + _digests(outcomes) + ".",
        "",
        *_by_check(outcomes),
        "",
        "| family | class | head | result | s | checks that warned or failed (or why the class was not run) |",
        "|--------|-------|------|--------|---|-----------------------------------------------------------|",
    ]
    for candidate in swept:
        outcome = cache.outcomes[candidate.name]
        detail = "<br>".join(f"`{check}` {status}: {_cell(line)}" for check, status, line in outcome.problems)
        result = outcome.result + (" (true)" if true_finding(candidate.name, outcome) else "")
        lines.append(f"| {candidate.family} | `{candidate.name}` | {candidate.head} | {result} | "
                     f"{outcome.seconds:.0f} | {detail or _cell(outcome.reason) or '—'} |")
    true = [(c.name, true_finding(c.name, cache.outcomes[c.name])) for c in swept]
    lines += ["", "## Failures that are bugs of the model", "",
              "Measured against transformers' code by hand; `FAIL (true)` in the table above. Every other FAIL is a "
              "false alarm still to fix, or a class tfcheck cannot call as it is.", "",
              "| class | check | evidence |", "|-------|-------|----------|"]
    lines += [f"| `{name}` | `{TRUE_FINDINGS[name][0]}` | {_cell(why)} |" for name, why in true if why]
    lines += _not_swept(plan, cache)
    lines += ["", "## Classes skipped: not text, or not standalone", "", "| family | class | why |",
              "|--------|-------|-----|"]
    lines += [f"| {c.family} | `{c.name}` | {_cell(plan.non_text[c.name])} |" for c in plan.all
              if c.name in plan.non_text]
    return "\n".join(lines) + "\n"


def _digests(outcomes: list[Outcome]) -> str:
    counts = Counter(o.tfcheck_source or "unknown" for o in outcomes)
    return ", ".join(f"{digest} ({n} classes)" for digest, n in counts.most_common())


def _by_check(outcomes: list[Outcome]) -> list[str]:
    counts = Counter((check, status) for o in outcomes for check, status, _ in o.problems)
    checks = sorted({check for check, _ in counts}, key=lambda c: -sum(n for (k, _), n in counts.items() if k == c))
    return ["| check | classes it failed | warned | erred |", "|-------|------|------|-------|",
            *(f"| `{c}` | {counts[(c, 'fail')]} | {counts[(c, 'warn')]} | {counts[(c, 'error')]} |" for c in checks)]


def _not_swept(plan: Plan, cache: Cache) -> list[str]:
    unreached = [c.name for c in plan.chosen if c.name not in cache.outcomes]
    chosen = {c.name for c in plan.chosen}
    others = [c for c in plan.text if c.name not in chosen]
    lines = ["", "## Text classes not swept", ""]
    if unreached:
        lines += [f"Not reached within the run's time limit ({len(unreached)}; rerun the script to resume): "
                  + ", ".join(f"`{n}`" for n in unreached) + ".", ""]
    if others:
        lines += [f"Not chosen, one class per family being swept ({len(others)}): "
                  + ", ".join(f"`{c.name}`" for c in others) + ".", ""]
    if not unreached and not others:
        lines += ["None.", ""]
    return lines


@dataclass
class Plan:
    all: list[Candidate]
    non_text: dict[str, str]
    text: list[Candidate]
    chosen: list[Candidate]
    scope: str

    @property
    def families(self) -> set[str]:
        return {c.family for c in self.text}


def plan(scope: str, families: int | None) -> Plan:
    every = candidates()
    reasons = classify(every)
    text = [c for c in every if reasons[c.name] is None]
    first = one_per_family(text)  # every family before any family's second class, so a cut run covers them all
    chosen = first if scope == "family" else first + [c for c in text if c not in first]
    described = "one class per family" if scope == "family" else "every text class, one per family first"
    if families is not None:
        kept = sorted({c.family for c in chosen})[:families]
        chosen = [c for c in chosen if c.family in kept]
        described += f", the first {families} families alphabetically"
    return Plan(every, {n: r for n, r in reasons.items() if r is not None}, text, chosen, described)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the page's fingerprint is current")
    parser.add_argument("--only", nargs="+", metavar="CLASS",
                        help="(re)run these classes into the newest cached run, then rewrite the page")
    parser.add_argument("--scope", choices=("all", "family"), default="all",
                        help="every text class (default) or one class per family")
    parser.add_argument("--families", type=int, help="only the first N families alphabetically")
    parser.add_argument("--page-only", action="store_true",
                        help="run nothing: rewrite the page from the newest cached run (after an edit of this script)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=SWEEP_MINUTES, help="start no class after this long")
    parser.add_argument("--class-limit", type=float, default=CLASS_LIMIT_S, help="seconds per class, build included")
    parser.add_argument("--budget", type=float, default=CHECK_BUDGET_S, help="tfcheck's budget_s for each check")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    if args.check:
        current = PAGE.exists() and stated_fingerprint(PAGE.read_text("utf-8")) == fingerprint()
        print("current" if current else "stale: run python benchmarks/hf_sweep.py")
        raise SystemExit(0 if current else 1)
    the_plan = plan(args.scope, args.families)
    cache = Cache(cache_key(args.budget, args.class_limit), latest=args.page_only or bool(args.only))
    if args.page_only:
        pass
    elif args.only:
        for name in args.only:
            cache.outcomes.pop(name, None)
        sweep(args.only, cache, args.jobs, args.class_limit, float("inf"), args.budget)
    else:
        sweep([c.name for c in the_plan.chosen], cache, args.jobs, args.class_limit, args.minutes, args.budget)
    settings = (f"budget_s={args.budget:g} per check, at most {args.class_limit:g} s per class, "
                f"{args.minutes:g} minutes per run")
    PAGE.write_text(page(the_plan, cache, settings), "utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}; cache {cache.path}", flush=True)


if __name__ == "__main__":
    main()
