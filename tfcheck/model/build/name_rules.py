"""The word rule for hyper-parameter names the exact tables and patterns of tfcheck.model.build.names do not list
(issue 29): a name is split into words (snake_case and camelCase), each word is read as a kind (a count word, a
size word, a side, the layers, the heads ...), and the kinds together say the quantity. So ``model_dimension``,
``dim_model``, ``embedding_dimension``, ``numberOfHeads``, ``num_transformer_blocks``, ``max_sequence_length``,
``src_seq_len`` and ``target_vocabulary_size`` are read as their quantity without a table listing each.

The rule is grown from a survey of public hand-written Transformers (docs/declarations.md lists the spellings)
and is conservative: a word it does not know, or a set of kinds that could mean two things (``layer_size``,
``input_dim``, ``src_len``, a bare ``hidden`` or ``layers``), gives None, the name stays unfilled and the usage
error names the ``kwargs`` declaration: a wrong size is worse than a question.

Also here, read from the source without running it: the attributes a constructor reads on an options namespace
(``def __init__(self, opt)`` reading ``opt.n_layers``). Plain data and ``ast``: importing it imports no torch.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from tfcheck.model.build import names

#: word -> its kind. A name holding any other word is no hyper-parameter for this rule.
WORD_KINDS: dict[str, str] = {
    **dict.fromkeys(("n", "num", "number", "nb", "count", "cnt"), "count"),
    **dict.fromkeys(("dim", "dims", "dimension", "dimensions", "dimensionality", "d", "width"), "dim"),
    # "size" is a width beside a width word and a length beside a length word (context_size)
    "size": "size",
    **dict.fromkeys(("layer", "layers", "block", "blocks", "depth"), "layer"),
    **dict.fromkeys(("head", "heads"), "head"),
    **dict.fromkeys(("model", "embed", "embedding", "embeddings", "emb", "embd"), "model"),
    # hidden is d_model in hidden_size but d_ff beside another width (Llama's FeedForward(dim, hidden_dim))
    **dict.fromkeys(("hidden", "hid"), "hidden"),
    **dict.fromkeys(("vocab", "vocabulary", "vocabs", "voc"), "vocab"),
    **dict.fromkeys(("token", "tokens"), "token"),
    **dict.fromkeys(("seq", "sequence", "len", "length", "context", "ctx", "position", "positions", "pos"), "seq"),
    **dict.fromkeys(("ff", "ffn", "feedforward", "feed", "mlp", "inner", "intermediate"), "ff"),
    **dict.fromkeys(("max", "maximum"), "max"),
    **dict.fromkeys(("src", "source", "tgt", "trg", "target", "input", "output", "enc", "encoder", "dec",
                     "decoder"), "side"),
    # words that qualify without changing the quantity: number_of_heads, num_attention_heads, dim_per_head,
    # num_transformer_blocks, feed_forward_dim (feed says the FFN)
    **dict.fromkeys(("of", "attention", "attn", "transformer", "per", "forward"), "filler"),
}
#: Words written run together, read as their parts (maxlen as max_len).
COMPOUNDS: dict[str, tuple[str, ...]] = {
    "maxlen": ("max", "len"), "seqlen": ("seq", "len"), "vocabsize": ("vocab", "size"), "dmodel": ("d", "model"),
    "embdim": ("embed", "dim"), "nlayer": ("n", "layer"), "nheads": ("n", "heads"), "nblocks": ("n", "blocks"),
}


def words(name: str) -> list[str]:
    """The lower-case words of a snake_case and / or camelCase name (``numberOfHeads`` -> number, of, heads;
    ``maxSeqLen`` -> max, seq, len; ``dModel`` -> d, model)."""
    out: list[str] = []
    for part in name.split("_"):
        for w in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", part):
            out.extend(COMPOUNDS.get(w.lower(), (w.lower(),)))
    return out


def snake(name: str) -> str:
    """A camelCase name as snake_case (``vocabSize`` -> vocab_size), so the exact tables and patterns read it."""
    return "_".join(words(name)) if re.search(r"[a-z][A-Z]", name) else name


def by_words(name: str) -> str | None:
    """The quantity the words of ``name`` say, or None (an unknown word, or kinds that could mean two things).
    ``hidden`` widths come back as "HIDDEN" for the caller to settle against the other names."""
    found = words(name)
    if not found or any(w not in WORD_KINDS for w in found):
        return None
    kinds = [WORD_KINDS[w] for w in found]
    k = {kind for kind in kinds if kind != "filler"}
    core = k - {"count", "side", "max"}
    if not core:  # only counts, sides and fillers: n_src, num, forward
        return None
    if "vocab" in core:
        # a vocabulary per side, however sized: source_vocabulary_size, vocab_src_len, d_tgt_vocab
        return "VOCAB_SIZE" if core <= {"vocab", "dim", "size", "seq"} and "max" not in k else None
    if core == {"token"}:
        # num_tokens counts the vocabulary (as the exact table has it), max_tokens the positions
        return "MAX_LEN" if "max" in k else ("VOCAB_SIZE" if "count" in k else None)
    if "ff" in core:
        return "D_FF" if core - {"ff"} and core <= {"ff", "dim", "size", "hidden", "model"} else None
    if core == {"head"}:
        # a count, or the plural: num_head, n_attention_heads, number_of_heads, decoder_heads
        return "NUM_HEADS" if "count" in k or "heads" in found else None
    if "head" in core:
        return "HEAD_DIM" if core <= {"head", "dim", "size"} and "count" not in k else None
    if "layer" in core and core <= {"layer", "hidden"}:
        # a count, or the plural beside a side: num_layer, n_blocks, num_transformer_blocks, n_enc_blocks,
        # n_hidden_layers; a bare layers / blocks may be a list of modules
        return "NUM_LAYERS" if "count" in k or ("side" in k and found[-1] in ("layers", "blocks")) else None
    if "seq" in core and core <= {"seq", "size"}:
        # a length needs evidence that it is one: max_, a count, a size, or two length words (seq_len);
        # a bare len / pos / context, or src_len, may be anything
        evidence = "max" in k or "count" in k or "size" in k or len({w for w in found if WORD_KINDS[w] == "seq"}) > 1
        return "MAX_LEN" if evidence else None
    if core & {"model", "hidden"} and core - {"model", "hidden"} and core <= {"model", "hidden", "dim", "size"}:
        return "HIDDEN" if "hidden" in core and "model" not in core else "D_MODEL"
    return None


def letter_quantity(name: str, others: Iterable[str], quantity: Callable[[str], str | None]) -> str | None:
    """A single letter's quantity (the Annotated Transformer's make_model(src_vocab, tgt_vocab, N, d_model, d_ff,
    h) and MultiHeadedAttention(h, d_model)): h only beside a d_model name, N beside a d_model name and a head
    count or a feed-forward width, d only beside a head or layer count. A lone letter says nothing."""
    spelled = [quantity(n) for n in others if n not in names.PAPER_PAIR]
    width = "D_MODEL" in spelled
    if name == "h":
        return "NUM_HEADS" if width else None
    if name == "N":
        heads = "h" in others or "NUM_HEADS" in spelled
        return "NUM_LAYERS" if width and (heads or "D_FF" in spelled) else None
    if name == "d":
        return "D_MODEL" if not width and ("NUM_HEADS" in spelled or "NUM_LAYERS" in spelled) else None
    return None


def namespace_reads(origin: Any, param: str) -> list[str] | None:
    """The attributes the constructor (a class's ``__init__`` or a factory) reads on ``param`` when that is all it
    does with it (``opt.d_model``, and ``self.opt = opt`` to keep it), in the order read; None when it uses the
    parameter otherwise (passes it on, calls it, indexes it) or its source cannot be read. A subclass that hands
    it to ``super().__init__(param)`` is read with the constructors above it (a Buggy* variant of a model)."""
    if not inspect.isclass(origin):
        return _reads_in(origin, param)
    read: list[str] = []
    for cls in origin.__mro__:
        init = vars(cls).get("__init__")
        if init is None:
            continue
        if (getattr(cls, "__module__", "") or "").split(".")[0] in ("torch", "builtins"):
            break  # nn.Module.__init__ takes no namespace
        found = _reads_in(init, param, allow_super=True)
        if found is None:
            return None
        read += [r for r in found if r not in read]
        if not _hands_up(init, param):
            break
    return read


def _parsed(func: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None


def _is_super_init(node: Any) -> bool:
    """``super().__init__(...)`` or ``super(Model, self).__init__(...)``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__" \
        and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name) \
        and node.func.value.func.id == "super"


def _hands_up(func: Any, param: str) -> bool:
    """Whether ``func`` hands ``param`` to the constructor above it."""
    tree = _parsed(func)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_super_init(n)] if tree is not None else []
    given = [a for c in calls for a in (*c.args, *(k.value for k in c.keywords))]
    return any(isinstance(a, ast.Name) and a.id == param for a in given)


def _reads_in(func: Any, param: str, allow_super: bool = False) -> list[str] | None:
    tree = _parsed(func)
    if tree is None:
        return None
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    read: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == param and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.keyword):
            parent = parents.get(id(parent))
        if isinstance(parent, ast.Attribute) and isinstance(parent.ctx, ast.Load):
            if parent.attr not in read:
                read.append(parent.attr)
        elif allow_super and _is_super_init(parent):
            continue  # read by the constructor above (namespace_reads walks it)
        elif not (isinstance(parent, ast.Assign) and parent.value is node and all(
                isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                for t in parent.targets)):
            return None  # passed on, called, indexed or compared: no plain options namespace
    return read


__all__ = ["COMPOUNDS", "WORD_KINDS", "by_words", "letter_quantity", "namespace_reads", "snake", "words"]
