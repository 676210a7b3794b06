#!/usr/bin/env python3
"""Validates the admin API's answers against its OpenAPI 3.1 document.

usage: openapi_validate.py OPENAPI_JSON ANSWERS_JSON

ANSWERS_JSON is a list of {"method", "path" (as the document writes it),
"status", "body"} and, optionally, "schema" (a "#/components/..." pointer
that replaces the documented one, e.g. for an event stream's data). Each
body is validated with jsonschema's Draft 2020-12 validator (OpenAPI 3.1's
dialect) against the schema of its route, method, status and
application/json content; "$ref"s resolve within the document. Prints one
line per answer checked and every error; exits 1 on any error, 2 when an
answer has no documented schema. Run by crates/switchyard/tests/admin_api.rs.
"""
import json
import sys

import jsonschema


def resolve(doc, node):
    """Follows a "$ref" to a "#/..." pointer of the document (responses)."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError("not a local reference: " + ref)
        node = doc
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        doc = json.load(f)
    with open(sys.argv[2], encoding="utf-8") as f:
        answers = json.load(f)
    failed = 0
    for a in answers:
        what = "%s %s %s" % (a["method"], a["path"], a["status"])
        if "schema" in a:
            schema = {"$ref": a["schema"]}
        else:
            op = doc["paths"].get(a["path"], {}).get(a["method"].lower())
            if op is None:
                print("UNDOCUMENTED %s: no such operation" % what)
                return 2
            resp = resolve(doc, op["responses"].get(str(a["status"])))
            schema = ((resp or {}).get("content") or {}).get("application/json", {}).get("schema")
            if schema is None:
                print("UNDOCUMENTED %s: no application/json schema" % what)
                return 2
        # The answer's schema with the document's components beside it, so
        # "#/components/schemas/X" resolves as in the document.
        root = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": doc.get("components", {}),
            "allOf": [schema],
        }
        jsonschema.Draft202012Validator.check_schema(root)
        errors = sorted(
            jsonschema.Draft202012Validator(root).iter_errors(a["body"]),
            key=lambda e: list(e.absolute_path),
        )
        if errors:
            failed += 1
            for e in errors:
                path = "/".join(str(p) for p in e.absolute_path) or "(the answer)"
                print("INVALID %s at %s: %s" % (what, path, e.message))
        else:
            print("valid %s" % what)
    print("%d answers, %d invalid" % (len(answers), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
