"""Registries: unknown names list the choices, duplicates fail, the CLI lists every module."""

from __future__ import annotations

import json

import pytest

from kgrag.cli import main
from kgrag.registry import RETRIEVERS, all_registries, DuplicateModuleError, Registry, UnknownModuleError


def test_unknown_name_lists_valid_choices():
    with pytest.raises(UnknownModuleError) as e:
        RETRIEVERS.get("nope")
    for name in RETRIEVERS.names():
        assert name in str(e.value)


def test_duplicate_registration_fails():
    reg: Registry = Registry("thing")
    reg.register("a")(lambda: 1)
    with pytest.raises(DuplicateModuleError):
        reg.register("a")(lambda: 2)


def test_code_version_changes_with_declared_version():
    reg: Registry = Registry("thing")

    def f():
        return 1

    reg.register("a", version="1")(f)
    reg2: Registry = Registry("thing")
    reg2.register("a", version="2")(f)
    assert reg._entries["a"].version != reg2._entries["a"].version


def test_cli_modules_lines_and_json(capsys):
    assert main(["modules"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "retriever pcst" in lines and "backend llamacpp" in lines and "loader metaqa" in lines
    assert main(["modules", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == set(all_registries())
    assert {"lego_extractor", "lego_filter", "lego_refiner", "lego_scorer"} <= set(data)
    assert data["retriever"] == RETRIEVERS.names()
