"""The stages of one candidate's evaluation, in the order they run: patch (patch.py), screen (screen/), compile
(compile/), static (static/), correctness (check.py) and timing (timing/); a stage runs only where those before
it passed. result.py is the result every stage returns, details.py what each records beside it, evaluation.py
the round's trusted state the stages that run kernels share."""
