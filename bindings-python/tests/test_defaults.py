"""The defaults a constructor shows are the core builder's: its text
signature and ``_lockyard.pyi`` write them out by hand (pyo3 takes a text
signature only as a literal), so each copy is held to the core's values."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
from lockyard import _lockyard

STUB = Path(__file__).parents[1] / "python" / "lockyard" / "_lockyard.pyi"
CORE: dict[str, dict[str, Any]] = _lockyard._defaults()


def stated(defaults: dict[str, Any]) -> dict[str, Any]:
    """The defaults that promise a value: None means "not set" (no limit,
    or a value the core derives from others)."""
    return {name: value for name, value in defaults.items() if value is not None}


def stub_constructors() -> dict[str, dict[str, Any]]:
    """Class name -> the defaults of its ``__new__`` in the stub."""
    constructors = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__new__":
                    constructors[node.name] = defaults_of(item.args)
    return constructors


def defaults_of(args: ast.arguments) -> dict[str, Any]:
    # Positional defaults belong to the last positional parameters.
    positional = args.posonlyargs + args.args
    pairs = list(zip(reversed(positional), reversed(args.defaults)))
    pairs += [
        (arg, default)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults)
        if default is not None
    ]
    return {arg.arg: ast.literal_eval(default) for arg, default in pairs}


STUB_CONSTRUCTORS = stub_constructors()


def test_every_class_with_core_defaults_has_a_stub_constructor() -> None:
    assert set(CORE) <= set(STUB_CONSTRUCTORS)


@pytest.mark.parametrize("cls", sorted(STUB_CONSTRUCTORS))
def test_stub_shows_the_core_defaults(cls: str) -> None:
    assert stated(STUB_CONSTRUCTORS[cls]) == CORE.get(cls, {})


@pytest.mark.parametrize("cls", sorted(STUB_CONSTRUCTORS))
def test_text_signature_shows_the_core_defaults(cls: str) -> None:
    parameters = inspect.signature(getattr(_lockyard, cls)).parameters.values()
    shown = {
        p.name: p.default
        for p in parameters
        if p.default is not inspect.Parameter.empty
    }
    assert stated(shown) == CORE.get(cls, {})


@pytest.mark.parametrize("cls", sorted(CORE))
def test_defaults_keep_their_types(cls: str) -> None:
    # 30 == 30.0 and True == 1: a stub saying ``ttl: float = 30`` or a
    # text signature saying ``thread_safe=1`` would pass the comparisons above.
    parameters = inspect.signature(getattr(_lockyard, cls)).parameters
    for name, value in CORE[cls].items():
        assert type(STUB_CONSTRUCTORS[cls][name]) is type(value), (cls, name)
        assert type(parameters[name].default) is type(value), (cls, name)
