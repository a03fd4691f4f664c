"""Reading a model without running it: its forward signature, the modules it holds, the library it comes
from. The inference rules and the checks ask these questions; none of them calls the model."""
from __future__ import annotations

import inspect

import torch.nn as nn

#: torch.nn modules whose own attribute says their layout: (batch, length, d) or, torch's default, (length, batch, d).
TORCH_LAYOUT_CLASSES = (nn.MultiheadAttention, nn.Transformer, nn.TransformerEncoder, nn.TransformerDecoder,
                        nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


def forward_params(model: nn.Module) -> dict[str, inspect.Parameter]:
    """The named parameters of ``model.forward`` (no ``*args`` / ``**kwargs``); empty when unreadable."""
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return {}
    return {n: p for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def takes_varargs(model: nn.Module) -> bool:
    try:
        return any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return False


def takes_any_keyword(model: nn.Module) -> bool:
    """Whether ``forward`` has ``**kwargs`` (any argument name reaches it), or its signature cannot be read."""
    try:
        return any(p.kind == p.VAR_KEYWORD for p in inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return True


def library_of(model: nn.Module) -> str | None:
    """The top-level package that defines the model's class (``transformers``, ``x_transformers``, ...)."""
    module = inspect.getmodule(type(model))
    return module.__name__.split(".")[0] if module is not None else None


def first_embedding(model: nn.Module) -> tuple[str, nn.Embedding] | None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding):
            return name, module
    return None


def takes_features(model: nn.Module) -> bool:
    """Whether the model takes float features rather than token ids: it has no nn.Embedding, and its library does
    not declare token ids its input (a Hugging Face ``main_input_name = "input_ids"``: I-BERT embeds them with a
    quantised embedding of its own)."""
    return first_embedding(model) is None and getattr(model, "main_input_name", None) != "input_ids"


def first_width(model: nn.Module) -> tuple[str, int] | None:
    """The model width read off its first attention or LayerNorm, for models without embeddings."""
    for name, module in model.named_modules():
        if isinstance(module, nn.MultiheadAttention):
            return f"nn.MultiheadAttention '{name}'.embed_dim", module.embed_dim
        if isinstance(module, nn.LayerNorm) and module.normalized_shape:
            return f"nn.LayerNorm '{name}'.normalized_shape", module.normalized_shape[-1]
    return None


def first_linear(model: nn.Module) -> tuple[str, nn.Linear] | None:
    return next(((n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)), None)


def causal_attribute(model: nn.Module) -> tuple[str, bool] | None:
    """A bool ``causal`` on the model's config (XLM's, whose layers read it), on the model, or on the layer stack
    it wraps (x-transformers' ``attn_layers``), and where it was read."""
    for path, where in (("config", "config.causal"), ("", "model.causal"), ("attn_layers", "model.attn_layers.causal")):
        holder = getattr(model, path, None) if path else model
        value = getattr(holder, "causal", None) if holder is not None else None
        if isinstance(value, bool):
            return where, value
    return None


def torch_batch_first(model: nn.Module) -> tuple[bool, str] | None:
    """batch_first of a torch.nn Transformer module given as the model itself, and where it was read."""
    if not isinstance(model, TORCH_LAYOUT_CLASSES):
        return None
    name = type(model).__name__
    if isinstance(model, (nn.MultiheadAttention, nn.Transformer)):
        return bool(model.batch_first), f"torch.nn.{name}.batch_first"
    layer = model.layers[0] if isinstance(model, (nn.TransformerEncoder, nn.TransformerDecoder)) else model
    prefix = "layers[0]." if layer is not model else ""
    return bool(layer.self_attn.batch_first), f"torch.nn.{name}.{prefix}self_attn.batch_first"


def takes_torch_tgt_mask(model: nn.Module) -> bool:
    """A forward with torch.nn.Transformer's optional (tgt_mask=None, tgt_is_causal) arguments: its decoder
    is causal only when the caller passes the mask, as torch documents."""
    params = forward_params(model)
    return "tgt_mask" in params and "tgt_is_causal" in params and params["tgt_mask"].default is None


def without_cache(model: nn.Module, kwargs: dict) -> dict:
    """A forward that is differentiated keeps no decoding cache: models update theirs in place (RWKV's state),
    which breaks the backward, and Hugging Face models switch ``use_cache`` off in train mode themselves."""
    if "use_cache" in kwargs or "use_cache" not in forward_params(model):
        return kwargs
    return {**kwargs, "use_cache": False}


#: Decorators that run a forward with autograd off: an inference-only implementation (llama's reference model.py
#: decorates its forward with @torch.inference_mode()).
NO_GRAD_DECORATORS = ("inference_mode", "no_grad")


def inference_only(model: nn.Module) -> str | None:
    """How the forward is written to run without autograd (``@torch.inference_mode()`` above it), or None: then no
    output can be trained, by design, and the training checks do not apply."""
    import ast
    import textwrap

    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(type(model).forward)))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    function = tree.body[0] if tree.body and isinstance(tree.body[0], ast.FunctionDef | ast.AsyncFunctionDef) \
        else None
    for decorator in function.decorator_list if function is not None else ():
        call = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(call, (ast.Attribute, ast.Name)) and (call.attr if isinstance(call, ast.Attribute)
                                                            else call.id) in NO_GRAD_DECORATORS:
            return (f"forward is decorated with @{ast.unparse(decorator)} (an inference-only implementation, as "
                    "llama's reference model.py): nothing it returns can be trained, by design")
    return None
