"""The API's description (vmctl/api/openapi.yaml) for the tests: its
operations, their parameters, and a small JSON Schema check of request
bodies (the subset of OpenAPI 3.0 the document uses)."""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Set

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OPENAPI = os.path.join(REPO, "vmctl", "api", "openapi.yaml")

_doc: Optional[Dict[str, Any]] = None


def doc() -> Dict[str, Any]:
    """The parsed openapi.yaml (once)."""
    global _doc
    if _doc is None:
        with open(OPENAPI, encoding="utf-8") as f:
            _doc = yaml.safe_load(f)
    return _doc


def resolve(node: Any) -> Any:
    """node with a $ref followed (repeatedly)."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        cur: Any = doc()
        for part in ref[2:].split("/"):
            cur = cur[part]
        node = cur
    return node


def schema(name: str) -> Dict[str, Any]:
    """components.schemas[name]."""
    return doc()["components"]["schemas"][name]


def operation(method: str, path: str) -> Optional[Dict[str, Any]]:
    """The operation of method and path, None if openapi.yaml has none."""
    item = doc()["paths"].get(path)
    if item is None:
        return None
    return item.get(method.lower())


def parameters(method: str, path: str) -> List[Dict[str, Any]]:
    """The parameters of an operation: its path item's and its own."""
    item = doc()["paths"][path]
    out = [resolve(p) for p in item.get("parameters", [])]
    out += [resolve(p) for p in item[method.lower()].get("parameters", [])]
    return out


def params_in(method: str, path: str, where: str) -> Set[str]:
    """The names of an operation's parameters in where (path, query)."""
    return {p["name"] for p in parameters(method, path) if p["in"] == where}


def request_schema(method: str, path: str, content_type: str = "application/json") -> Optional[Dict[str, Any]]:
    """The request body schema of an operation for content_type."""
    rb = operation(method, path).get("requestBody")
    if rb is None:
        return None
    content = resolve(rb).get("content", {})
    if content_type not in content:
        return None
    return content[content_type]["schema"]


def validate(value: Any, sch: Any, where: str = "$", shape_only: bool = False) -> List[str]:
    """Problems of value against the schema sch (empty: none). With
    shape_only only names and types are checked, not the constraints on
    values (patterns, ranges, enums, lengths): a request carrying a user's
    bad value is still well-formed."""
    sch = resolve(sch)
    strict = not shape_only

    def sub(v: Any, s: Any, w: str) -> List[str]:
        return validate(v, s, w, shape_only)

    errs: List[str] = []
    if "oneOf" in sch:
        if not any(not sub(value, s, where) for s in sch["oneOf"]):
            errs.append("%s: matches none of oneOf" % where)
        return errs
    t = sch.get("type")
    if t == "object" or (t is None and "properties" in sch):
        if not isinstance(value, dict):
            return ["%s: want an object, got %r" % (where, value)]
        props = sch.get("properties", {})
        for r in sch.get("required", []):
            if r not in value:
                errs.append("%s: required %r missing" % (where, r))
        addl = sch.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                errs += sub(v, props[k], where + "." + k)
            elif addl is False:
                errs.append("%s: %r is not a property of the schema" % (where, k))
            elif isinstance(addl, dict):
                errs += sub(v, addl, where + "." + k)
        if strict and "maxProperties" in sch and len(value) > sch["maxProperties"]:
            errs.append("%s: more than %d properties" % (where, sch["maxProperties"]))
    elif t == "array":
        if not isinstance(value, list):
            return ["%s: want an array, got %r" % (where, value)]
        if strict and len(value) < sch.get("minItems", 0):
            errs.append("%s: fewer than %d items" % (where, sch["minItems"]))
        for i, v in enumerate(value):
            errs += sub(v, sch.get("items", {}), "%s[%d]" % (where, i))
    elif t == "string":
        if not isinstance(value, str):
            return ["%s: want a string, got %r" % (where, value)]
        if not strict:
            return errs
        if "enum" in sch and value not in sch["enum"]:
            errs.append("%s: %r not in %r" % (where, value, sch["enum"]))
        if "pattern" in sch and not re.search(sch["pattern"], value):
            errs.append("%s: %r does not match %s" % (where, value, sch["pattern"]))
        if "minLength" in sch and len(value) < sch["minLength"]:
            errs.append("%s: shorter than %d" % (where, sch["minLength"]))
    elif t == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return ["%s: want an integer, got %r" % (where, value)]
        if not strict:
            return errs
        if "minimum" in sch and value < sch["minimum"]:
            errs.append("%s: %d below %d" % (where, value, sch["minimum"]))
        if "maximum" in sch and value > sch["maximum"]:
            errs.append("%s: %d above %d" % (where, value, sch["maximum"]))
    elif t == "boolean":
        if not isinstance(value, bool):
            errs.append("%s: want a boolean, got %r" % (where, value))
    return errs
