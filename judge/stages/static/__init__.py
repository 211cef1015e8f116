"""The static stage: a target's rules over each compiled config's PTX, and its layout checks on the CPU."""
