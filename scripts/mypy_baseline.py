"""Type check the engine and the dashboard; fail on any mypy error not in the baseline.

    python scripts/mypy_baseline.py           # the check (`make types`, and CI's lint step)
    python scripts/mypy_baseline.py --update  # rewrite .mypy-baseline.txt from today's errors

One mypy run over what `[tool.mypy]` in pyproject.toml names (recovery and dashboard,
migrations excluded), with its per-module settings: the modules of the strict override must
have no error at all, and nothing of theirs is ever written to the baseline. Everywhere else
the errors found today are in .mypy-baseline.txt, one line each as `file: [code] message`,
without line numbers, so an edit that moves code up or down does not change it.

The check fails
- on an error the baseline does not list (a new one: fix it, don't baseline it), and
- when the baseline lists errors that no longer occur: the baseline only shrinks, so run
  `--update` and commit the shorter file with the fix.

Run `--update` too after moving or splitting a module: its errors change files, not number.
Review the diff of .mypy-baseline.txt: an update should remove or rename lines, never add.

recovery.settings refuses to import without a key, and django-stubs' plugin imports it: this
script sets SALVAGE_INSECURE_DEV_KEY=1 for mypy when the environment has no key of its own.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".mypy-baseline.txt"
HEADER = (
    "# mypy errors accepted for now, one per line: file: [code] message (no line numbers).\n"
    "# It only shrinks: scripts/mypy_baseline.py fails on a new error, and on a fixed one\n"
    "# until `python scripts/mypy_baseline.py --update` removes it.\n"
)

# path:line: error: message  [code]   (the line is missing for a whole-module error)
_ERROR = re.compile(
    r"^(?P<path>[^:\s]+\.pyi?):(?:\d+:){0,2} error: (?P<msg>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)
# Line numbers inside messages ("already defined on line 12") would churn like the prefix.
_LINE_IN_MESSAGE = re.compile(r"\bline \d+\b")


def strict_prefixes() -> tuple[str, ...]:
    """Path prefixes of the modules the strict override of pyproject.toml names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    prefixes = []
    for override in config.get("overrides", []):
        if not override.get("disallow_untyped_defs"):
            continue
        modules = override["module"]
        for module in [modules] if isinstance(modules, str) else modules:
            path = module.removesuffix(".*").replace(".", "/")
            # "a.b.*" is the package's modules; "a.b" the module itself (or a package's __init__).
            if module.endswith(".*"):
                prefixes.append(f"{path}/")
            else:
                prefixes += [f"{path}.py", f"{path}/__init__.py"]
    return tuple(prefixes)


def run_mypy() -> tuple[list[str], list[str]]:
    """mypy's error lines as it prints them, and the same errors as baseline entries."""
    env = {**os.environ}
    env.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-pretty", "--no-error-summary", "--show-error-codes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    # 0: no error, 1: errors found; anything else is mypy itself failing (a crash, a bad
    # configuration, settings that do not import): never mistake that for "no new errors".
    if done.returncode not in (0, 1):
        sys.exit(f"mypy failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    shown, entries = [], []
    for line in done.stdout.splitlines():
        found = _ERROR.match(line)
        if found is None:
            continue  # notes, and the context lines that go with an error
        shown.append(line)
        message = _LINE_IN_MESSAGE.sub("line N", found["msg"])
        entries.append(f"{found['path']}: [{found['code'] or 'misc'}] {message}")
    if done.returncode == 1 and not entries:
        sys.exit(f"mypy reported errors this script cannot read:\n{done.stdout}{done.stderr}")
    return shown, entries


def read_baseline() -> Counter[str]:
    if not BASELINE.exists():
        return Counter()
    lines = BASELINE.read_text().splitlines()
    return Counter(line for line in lines if line.strip() and not line.startswith("#"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--update", action="store_true", help="rewrite the baseline from the errors found now"
    )
    args = parser.parse_args()

    shown, entries = run_mypy()
    strict = strict_prefixes()
    in_strict = [line for line in shown if line.startswith(strict)]
    if in_strict:
        print("Errors in strict modules (never baselined; fix them):")
        print("\n".join(in_strict))
    current = Counter(entry for entry in entries if not entry.startswith(strict))

    if args.update:
        if in_strict:
            return 1
        body = "".join(f"{entry}\n" for entry in sorted(current.elements()))
        BASELINE.write_text(HEADER + body)
        print(f"{BASELINE.name}: {sum(current.values())} errors in {len(current)} kinds")
        return 0

    baseline = read_baseline()
    new = current - baseline
    fixed = baseline - current
    if new:
        print(f"New mypy errors ({sum(new.values())}), not in {BASELINE.name}: fix them")
        # mypy's own lines (with line numbers) for the entries that are new.
        wanted = Counter(new)
        for line, entry in zip(shown, entries, strict=True):
            if wanted[entry] > 0 and not entry.startswith(strict):
                print(line)
                wanted[entry] -= 1
    if fixed:
        print(
            f"{sum(fixed.values())} errors of {BASELINE.name} no longer occur; the baseline only "
            "shrinks: run `python scripts/mypy_baseline.py --update` and commit it with the fix:"
        )
        print("\n".join(f"  {entry}" for entry in sorted(fixed.elements())))
    if in_strict or new or fixed:
        return 1
    print(f"mypy: no new errors ({sum(current.values())} in the baseline, strict modules clean)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
