"""A `--json` output checked against its published schema (docs/json/NAME.schema.json,
made by labctl/cli/schemas.py), handed back with attribute access for the tests' asserts."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema

from labctl.cli.schemas import DOCS


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((DOCS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


class Record(dict[str, Any]):
    """A JSON object whose keys read as attributes too: out.labs[0].nodes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _wrapped(value: Any) -> Any:
    if isinstance(value, dict):
        return Record({k: _wrapped(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_wrapped(v) for v in value]
    return value


def parsed(name: str, text: str) -> Any:
    """The JSON document `text`, which must validate against schema `name`."""
    value = json.loads(text)
    validator(name).validate(value)
    return _wrapped(value)
