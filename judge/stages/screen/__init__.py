"""The screen stage: a static read of a patched kernel's source for forbidden calls and flags for the sharks."""
