"""The sandbox: isolated, confined child processes (one call, or a long-lived worker) that hold candidate code."""
