"""Small sizes: the value tfcheck gives each hyper-parameter it fills, and shrinking large defaults to them with
the invariants a Transformer's sizes keep (d_model = heads x d_k, kv-heads dividing heads, top-k <= experts,
special ids inside the vocabulary).

A name is a hyper-parameter when a table of tfcheck.model.build.names lists it (exact names first, then its name
patterns, then the word rule of tfcheck.model.build.name_rules for spellings no table lists); ``quantity`` says
which. Plain data and arithmetic: importing it imports no torch.
"""
from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from tfcheck.model.build import name_rules, names

#: The small value of each quantity: distinct from each other (d_model 32 != d_ff 64 != vocab 101) so that no
#: axis can be mistaken for another, and small enough to build in milliseconds.
SMALL_BY_QUANTITY: dict[str, Any] = {
    "VOCAB_SIZE": 101, "D_MODEL": 32, "NUM_HEADS": 4, "KV_HEADS": 4, "NUM_LAYERS": 2, "D_FF": 64, "MAX_LEN": 64,
    "DROPOUT": 0.1, "PAD_ID": 0, "HEAD_DIM": 8,
    # Rotary embedding on part of each head (GPT-J, CodeGen): at most the small head size, 32 / 4 = 8.
    "ROTARY_DIM": 4,
    # GPT-Neo's per-layer pattern must cover num_layers (its default describes 24 layers).
    "ATTENTION_TYPES": [[["global", "local"], 1]],
    # Longformer pads every input to a multiple of its window (512 by default): 16 holds the probes in one.
    "ATTENTION_WINDOW": 16,
    # Reformer takes multiples of twice its bucket only (64 by default, so 128): 4 leaves lengths under max_len.
    "BUCKET_SIZE": 4,
    # Mixture-of-experts configs default to dozens of experts: a few small ones keep every path.
    "NUM_EXPERTS": 4, "EXPERT_D_FF": 64, "TOP_K": 2, "SHARED_EXPERTS": 1,
    # Special token ids inside the small vocabulary (Hugging Face configs default to ids like 50256).
    "BOS_TOKEN_ID": 1, "EOS_TOKEN_ID": 2,
}

#: Exact names, most specific table first where a name is in two (num_key_value_heads is a kv-head count
#: before it is one of the other head counts).
_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("VOCAB_SIZE", names.VOCAB_SIZE + names.SOURCE_VOCAB_SIZE + names.TARGET_VOCAB_SIZE),
    ("D_MODEL", names.D_MODEL + names.EMBED_DIM),
    ("KV_HEADS", names.KV_HEADS),
    ("NUM_HEADS", names.NUM_HEADS + names.OTHER_HEAD_COUNTS),
    ("NUM_LAYERS", names.NUM_LAYERS), ("D_FF", names.D_FF), ("MAX_LEN", names.MAX_LEN),
    ("DROPOUT", names.DROPOUT), ("PAD_ID", names.PAD_ID), ("HEAD_DIM", names.HEAD_DIM),
    ("ROTARY_DIM", names.ROTARY_DIM), ("ATTENTION_TYPES", names.ATTENTION_TYPES),
    ("ATTENTION_WINDOW", names.ATTENTION_WINDOW),
    ("BUCKET_SIZE", names.BUCKET_SIZE),
    ("NUM_EXPERTS", names.NUM_EXPERTS), ("EXPERT_D_FF", names.EXPERT_D_FF), ("TOP_K", names.TOP_K),
    ("SHARED_EXPERTS", names.SHARED_EXPERTS),
    ("BOS_TOKEN_ID", names.BOS_TOKEN_ID), ("EOS_TOKEN_ID", names.EOS_TOKEN_ID),
)
EXACT: dict[str, str] = {}
for _quantity, _names in _TABLES:
    for _name in _names:
        EXACT.setdefault(_name, _quantity)
PATTERNS = tuple((re.compile(pattern), quantity) for pattern, quantity in names.NAME_PATTERNS)

#: Small values for the exact names (what the model layer has always filled a constructor with). Not top-k:
#: only derived (kept unless above the experts), so a config's own routing stays as written; nor the shared
#: experts, filled only where unset.
_DERIVED = ("TOP_K", "SHARED_EXPERTS")
SMALL_VALUES: dict[str, Any] = {name: SMALL_BY_QUANTITY[q] for name, q in EXACT.items() if q not in _DERIVED}

_SPECIAL_IDS = ("PAD_ID", "BOS_TOKEN_ID", "EOS_TOKEN_ID")
#: Quantities shrunk to their small value when their default is above it.
_SIZES = ("VOCAB_SIZE", "NUM_LAYERS", "D_FF", "MAX_LEN", "NUM_EXPERTS", "EXPERT_D_FF", "BUCKET_SIZE")
#: Quantities no model can build with at zero or below: such a default means "set later" (by a tokenizer).
_POSITIVE = _SIZES + ("D_MODEL", "NUM_HEADS")


def quantity(name: str, beside: Iterable[str] = (), words: bool = True) -> str | None:
    """The table a hyper-parameter name belongs to (``beside``: the other names of the same signature or config,
    which decide the Annotated Transformer's N and h, and hidden_dim next to another width); None for a name
    that is no hyper-parameter (a switch such as bias or causal, an activation's name). ``words=False`` reads
    the tables and patterns only: a Hugging Face config's fields keep the relations its defaults hold
    (embedding_size beside hidden_size is a width kept in relation, not a second d_model)."""
    others = set(beside) - {name}
    if name in names.PAPER_PAIR:
        return name_rules.letter_quantity(name, others, quantity)
    if name == "hidden_dim" and any(EXACT.get(n) == "D_MODEL" for n in others):
        return "D_FF"  # Llama's FeedForward(dim, hidden_dim): the second width is the feed-forward one
    if name in EXACT:
        return EXACT[name]
    found = next((q for pattern, q in PATTERNS if pattern.fullmatch(name)), None)
    if found is not None or not words:
        return found
    snake = name_rules.snake(name)  # numberOfHeads, vocabSize: the tables' names written in camelCase
    if snake != name:
        return quantity(snake, beside)
    # Then the word rule (tfcheck.model.build.name_rules): model_dimension, number_of_heads, src_seq_len. A
    # hidden width (d_hid, hidden_dimension) is d_ff beside another width, as hidden_dim is.
    by_words = name_rules.by_words(name)
    if by_words == "HIDDEN":
        return "D_FF" if any(_plain_width(n) for n in others) else "D_MODEL"
    return by_words


def _plain_width(name: str) -> bool:
    """A d_model name that no hidden width rule could make a d_ff (d_model, model_dimension, not hidden_dim)."""
    return EXACT.get(name) == "D_MODEL" and name != "hidden_dim" or (
        name not in EXACT and name_rules.by_words(name_rules.snake(name)) == "D_MODEL")


def small_value(name: str, beside: Iterable[str] = ()) -> Any:
    """The value tfcheck fills ``name`` with (KeyError when it is no hyper-parameter)."""
    q = quantity(name, beside)
    if q is None:
        raise KeyError(name)
    return SMALL_BY_QUANTITY[q]


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def plan(values: Mapping[str, Any], changeable: Iterable[str], shrink: bool = True,
         words: bool = True) -> dict[str, Any]:
    """The new values of the ``changeable`` names among ``values`` (every hyper-parameter known so far: the
    defaults, what tfcheck filled, what the user gave), so that the whole set is small and consistent.

    ``None`` means "not set" (minGPT's get_default_config) and is filled; with ``shrink`` a large int default
    (above its small value) is shrunk. The names not changeable (the user's) are kept and the others follow
    them: d_model = heads x d_k with d_k >= 4, heads >= 2 and d_k != d_model; a separate d_k / d_v = d_model /
    heads; the width aliases equal; kv-heads dividing heads; top-k <= experts; special ids below the vocabulary.
    A max_len at or below 64 is kept (it states the model's capacity). ``words``: as for ``quantity``."""
    every = list(values)
    q = {n: quantity(n, every, words) for n in every}
    free = {n for n in changeable if n in values and q[n] is not None}
    new = dict(values)

    def unset(n: str) -> bool:
        return is_unset(values[n], q[n])

    def large(n: str) -> bool:
        return shrink and _int(values[n]) and values[n] > SMALL_BY_QUANTITY[q[n]]  # type: ignore[index]

    def first_int(quantity_: str) -> Any:
        return next((new[n] for n in every if q[n] == quantity_ and _int(new[n])), None)

    for n in free:
        if q[n] in _SIZES and (unset(n) or large(n)):
            new[n] = SMALL_BY_QUANTITY[q[n]]  # type: ignore[index]
        elif q[n] in ("DROPOUT", "ATTENTION_TYPES", "SHARED_EXPERTS") and unset(n):
            new[n] = SMALL_BY_QUANTITY[q[n]]  # type: ignore[index]

    # Heads, then the width they divide: heads x 8 unless the user fixed the width.
    head_names = [n for n in every if q[n] == "NUM_HEADS"]
    for n in head_names:
        if n in free and (unset(n) or large(n)):
            new[n] = SMALL_BY_QUANTITY["NUM_HEADS"]
    heads = first_int("NUM_HEADS")
    widths = [n for n in every if q[n] == "D_MODEL"]
    fixed = next((values[n] for n in widths if n not in free and _int(values[n])), None)
    if widths:
        primary = values[widths[0]]
        resized = fixed is not None or any(n in free and (unset(n) or large(n)) for n in widths)
        if fixed is not None:
            width = fixed
        elif resized:
            width = _width_for(heads)
        else:
            width = primary
        for n in widths:
            # Aliases of the first width follow it: some models assert d_model == d_word_vec.
            if n in free and resized and (unset(n) or large(n) or values[n] == primary):
                new[n] = width
        for n in head_names:
            h = new[n]
            if n in free and _int(width) and _int(h) and h and width % h != 0:
                fits = [k for k in range(min(h, SMALL_BY_QUANTITY["NUM_HEADS"]), 1, -1)
                        if width % k == 0 and width // k >= 4]
                new[n] = fits[0] if fits else values[n]
    width, heads = first_int("D_MODEL"), first_int("NUM_HEADS")
    sized = any(new[n] != values[n] for n in widths + head_names)

    for n in free:
        if q[n] == "HEAD_DIM" and (unset(n) or sized or large(n)):
            new[n] = width // heads if _int(width) and _int(heads) and heads and width % heads == 0 \
                else SMALL_BY_QUANTITY["HEAD_DIM"]
        elif q[n] == "KV_HEADS" and _int(values[n]) and _int(heads):
            new[n] = _kv_heads(values[n], heads, first_original(values, q, "NUM_HEADS"))
        elif q[n] == "ROTARY_DIM" and (unset(n) or large(n)):
            new[n] = SMALL_BY_QUANTITY["ROTARY_DIM"]
    head_dim: Any = width // heads if _int(width) and _int(heads) and heads else None
    experts, vocab = first_int("NUM_EXPERTS"), min((new[n] for n in every if q[n] == "VOCAB_SIZE" and _int(new[n])),
                                                   default=None)
    for n in free:
        v = new[n]
        if q[n] == "ROTARY_DIM" and _int(v) and _int(head_dim) and v > head_dim:
            new[n] = max(2, head_dim // 2 * 2)  # rotary embedding turns pairs of a head's dimensions
        elif q[n] == "TOP_K" and (unset(n) or (_int(v) and _int(experts) and v > experts)):
            new[n] = min(SMALL_BY_QUANTITY["TOP_K"], experts) if _int(experts) else SMALL_BY_QUANTITY["TOP_K"]
        elif q[n] in _SPECIAL_IDS and (unset(n) or (_int(v) and _int(vocab) and v >= vocab)):
            new[n] = SMALL_BY_QUANTITY[q[n]]  # type: ignore[index]
    return {n: new[n] for n in every if n in free and (values[n] is None or new[n] != values[n])
            and new[n] is not None}


def hugging_face_values(model_class: str, defaults: Mapping[str, Any], small: Mapping[str, Any],
                        given: Mapping[str, Any]) -> dict[str, Any]:
    """What a Hugging Face config needs beyond ``small`` (tfcheck's small values of the names its __init__ takes,
    ``defaults`` those names' defaults, ``given`` the user's) for ``model_class`` to build and run: routing to
    no more experts than the small config has (Qwen3-MoE routes 8 of its 128 by default), a shared-expert count
    the config leaves unset, and, for a causal-LM head (names.HF_CAUSAL_HEADS) of a config with the decoder
    switch, the switch on."""
    values = {**defaults, **small, **given}
    derived = [n for n in values if quantity(n, words=False) in _DERIVED and n not in given]
    # A vocabulary named by pattern only (a padded vocabulary's true size, the LM head's width: Inkling 2's
    # unpadded_vocab_size) is not among the exact names ``small`` holds: shrunk with them where its default is set.
    vocabularies = [n for n in values if n not in small and n not in given and n not in EXACT
                    and quantity(n, words=False) == "VOCAB_SIZE" and _int(values[n])]
    out = plan(values, derived + vocabularies, words=False)
    out.update(_axial(values, given))
    switch = names.HF_DECODER_SWITCH
    if model_class.endswith(names.HF_CAUSAL_HEADS) and switch in defaults and switch not in given \
            and defaults[switch] is not True:
        out[switch] = True
    return out


def _axial(values: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Axial position factors that fit the small sizes where the defaults no longer do, as many factors as the
    defaults have: widths summing to d_model, a grid multiplying to max_len."""
    out: dict[str, Any] = {}
    sizes = {"D_MODEL": next((values[n] for n in names.D_MODEL if _int(values.get(n))), None),
             "MAX_LEN": next((values[n] for n in names.MAX_LEN if _int(values.get(n))), None)}
    for table, quantity_, split, combine in ((names.AXIAL_WIDTHS, "D_MODEL", _summing, sum),
                                             (names.AXIAL_SHAPE, "MAX_LEN", _multiplying, math.prod)):
        total = sizes[quantity_]
        for n in table:
            factors = values.get(n)
            if n not in given and isinstance(factors, (list, tuple)) and factors and isinstance(total, int) \
                    and all(_int(f) for f in factors) and combine(factors) != total:
                out[n] = split(total, len(factors))
    return out


def _summing(total: int, k: int) -> list[int]:
    return [total // k + (i < total % k) for i in range(k)]


def _multiplying(total: int, k: int) -> list[int]:
    """k factors of ``total`` as even as its prime factors allow (64 in two: 8 x 8)."""
    factors, rest, p = [1] * k, total, 2
    while rest > 1:
        while rest % p:
            p += 1
        rest //= p
        factors[factors.index(min(factors))] *= p
    return factors


def is_unset(value: Any, quantity_: str | None) -> bool:
    """None, or a size at zero or below: Llama's ModelArgs leaves vocab_size = -1 for its tokenizer to set."""
    return value is None or (quantity_ in _POSITIVE and _int(value) and value <= 0)


def _width_for(heads: Any) -> int:
    """32 where the heads divide it into heads of 4 or more (and there are 2 or more), else heads x 8."""
    small = int(SMALL_BY_QUANTITY["D_MODEL"])
    if not _int(heads) or heads < 2 or (small % heads == 0 and small // heads >= 4):
        return small
    return int(heads) * int(SMALL_BY_QUANTITY["HEAD_DIM"])


def first_original(values: Mapping[str, Any], q: Mapping[str, str | None], quantity_: str) -> Any:
    return next((values[n] for n in values if q[n] == quantity_ and _int(values[n])), None)


def _kv_heads(kv: int, heads: int, original_heads: Any) -> int:
    """A kv-head count that divides the (small) head count: fewer than the heads when the default had fewer."""
    if heads % kv == 0 and kv <= heads:
        return kv
    grouped = _int(original_heads) and kv < original_heads
    divisors = [d for d in range(heads, 0, -1) if heads % d == 0 and (d < heads or not grouped)]
    return divisors[0] if divisors else heads


def changes_text(shrunk: Mapping[str, tuple[Any, Any]]) -> str:
    """d_model 512→32, N 6→2: the report's line of what was shrunk."""
    return ", ".join(f"{n} {a!r}→{b!r}" for n, (a, b) in shrunk.items())


def hugging_face_layouts(build: Callable[..., Any], fields: Iterable[str], values: Mapping[str, Any],
                         given: Mapping[str, Any]) -> dict[str, Any]:
    """What a Hugging Face config built by ``build`` from ``values`` (its small values and the user's) needs so
    that the small model keeps the layout the defaults describe: every kind of layer of a hybrid model (an
    attention layer beside the linear-attention ones, which the cache's get_seq_length reads), and mrope
    sections that split the small rotary width. ``fields``: the names the config's __init__ takes."""
    free = set(fields) - set(given)
    try:
        default = build()
    except Exception:  # noqa: BLE001 - a config that refuses is reported by its caller, with its own message
        return {}
    try:
        small = build(**copy.deepcopy(values))  # a config may rewrite a rope dict in place
    except Exception:  # noqa: BLE001 - Zamba2 refuses its default 54-layer pattern beside 2 layers
        out = _readable(lambda: _layer_kinds(default, SimpleNamespace(**values), free))
        # mrope sections of the default's rope dict, which may be what the config refuses beside the small heads
        merged = SimpleNamespace(**{**vars(default), **copy.deepcopy(values)})
        out.update(_readable(lambda: _mrope(type(default), merged, free)))
        return out
    out = _readable(lambda: _layer_kinds(default, small, free))
    out.update(_readable(lambda: _mrope(type(small), small, free)))
    return out


def _readable(adjust: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """An adjustment read from a config, or none when the config refuses to be read: a heterogeneous config
    (Gemma 4's per-layer head_dim) raises on a global attribute, and is then built with its values as they are."""
    try:
        return adjust()
    except Exception:  # noqa: BLE001 - transformers' AmbiguousGlobalPerLayerAttributeError, and the like
        return {}


def _kinds(pattern: Any) -> list[Any]:
    """The distinct kinds of a per-layer pattern, in order of first appearance (the first layer's kind first)."""
    return list(dict.fromkeys(pattern)) if isinstance(pattern, (list, tuple)) else []


def _layer_kinds(default: Any, small: Any, free: set[str]) -> dict[str, Any]:
    view = names.LAYER_KINDS_VIEW
    if set(_kinds(getattr(default, view, None))) <= set(_kinds(getattr(small, view, None))):
        return {}
    out: dict[str, Any] = {}
    layer_names = [n for n in names.NUM_LAYERS if _int(getattr(small, n, None))]
    kinds = {n: _kinds(getattr(default, n, None)) for n in names.LAYER_PATTERNS if n in free}
    count = max([getattr(small, n) for n in layer_names] + [len(k) for k in kinds.values()], default=0)
    for period, offset in names.LAYER_PERIODS:
        p: Any = getattr(default, period, None)
        o: Any = getattr(default, offset, None)
        if not ({period, offset} <= free and _int(p) and _int(o) and 0 <= o < p):
            continue
        if o >= count > 0:
            # the kind at the offset stays after the kinds before it (Jamba: mamba, then attention)
            p, o = min(p, count), min(o, min(p, count) - 1)
            out.update({period: p, offset: o})
        if p <= count and all(n in free for n in layer_names):
            # a kind placed every p layers recurs, so the small stack holds it twice (Zamba ties each of its
            # hybrid layers' shared block to the first one's, and refuses a stack with one); a user's count stays
            count = max(count, p + o + 1)
    # a layer per kind at least (Lfm3 mixes convolutions, sliding and full attention), the user's count kept
    out.update({n: count for n in layer_names if n in free and getattr(small, n) < count})
    out.update({n: (k * count)[:count] for n, k in kinds.items() if k})
    for n in names.LAYER_INDICES:
        indices = getattr(default, n, None)
        if n in free and isinstance(indices, (list, tuple)) and indices and all(_int(i) for i in indices):
            inside = [i for i in indices if i < count] or [count - 1]
            if inside != list(indices):
                out[n] = inside
    return out


def _mrope(cls: type, small: Any, free: set[str]) -> dict[str, Any]:
    """mrope sections summing to the small rotary width / 2 (of the head, or of its rotary part where the config
    states it apart), in the proportions of the config's own sections (or of the modeling code's fallback, for a
    config that names the key but leaves it unset)."""
    heads = getattr(small, "num_attention_heads", None)
    head_dim = getattr(small, names.ROTARY_HEAD_PART, None) or getattr(small, "head_dim", None) or (
        small.hidden_size // heads if _int(getattr(small, "hidden_size", None)) and _int(heads) and heads else None)
    out: dict[str, Any] = {}
    for n in names.ROPE_DICTS:
        rope = getattr(small, n, None)
        if n not in free or not isinstance(rope, Mapping) or not _int(head_dim):
            continue
        sections = rope.get(names.MROPE_SECTION)
        if sections is None and names.MROPE_SECTION in getattr(cls, "ignore_keys_at_rope_validation", ()):
            sections = names.MROPE_FALLBACK
        total = int(head_dim * rope.get(names.PARTIAL_ROTARY, 1.0)) // 2
        if isinstance(sections, (list, tuple)) and sections and all(_int(s) for s in sections) \
                and sum(sections) != total:
            out[n] = {**rope, names.MROPE_SECTION: _proportional(list(sections), total)}
    return out


def _proportional(parts: list[int], total: int) -> list[int]:
    """``parts`` scaled to sum to ``total`` (largest remainders first), each at least 1 where total allows it:
    a section of none drops a position axis, so each keeps one frequency while there are enough."""
    floor = 1 if total >= len(parts) else 0
    exact = [p * (total - floor * len(parts)) / sum(parts) for p in parts]
    scaled = [floor + int(e) for e in exact]
    for i in sorted(range(len(parts)), key=lambda i: int(exact[i]) - exact[i])[:total - sum(scaled)]:
        scaled[i] += 1
    return scaled
