"""The keys under which the torch target's model holds a case's tensors and layers.

A case names its tensors and layers with any identifier (``harness.case.op_checks.is_identifier``):
``training``, ``forward``, ``to``, ``state_dict``, ``_parameters`` and ``__class__`` included.
``nn.Module`` refuses to register a parameter, buffer or submodule under a name that is already
one of its attributes (``register_parameter``: "attribute 'training' already exists"), and an
attribute set under such a name would shadow the module's own. So the model holds every case name
under ``KEY_PREFIX + name``: no attribute of ``nn.Module`` starts with the prefix
(``tests/test_hostile_names.py`` checks it against the installed torch), and prefixing is
bijective, so every key the model reports (``named_parameters``, ``state_dict``, a layer's
``<layer>.running_mean`` path) maps back to exactly one case name (``case_name``).

Only the first component of a dotted name is a module attribute (``bn`` of ``bn.running_mean``;
``running_mean`` is ``BatchNorm1d``'s own), so prefixing the whole string prefixes exactly it.
The names the session binds (``TorchSession.bound``) and reports are the case's, unprefixed.
"""

from __future__ import annotations

#: What the model's key of every case name starts with. No ``nn.Module`` attribute does.
KEY_PREFIX = "case_"


def model_key(name: str) -> str:
    """The model's key (attribute name, ``state_dict`` key, submodule path) of the case's tensor,
    layer or layer state ``name``."""
    return KEY_PREFIX + name


def case_name(key: str) -> str:
    """The case name whose model key is ``key`` (the inverse of ``model_key``)."""
    if not key.startswith(KEY_PREFIX):
        raise ValueError(f"{key!r} is not a key the torch session gave a case name")
    return key[len(KEY_PREFIX):]
