"""The keys under which the torch target's model holds a case's tensors and layers.

A case names its tensors and layers with any identifier (``harness.case.values.is_identifier``):
``training``, ``forward``, ``to``, ``state_dict``, ``_parameters``, ``class`` and ``__class__``
included. ``nn.Module`` refuses to register a parameter, buffer or submodule under a name that is
already one of its attributes (``register_parameter``: "attribute 'training' already exists"), an
attribute set under such a name would shadow the module's own, a Python keyword cannot follow
``model.``, and a name starting with ``_`` may be a hook Python looks up on the instance
(``__deepcopy__``). So the model holds such a name under ``KEY_PREFIX + name``, and every other
name under itself: a reproducer reads ``model.w``, as its user wrote it, and ``model.case_training``.

The mapping is a bijection: a name that already starts with the prefix is prefixed too, so every
key the model reports (``named_parameters``, ``state_dict``, a layer's ``<layer>.running_mean``
path) maps back to exactly one case name (``case_name``). No attribute of ``nn.Module`` starts with
the prefix (``tests/probes/test_hostile_names.py`` checks it against the installed torch).

Only the first component of a dotted name is a module attribute (``bn`` of ``bn.running_mean``;
``running_mean`` is ``BatchNorm1d``'s own), so only it is mapped. The names the session binds
(``TorchSession.bound``) and reports are the case's.
"""

from __future__ import annotations

import keyword

from torch import nn

#: What the model's key of a name that cannot be an attribute of its own starts with.
KEY_PREFIX = "case_"

# Everything an ``nn.Module`` instance answers to (its methods, ``training``, ``_parameters``, ...).
_MODULE_ATTRIBUTES = frozenset(dir(nn.Module()))


def _own_key(first: str) -> bool:
    """Whether the model can hold ``first`` (a name's first component) under the name itself: not
    an attribute, a keyword or a prefixed name, and not one starting with ``_``, where Python and
    torch look for hooks on the instance (``copy.deepcopy`` calls a ``__deepcopy__`` that
    ``nn.Module.__getattr__`` would find among the parameters)."""
    return not (first in _MODULE_ATTRIBUTES or keyword.iskeyword(first) or first.startswith((KEY_PREFIX, "_")))


def model_key(name: str) -> str:
    """The model's key (attribute name, ``state_dict`` key, submodule path) of the case's tensor,
    layer or layer state ``name``."""
    first, dot, rest = name.partition(".")
    return (first if _own_key(first) else KEY_PREFIX + first) + dot + rest


def case_name(key: str) -> str:
    """The case name whose model key is ``key`` (the inverse of ``model_key``)."""
    first, dot, rest = key.partition(".")
    if first.startswith(KEY_PREFIX):
        return first[len(KEY_PREFIX) :] + dot + rest
    if not _own_key(first):
        raise ValueError(f"{key!r} is not a key the torch session gave a case name")
    return key
