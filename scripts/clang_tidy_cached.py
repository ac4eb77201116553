#!/usr/bin/env python3
"""clang-tidy that remembers the translation units it found clean.

scripts/check_style.sh runs clang-tidy over every translation unit, about 12
of CI's minutes on 2 cores. A unit's findings depend only on what the
compiler sees (the preprocessed text: the file and every header it
includes, the flags), on clang-tidy itself and on .clang-tidy, so a unit
whose hash of those is remembered as clean is clean again without being
analysed: the approach of the ctcache project. Run-clang-tidy calls this
in clang-tidy's place (its -clang-tidy-binary); it takes clang-tidy's
arguments.

The cache lives outside the clone ($HETERODL_CACHE, default
~/.cache/heterodl, then clang-tidy/), so a fresh clone on a machine that ran
the check before finds it, and a bare machine simply analyses everything.
The clone's own path is taken out of the preprocessed text before hashing,
so clones in different folders share the cache. Only clean units are
remembered: a unit with a finding is analysed every time.
"""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

CLANG_TIDY = os.environ.get("HETERODL_CLANG_TIDY", "clang-tidy")


def cache_dir():
    root = os.environ.get("HETERODL_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "heterodl"))
    return os.path.join(root, "clang-tidy")


def compile_command(build_path, source):
    """The unit's compiler command (as a list) and its directory, from the
    build's compile_commands.json; None when the file is not listed."""
    with open(os.path.join(build_path, "compile_commands.json")) as f:
        entries = json.load(f)
    source = os.path.realpath(source)
    for entry in entries:
        path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
        if path == source:
            command = entry.get("arguments") or shlex.split(entry["command"])
            return command, entry["directory"]
    return None


def preprocessed(command, directory):
    """The unit as the compiler sees it; None when it does not preprocess."""
    arguments, skip = [], False
    for argument in command:
        if skip:
            skip = False
        elif argument == "-o":
            skip = True
        elif argument != "-c":
            arguments.append(argument)
    done = subprocess.run(arguments + ["-E"], cwd=directory, capture_output=True)
    return done.stdout if done.returncode == 0 else None


def unit_key(arguments, build_path, source):
    """The hash of everything the unit's findings depend on, or None."""
    found = compile_command(build_path, source)
    if found is None:
        return None
    command, directory = found
    text = preprocessed(command, directory)
    if text is None:
        return None
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    digest = hashlib.sha256()
    digest.update(subprocess.run([CLANG_TIDY, "--version"], capture_output=True).stdout)
    config = os.path.join(root, ".clang-tidy")
    if os.path.exists(config):
        with open(config, "rb") as f:
            digest.update(f.read())
    options = [a for a in arguments if not a.startswith("-p=") and a != source]
    digest.update(" ".join(options).replace(root, "<root>").encode())
    digest.update(" ".join(command).replace(root, "<root>").encode())
    digest.update(text.replace(root.encode(), b"<root>"))
    return digest.hexdigest()


def main():
    arguments = sys.argv[1:]
    passthrough = any(a in ("-list-checks", "--list-checks", "-fix", "--fix") or
                      a.startswith("-export-fixes") for a in arguments)
    build = next((a[len("-p="):] for a in arguments if a.startswith("-p=")), None)
    source = arguments[-1] if arguments else ""
    if passthrough or build is None or not os.path.isfile(source):
        os.execvp(CLANG_TIDY, [CLANG_TIDY] + arguments)
    key = unit_key(arguments, build, source)
    marker = os.path.join(cache_dir(), key) if key else None
    if marker and os.path.exists(marker):
        return 0
    done = subprocess.run([CLANG_TIDY] + arguments, capture_output=True)
    sys.stdout.buffer.write(done.stdout)
    sys.stderr.buffer.write(done.stderr)
    plain = re.sub(rb"\x1b\[[0-9;]*m", b"", done.stdout)
    findings = re.search(rb"(warning|error): ", plain) is not None
    if marker and done.returncode == 0 and not findings:
        os.makedirs(cache_dir(), exist_ok=True)
        with open(marker, "w"):
            pass
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
