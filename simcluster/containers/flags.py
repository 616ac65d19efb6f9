"""Command-line flags parsed the way spf13/pflag (docker's and podman's parser) parses them, with its messages."""

from __future__ import annotations

from dataclasses import dataclass

TRUE = ("1", "t", "T", "TRUE", "true", "True")
FALSE = ("0", "f", "F", "FALSE", "false", "False")


class FlagError(Exception):
    """pflag's own text (`unknown flag: --foo`); the CLI wraps it with its usage lines."""


@dataclass(frozen=True)
class Flag:
    name: str
    short: str = ""
    value: bool = True  # takes an argument (False: a bool flag)
    repeat: bool = False  # every use is kept, in order
    key: str = ""  # where it lands when two flags are one (--net and --network)

    @property
    def dest(self) -> str:
        return self.key or self.name


def _store(opts: dict, flag: Flag, value: str, shown: str) -> None:
    if not flag.value:
        if value not in TRUE + FALSE:
            raise FlagError(f'invalid argument "{value}" for "{shown}" flag: strconv.ParseBool: parsing "{value}": '
                            f"invalid syntax")
        opts[flag.dest] = value in TRUE
    elif flag.repeat:
        opts.setdefault(flag.dest, []).append(value)
    else:
        opts[flag.dest] = value


def parse(argv: list[str], flags: list[Flag], *, interspersed: bool = True) -> tuple[dict, list[str]]:
    """(options by dest, positional arguments). Without interspersed (`docker run`) flags end at the first argument."""
    by_long = {f.name: f for f in flags}
    by_short = {f.short: f for f in flags if f.short}
    opts: dict = {}
    args: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            args += argv[i + 1:]
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            flag = by_long.get(name)
            if flag is None:
                raise FlagError(f"unknown flag: --{name}")
            if flag.value and not eq:
                if i + 1 >= len(argv):
                    raise FlagError(f"flag needs an argument: --{name}")
                i += 1
                value = argv[i]
            _store(opts, flag, value if eq or flag.value else "true", f"--{name}")
        elif arg.startswith("-") and arg != "-":
            i = _shorthands(argv, i, by_short, opts)
        elif not interspersed:
            args += argv[i:]
            break
        else:
            args.append(arg)
        i += 1
    return opts, args


def _shorthands(argv: list[str], i: int, by_short: dict, opts: dict) -> int:
    arg = argv[i]
    j = 1
    while j < len(arg):
        c = arg[j]
        flag = by_short.get(c)
        if flag is None:
            raise FlagError(f"unknown shorthand flag: '{c}' in {arg}")
        rest = arg[j + 1:]
        if flag.value:
            if rest:
                value = rest[1:] if rest.startswith("=") else rest
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                raise FlagError(f"flag needs an argument: '{c}' in {arg}")
            _store(opts, flag, value, f"-{c}, --{flag.name}")
            return i
        if rest.startswith("="):
            _store(opts, flag, rest[1:], f"-{c}, --{flag.name}")
            return i
        _store(opts, flag, "true", f"-{c}, --{flag.name}")
        j += 1
    return i
