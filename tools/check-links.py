"""Offline check of the relative links and anchors of Markdown files.

Usage: check-links.py [FILE.md ...]

Without arguments, checks every Markdown file git tracks (run from the
repository root). Each relative link, `[text](path#anchor)` or a reference
definition `[label]: path#anchor`, must name a file or directory that exists
inside the repository, and its anchor a heading of the target Markdown file
(or an HTML `id`/`name` in it), by GitHub's rules: lowercase, punctuation
dropped except `-` and `_`, spaces turned into `-`, a repeated heading
suffixed `-1`, `-2`, ... Links with a scheme (`https:`, `mailto:`) are not
followed: the check needs no network. Code blocks and code spans are skipped.

Exit status: 0 when every link resolves, 1 when one does not (each printed as
`file:line: problem`), 2 on a usage error.
"""

import re
import subprocess
import sys
from pathlib import Path

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# `[text](target "title")` and `![alt](target)`; the target may sit in <...>.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*?(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication)."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def prose_lines(text: str):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * len(match.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            continue
        yield number, line


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown document defines."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(text):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str):
    """(line number, target) of every link of a Markdown document; a link's
    text may run over several lines."""
    kept = dict(prose_lines(text))
    lines = [kept.get(n, "") for n in range(1, len(text.splitlines()) + 1)]
    # Code spans blanked to spaces, so offsets still give line numbers.
    prose = "\n".join(CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line) for line in lines)
    found = []
    for number, line in enumerate(prose.split("\n"), start=1):
        definition = DEFINITION.match(line)
        if definition:
            found.append((number, definition.group(1).strip("<>")))
    for match in INLINE.finditer(prose):
        found.append((prose.count("\n", 0, match.start()) + 1, match.group(1).strip("<>")))
    return sorted(found)


def check_file(path: Path, root: Path, cache: dict[Path, set[str]]) -> list[str]:
    """The broken links of one file, as `file:line: problem`."""
    problems = []
    text = path.read_text(encoding="utf-8")
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    for number, target in links(text):
        if SCHEME.match(target) or target.startswith("//"):
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path.resolve()
        where = f"{shown}:{number}: {target}"
        if not destination.is_relative_to(root):
            problems.append(f"{where}: points outside the repository")
            continue
        if not destination.exists():
            problems.append(f"{where}: no such file or directory")
            continue
        if not anchor:
            continue
        if destination.is_dir() or destination.suffix.lower() != ".md":
            problems.append(f"{where}: an anchor into a file that is not Markdown")
            continue
        if destination not in cache:
            cache[destination] = anchors(destination.read_text(encoding="utf-8"))
        if anchor not in cache[destination]:
            problems.append(f"{where}: no heading or anchor #{anchor} in {destination.relative_to(root)}")
    return problems


def check(files: list[Path], root: Path, out) -> int:
    """Prints every broken link of `files`; returns how many there are."""
    root = root.resolve()
    cache: dict[Path, set[str]] = {}
    problems = [p for f in files for p in check_file(f.resolve(), root, cache)]
    for problem in problems:
        print(problem, file=out)
    if problems:
        print(f"{len(problems)} broken link(s) in {len(files)} Markdown file(s)", file=out)
    else:
        print(f"links: every relative link and anchor resolves ({len(files)} Markdown files)", file=out)
    return len(problems)


def tracked_markdown(root: Path) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "*.md"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    return [root / name for name in listed.split("\0") if name]


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    root = Path.cwd()
    files = [Path(a) for a in argv[1:]] or tracked_markdown(root)
    missing = [f for f in files if not f.is_file()]
    if missing:
        print(f"{missing[0]}: not a file", file=sys.stderr)
        return 2
    return 1 if check(files, root, sys.stdout) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
