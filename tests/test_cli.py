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
