"""E9001: DynamoDB tables are retained when the stack deletes or replaces them.

The tables hold the counts, which no stack can rebuild. RetainExceptOnCreate
counts as retained: it deletes the table only when the operation that created
it rolls back, when it is new and empty (CloudFormation's DeletionPolicy
attribute). cfn-lint's own I3011
only asks for an explicit policy of any value, and checkov's graph does not
see resource attributes, so this is a cfn-lint JSON-schema rule (loaded with
--append-rules by stack/tests/security.rs).
"""

from __future__ import annotations

from typing import Any

from cfnlint.jsonschema import ValidationResult, Validator
from cfnlint.rules.jsonschema.CfnLintJsonSchema import CfnLintJsonSchema


class TableRetained(CfnLintJsonSchema):
    id = "E9001"
    shortdesc = "DynamoDB tables must be retained on stack deletion and replacement"
    description = (
        "AWS::DynamoDB::Table needs DeletionPolicy: Retain or RetainExceptOnCreate and UpdateReplacePolicy: Retain"
    )
    tags = ["resources", "deletionpolicy", "updatereplacepolicy", "dynamodb"]

    def __init__(self) -> None:
        super().__init__(keywords=["Resources/*"], all_matches=True)
        self._schema = {
            "required": ["DeletionPolicy", "UpdateReplacePolicy"],
            "properties": {
                "DeletionPolicy": {"enum": ["Retain", "RetainExceptOnCreate"]},
                "UpdateReplacePolicy": {"const": "Retain"},
            },
        }

    def validate(self, validator: Validator, s: Any, instance: Any, schema: Any) -> ValidationResult:
        if instance.get("Type") != "AWS::DynamoDB::Table":
            return
        for err in super().validate(validator, s, instance, self._schema):
            err.message = f"{err.message} (a DynamoDB table must be retained: it holds the counts)"
            yield err
