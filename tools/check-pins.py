"""Offline check that CI workflows and compose files run only pinned code.

Usage: check-pins.py FILE ...

Every `uses:` of a workflow must name an action or reusable workflow by a
full 40-hex commit SHA (`owner/repo@<sha>`, a comment after it may say
which release it is), or a local path (`./...`); a tag or branch can be
moved to other code after review (GitHub's security hardening guide for
Actions, "Using third-party actions":
https://docs.github.com/en/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions#using-third-party-actions).
Every `image:` (compose files, job containers) and every `docker://` action
must carry an `@sha256:<64 hex>` digest. A job that can read a secret or
request an OIDC token (`secrets.` in it, or `id-token: write`) must not
restore a cache (`actions/cache`, `actions/cache/restore`): whatever another
job saved under its key would run with those credentials.

Exit status: 0 when every file passes, 1 when one does not (each finding
printed as `file:line: problem`), 2 on a usage error.
"""

import re
import sys
from pathlib import Path

USES = re.compile(r"^\s*(?:-\s+)?uses:\s*['\"]?([^'\"\s#]+)")
IMAGE = re.compile(r"^\s*(?:-\s+)?image:\s*['\"]?([^'\"\s#]+)")
PINNED_ACTION = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$")
PINNED_IMAGE = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
JOB = re.compile(r"^  ([A-Za-z0-9_-]+):\s*$")
CACHE_RESTORE = re.compile(r"^actions/cache(/restore)?@")


def unpinned(text: str) -> list[tuple[int, str]]:
    """The findings of one file's text, as (line number, problem)."""
    findings = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        if match := USES.match(line):
            ref = match.group(1)
            if ref.startswith("./"):
                continue
            if ref.startswith("docker://"):
                if not PINNED_IMAGE.match(ref.removeprefix("docker://")):
                    findings.append((number, f"{ref} is not pinned by a sha256 digest"))
            elif not PINNED_ACTION.match(ref):
                findings.append((number, f"{ref} is not pinned by a full 40-hex commit SHA"))
        if match := IMAGE.match(line):
            ref = match.group(1)
            if not PINNED_IMAGE.match(ref):
                findings.append((number, f"image {ref} is not pinned by a sha256 digest"))
    return findings + cache_in_credentialed_jobs(text)


def jobs(text: str) -> list[tuple[str, int, list[str]]]:
    """The workflow's jobs: (name, first line number, lines)."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == "jobs:")
    except StopIteration:
        return []
    found: list[tuple[str, int, list[str]]] = []
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if match := JOB.match(line):
            found.append((match.group(1), index + 1, []))
        elif line and not line.startswith(" ") and not line.startswith("#"):
            break
        elif found:
            found[-1][2].append(line)
    return found


def cache_in_credentialed_jobs(text: str) -> list[tuple[int, str]]:
    """A cache restored into a job that holds credentials."""
    findings = []
    for name, first, body in jobs(text):
        code = [line for line in body if not line.lstrip().startswith("#")]
        credentialed = any("secrets." in line or re.search(r"id-token:\s*write", line) for line in code)
        if not credentialed:
            continue
        for offset, line in enumerate(body, start=1):
            match = USES.match(line)
            if match and not line.lstrip().startswith("#") and CACHE_RESTORE.match(match.group(1)):
                findings.append(
                    (first + offset, f"job {name} holds credentials and restores a cache ({match.group(1)})")
                )
    return findings


def check(paths: list[Path], out) -> int:
    status = 0
    for path in paths:
        for number, problem in unpinned(path.read_text()):
            print(f"{path}:{number}: {problem}", file=out)
            status = 1
    return status


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return check([Path(a) for a in argv], sys.stdout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
