"""`python -m judge` and the `judge` console script: the command line, its own imports' bytecode kept where the
machine keeps none (judge.sandbox.bytecode) before any of them is made."""


def main() -> None:
    from .sandbox.bytecode import cache_this_process

    cache_this_process()
    from .cli.main import main as command

    command()


if __name__ == "__main__":
    main()
