"""The CLI wiring: every area registers its command; a missing optional dependency disables only its own."""

from kdakit import cli


def test_every_command_registers():
    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert set(cli.COMMAND_MODULES) <= set(commands)


def test_a_command_whose_module_cannot_import_explains_itself(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMAND_MODULES, "eval", "kdakit.no_such_module_for_test")
    assert cli.main(["eval", "gsm8k", "--base-url", "http://x"]) == 2
    err = capsys.readouterr().err
    assert "`kdakit eval` cannot run here" in err and "no_such_module_for_test" in err
    assert cli.main(["pins"]) == 0  # the others still work


def test_set_values_that_look_like_options_are_kept_together():
    assert cli._join_set_values(["plan", "--set", "--tp-size=8", "--unset", "--port", "--sku", "h200"]) == [
        "plan",
        "--set=--tp-size=8",
        "--unset=--port",
        "--sku",
        "h200",
    ]


def test_every_command_and_subcommand_describes_itself_to_users():
    import argparse

    parser = cli.build_parser()
    assert parser.description == cli.DESCRIPTION and "COMMAND --help" in parser.description

    def undescribed(p: argparse.ArgumentParser, path: str) -> list[str]:
        missing = []
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    missing += [] if sub.description else [f"{path} {name}"]
                    missing += undescribed(sub, f"{path} {name}")
        return missing

    assert undescribed(parser, "kdakit") == []


def test_every_command_the_docs_show_parses_and_names_real_choices():
    """The `kdakit ...` commands in the READMEs, as a user copies them: argparse accepts every option and
    choice they name (arguments they leave out, such as --base-url, are the reader's to add), and a kernel
    bench's --phases names phases the bench has."""
    import contextlib
    import io
    import re
    import shlex
    from pathlib import Path

    from kdakit.kernels.tools.bench import PHASES

    repo = Path(__file__).resolve().parent.parent
    parser = cli.build_parser()
    wrong, seen = [], 0
    for doc in sorted(repo.glob("*/README.md")) + [repo / "README.md"]:
        for span in re.findall(r"`(kdakit [^`]+)`", doc.read_text()):
            argv = shlex.split(span)[1:]
            if "..." in argv:  # a placeholder for more arguments
                continue
            seen += 1
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    args = parser.parse_args(argv)
            except SystemExit as exc:
                said = err.getvalue().strip().splitlines()[-1:] or [""]
                if exc.code and not re.search(r"are required|expected one argument", said[0]):
                    wrong.append(f"{doc.relative_to(repo)}: {span}: {said[0]}")
                continue
            phases = getattr(args, "phases", None)
            if isinstance(phases, str) and set(phases.split(",")) - set(PHASES):
                wrong.append(f"{doc.relative_to(repo)}: {span}: --phases outside {', '.join(PHASES)}")
    assert seen > 20 and not wrong, "\n".join(wrong)
