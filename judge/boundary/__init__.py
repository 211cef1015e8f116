"""The trust boundary: code that runs in the processes holding kernel code, and the trusted oracle that feeds them
through shared memory."""
