"""The `diagnose` preset, its passes, rules and MFU's peak; docs/presets/diagnose.md."""
