"""The compile stage: a candidate's ahead-of-time compile in a child process, its cache, its warm workers, the
pipeline that overlaps compiles with the kernel stages, and the reading of resources and tracebacks."""
