"""The timing stage: base and candidate in process pairs that take turns on the device, and the audits of what
runners report."""
