"""The profile stage: where a kernel's time goes, per benchmark (issue 41). `stage` runs it, `ncu` is Nsight
Compute's invocation and its CSV, `peaks` the device's measured peaks, `bounds` the lines the brief names, `model`
what is recorded."""
