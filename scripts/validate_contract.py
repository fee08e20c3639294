#!/usr/bin/env python3
"""Validate wire contract v1: JSON Schemas, examples, samples and the AsyncAPI document.

Checks, all offline:
  1. every docs/contract/schemas/*.schema.json parses, has the expected $id and is
     itself a valid draft 2020-12 schema (check_schema); every $ref in it resolves;
  2. every docs/contract/examples/*.json validates against its schema, and every
     message schema has at least one example;
  3. every file in each --samples DIR validates against its schema
     (with --require-all-samples: every message schema has at least one sample);
  4. docs/contract/asyncapi.yaml parses (PyYAML), every $ref in it resolves (local
     pointers and files; file references must point at existing schema files), and
     every message schema is referenced from it.

File name -> schema: the stem names the schema, optionally followed by "--variant":
  booking.create.json, booking.create--today.json -> schemas/booking.create.schema.json

Exit status: 0 when everything passed, 1 when any check failed (each failure is
listed), 2 on usage errors or missing dependencies (pip install jsonschema pyyaml).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import urljoin, urldefrag

try:
    import yaml
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
except ImportError as error:  # pragma: no cover - depends on the machine
    print(f"validate_contract: missing Python package ({error}); run: pip install jsonschema pyyaml",
          file=sys.stderr)
    sys.exit(2)

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract"
SCHEMAS = CONTRACT / "schemas"
EXAMPLES = CONTRACT / "examples"
ASYNCAPI = CONTRACT / "asyncapi.yaml"
BASE_ID = "https://contract.room-booking.example/v1/schemas/"
SCHEMA_SUFFIX = ".schema.json"
# Files in schemas/ that hold shared definitions, not a message.
DEFINITION_SCHEMAS = {"common"}
VARIANT_SEPARATOR = "--"


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.checked = 0

    def fail(self, text: str) -> None:
        self.failures.append(text)


def load_json(path: Path, report: Report):
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        report.fail(f"{rel(path)}: not readable JSON: {error}")
        return None


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def iter_refs(node, pointer=""):
    """Yields (json-pointer, ref) for every "$ref" string in a JSON/YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield pointer, value
            else:
                yield from iter_refs(value, f"{pointer}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from iter_refs(value, f"{pointer}/{index}")


def resolve_pointer(document, fragment: str):
    """Resolves a JSON pointer fragment ("/a/b" or ""); raises KeyError when absent."""
    node = document
    if not fragment:
        return node
    if not fragment.startswith("/"):
        raise KeyError(fragment)
    for raw in fragment[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node[part]
        else:
            raise KeyError(part)
    return node


def load_schemas(report: Report):
    schemas: dict[str, dict] = {}
    if not SCHEMAS.is_dir():
        report.fail(f"{rel(SCHEMAS)}: missing")
        return schemas, Registry()
    for path in sorted(SCHEMAS.glob(f"*{SCHEMA_SUFFIX}")):
        name = path.name[: -len(SCHEMA_SUFFIX)]
        schema = load_json(path, report)
        if schema is None:
            continue
        if not isinstance(schema, dict):
            report.fail(f"{rel(path)}: a schema must be a JSON object")
            continue
        expected_id = BASE_ID + path.name
        if schema.get("$id") != expected_id:
            report.fail(f"{rel(path)}: $id is {schema.get('$id')!r}, expected {expected_id!r}")
        if schema.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
            report.fail(f"{rel(path)}: $schema must be https://json-schema.org/draft/2020-12/schema")
        if name not in DEFINITION_SCHEMAS and not schema.get("description"):
            report.fail(f"{rel(path)}: message schema without description")
        try:
            Draft202012Validator.check_schema(schema)
        except Exception as error:  # SchemaError
            report.fail(f"{rel(path)}: not a valid draft 2020-12 schema: {short(error)}")
            continue
        schemas[name] = schema
    for path in sorted(SCHEMAS.iterdir()):
        if path.is_file() and not path.name.endswith(SCHEMA_SUFFIX):
            report.fail(f"{rel(path)}: unexpected file in schemas/ (names end in {SCHEMA_SUFFIX})")
    registry = Registry().with_resources(
        (BASE_ID + name + SCHEMA_SUFFIX, Resource.from_contents(schema)) for name, schema in schemas.items()
    )
    for name, schema in schemas.items():
        base = BASE_ID + name + SCHEMA_SUFFIX
        resolver = registry.resolver(base_uri=base)
        for pointer, ref in iter_refs(schema):
            try:
                resolver.lookup(ref)
            except Unresolvable as error:
                report.fail(f"schemas/{name}{SCHEMA_SUFFIX}#{pointer}: $ref {ref!r} does not resolve: {error}")
        report.checked += 1
    return schemas, registry


def short(error) -> str:
    text = getattr(error, "message", None) or str(error)
    text = " ".join(text.split())
    return text if len(text) <= 400 else text[:397] + "..."


def describe(error) -> str:
    location = "/".join(str(p) for p in error.absolute_path) or "<root>"
    detail = short(error)
    if error.validator == "not":
        detail = f"must not be valid under {json.dumps(error.validator_value)}"
    if error.context:
        inner = best_match(error.context)
        inner_location = "/".join(str(p) for p in inner.absolute_path) or "<root>"
        detail += f" (closest: at {inner_location}: {short(inner)})"
    return f"at {location}: {detail}"


def validate_dir(directory: Path, label: str, schemas, registry, report: Report, require_all: bool) -> set[str]:
    covered: set[str] = set()
    if not directory.is_dir():
        report.fail(f"{label} {directory}: not a directory")
        return covered
    files = sorted(p for p in directory.iterdir() if p.is_file())
    if not files:
        report.fail(f"{label} {directory}: no files")
    messages = {n for n in schemas if n not in DEFINITION_SCHEMAS}
    for path in files:
        if not path.name.endswith(".json"):
            report.fail(f"{label} {path.name}: not a .json file")
            continue
        stem = path.name[: -len(".json")]
        schema_name = stem.split(VARIANT_SEPARATOR, 1)[0]
        if schema_name not in messages:
            report.fail(f"{label} {path.name}: no message schema named {schema_name!r} "
                        f"(expected schemas/{schema_name}{SCHEMA_SUFFIX})")
            continue
        instance = load_json(path, report)
        if instance is None:
            continue
        validator = Draft202012Validator(
            schemas[schema_name], registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
        )
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        for error in errors:
            report.fail(f"{label} {path.name} vs {schema_name}{SCHEMA_SUFFIX}: {describe(error)}")
        report.checked += 1
        covered.add(schema_name)
    if require_all:
        for name in sorted(messages - covered):
            report.fail(f"{label} {directory}: no file for schema {name!r}")
    return covered


def check_asyncapi(schemas, report: Report) -> None:
    if not ASYNCAPI.is_file():
        report.fail(f"{rel(ASYNCAPI)}: missing")
        return
    try:
        with ASYNCAPI.open(encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as error:
        report.fail(f"{rel(ASYNCAPI)}: does not parse: {short(error)}")
        return
    if not isinstance(document, dict) or not str(document.get("asyncapi", "")).startswith(("2.6", "3.")):
        report.fail(f"{rel(ASYNCAPI)}: not an AsyncAPI 2.6/3.x document (no 'asyncapi' version)")
        return
    for key in ("info", "channels"):
        if key not in document:
            report.fail(f"{rel(ASYNCAPI)}: no '{key}'")
    referenced: set[str] = set()
    loaded: dict[Path, object] = {}
    for pointer, ref in iter_refs(document):
        where = f"{rel(ASYNCAPI)}#{pointer}"
        target, fragment = urldefrag(ref)
        if not target:
            try:
                resolve_pointer(document, fragment)
            except (KeyError, IndexError, ValueError):
                report.fail(f"{where}: $ref {ref!r} does not resolve inside the document")
            continue
        if "://" in target:
            report.fail(f"{where}: $ref {ref!r} points outside the repository (use ./schemas/...)")
            continue
        path = (ASYNCAPI.parent / target).resolve()
        if path.parent != SCHEMAS.resolve() or not path.name.endswith(SCHEMA_SUFFIX):
            report.fail(f"{where}: $ref {ref!r} is not a file in docs/contract/schemas/")
            continue
        name = path.name[: -len(SCHEMA_SUFFIX)]
        if not path.is_file() or name not in schemas:
            report.fail(f"{where}: $ref {ref!r}: no valid schema file {rel(path)}")
            continue
        referenced.add(name)
        if fragment:
            content = loaded.setdefault(path, schemas[name])
            try:
                resolve_pointer(content, fragment)
            except (KeyError, IndexError, ValueError):
                report.fail(f"{where}: $ref {ref!r}: fragment does not resolve in {path.name}")
    for name in sorted(set(schemas) - DEFINITION_SCHEMAS - referenced):
        report.fail(f"{rel(ASYNCAPI)}: message schema {name!r} is not referenced")
    report.checked += 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", action="append", default=[], type=Path, metavar="DIR",
                        help="also validate every <schema-name>[--variant].json in DIR (repeatable)")
    parser.add_argument("--require-all-samples", action="store_true",
                        help="fail unless every message schema has a file in each --samples DIR")
    args = parser.parse_args(argv)

    report = Report()
    schemas, registry = load_schemas(report)
    validate_dir(EXAMPLES, "example", schemas, registry, report, require_all=True)
    for directory in args.samples:
        validate_dir(directory, "sample", schemas, registry, report, require_all=args.require_all_samples)
    check_asyncapi(schemas, report)

    if report.failures:
        print(f"validate_contract: {len(report.failures)} failure(s):", file=sys.stderr)
        for failure in report.failures:
            print(f"  FAIL {failure}", file=sys.stderr)
        return 1
    print(f"validate_contract: OK ({len(schemas)} schemas, {report.checked} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
