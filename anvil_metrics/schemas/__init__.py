"""The JSON Schemas of anvil's files, generated from its field rules, and docs/fields.md."""
