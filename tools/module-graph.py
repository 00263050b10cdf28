#!/usr/bin/env python3
"""Checks that a Rust crate's modules form a one-way graph (no import cycles).

    tools/module-graph.py CRATE_DIR...

For every crate root of each CRATE_DIR (src/lib.rs, src/main.rs, src/bin/*,
tests/*, benches/*, examples/*), the module tree is read from the `mod`
declarations, and each reference to another module of the same crate is an
edge: `use crate::...`, `crate::x::` paths, `super::` and `self::` paths, and
bare paths that start with a child module or an imported name. A path that
names an item re-exported with `use` is followed to the module that defines
it. `mod` declarations themselves are not edges.

Two levels are checked, and every folder in between:

* the top level: the crate root (`lib.rs`, `main.rs`) and the modules
  directly under `src/`; a submodule counts as the top-level module it is in;
* inside each folder module (a module with files of its own below it): the
  folder's own file (`mod.rs`) and its children, a grandchild counting as
  the child it is in. A child that uses an item defined in `mod.rs` while
  `mod.rs` uses that child is a cycle too.

Every cycle is listed with the place of each reference in it; the exit status
is 1 when there is one, 0 otherwise. Standard library only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------------------
# Tokens


TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<raw_string>b?r(?P<hashes>\#*)")
  | (?P<string>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.)|[^'\\\n])')
  | (?P<lifetime>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>r\#[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>[0-9][0-9A-Za-z_.]*)
  | (?P<path_sep>::)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass
class Token:
    kind: str  # "ident", "str", "::" or the punctuation character itself
    text: str
    line: int


def tokenize(source: str) -> list[Token]:
    """Rust source to identifiers, strings, `::` and punctuation; comments,
    chars, lifetimes and numbers are dropped."""
    tokens: list[Token] = []
    pos, line = 0, 1
    while pos < len(source):
        match = TOKEN.match(source, pos)
        if match is None:  # unreachable: `punct` matches any character
            break
        kind = match.lastgroup
        end = match.end()
        if kind == "block_comment":
            depth, end = 1, match.end()
            while depth and end < len(source):
                if source.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif source.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
        elif kind == "raw_string":
            closing = '"' + match.group("hashes")
            found = source.find(closing, match.end())
            end = len(source) if found < 0 else found + len(closing)
            tokens.append(Token("str", source[match.end() : max(found, match.end())], line))
        elif kind == "string":
            tokens.append(Token("str", match.group()[match.group().index('"') + 1 : -1], line))
        elif kind == "ident":
            text = match.group()
            tokens.append(Token("ident", text[2:] if text.startswith("r#") else text, line))
        elif kind == "path_sep":
            tokens.append(Token("::", "::", line))
        elif kind == "punct":
            tokens.append(Token(match.group(), match.group(), line))
        line += source.count("\n", pos, end)
        pos = end
    return tokens


# ---------------------------------------------------------------------------
# Modules


@dataclass
class Use:
    """One leaf of a `use` tree: `name` is bound to `path` (None: a glob)."""

    name: str | None
    path: list[str]
    line: int


@dataclass
class Module:
    path: tuple[str, ...]
    file: Path
    is_file: bool  # its own file (or the crate root), not an inline `mod x { }`
    parent: Module | None
    children: dict[str, Module] = field(default_factory=dict)
    uses: list[Use] = field(default_factory=list)
    # Paths outside `use` declarations: (segments, line).
    paths: list[tuple[list[str], int]] = field(default_factory=list)

    @property
    def file_module(self) -> Module:
        module = self
        while not module.is_file and module.parent is not None:
            module = module.parent
        return module

    def name(self) -> str:
        return "crate" if not self.path else "::".join(self.path)


class Crate:
    def __init__(self, root_file: Path, crate_dir: Path):
        self.root_file = root_file
        self.crate_dir = crate_dir
        self.problems: list[str] = []
        self.root = Module((), root_file, True, None)
        self.modules: list[Module] = [self.root]
        self._load(self.root, root_file, child_dir=root_file.parent)

    # -- reading ------------------------------------------------------------

    def _load(self, module: Module, file: Path, child_dir: Path) -> None:
        try:
            tokens = tokenize(file.read_text(encoding="utf-8"))
        except OSError as err:
            self.problems.append(f"{file}: {err}")
            return
        self._parse(module, tokens, 0, len(tokens), child_dir)

    def _parse(self, module: Module, tokens: list[Token], start: int, stop: int, child_dir: Path) -> None:
        i = start
        path_attribute: str | None = None
        # A `#[cfg(test)]` module is test code: it may use any module of
        # its crate (the in-memory double, a sibling's helpers) without
        # being part of the graph the build depends on.
        test_only = False
        while i < stop:
            token = tokens[i]
            if token.kind == "#" and i + 1 < stop and tokens[i + 1].kind in ("[", "!"):
                end = matching(tokens, i + 1 if tokens[i + 1].kind == "[" else i + 2)
                path_attribute = attribute_path(tokens[i:end]) or path_attribute
                test_only = test_only or [t.text for t in tokens[i:end]] == ["#", "[", "cfg", "(", "test", ")", "]"]
                self._collect_paths(module, tokens, i, end)
                i = end
                continue
            if token.kind == "ident" and token.text == "mod" and i + 1 < stop and tokens[i + 1].kind == "ident":
                name = tokens[i + 1].text
                after = tokens[i + 2].kind if i + 2 < stop else ";"
                if test_only:
                    i = i + 3 if after == ";" else matching(tokens, i + 2) if after == "{" else i + 2
                    test_only = False
                    path_attribute = None
                    continue
                if after == ";":
                    self._file_module(module, name, child_dir, path_attribute, tokens[i].line)
                    i += 3
                    path_attribute = None
                    continue
                if after == "{":
                    end = matching(tokens, i + 2)
                    inline = Module(module.path + (name,), module.file, False, module)
                    module.children[name] = inline
                    self.modules.append(inline)
                    self._parse(inline, tokens, i + 3, end - 1, child_dir / name)
                    i = end
                    path_attribute = None
                    continue
            if token.kind == "ident" and token.text == "use" and not (i > start and tokens[i - 1].kind == "::"):
                end = i + 1
                while end < stop and tokens[end].kind != ";":
                    end += 1
                module.uses.extend(parse_use_tree(tokens[i + 1 : end], []))
                i = end + 1
                path_attribute = None
                continue
            if token.kind in (";", "}"):
                path_attribute = None
                test_only = False
            if token.kind == "ident" and token.text in ("fn", "use", "struct", "enum", "impl", "const", "static"):
                test_only = False
            i = self._path_at(module, tokens, i, stop)

    def _collect_paths(self, module: Module, tokens: list[Token], start: int, stop: int) -> None:
        i = start
        while i < stop:
            i = self._path_at(module, tokens, i, stop)

    def _path_at(self, module: Module, tokens: list[Token], i: int, stop: int) -> int:
        """Records the path starting at `i`, if one does; the next index."""
        token = tokens[i]
        starts = (
            token.kind == "ident"
            and i + 2 < stop
            and tokens[i + 1].kind == "::"
            and tokens[i + 2].kind == "ident"
            # Not the middle of a path, nor `$crate` in a macro.
            and not (i > 0 and tokens[i - 1].kind in ("::", "$"))
        )
        if not starts:
            return i + 1
        segments = [token.text]
        j = i + 1
        while j + 1 < stop and tokens[j].kind == "::" and tokens[j + 1].kind == "ident":
            segments.append(tokens[j + 1].text)
            j += 2
        module.paths.append((segments, token.line))
        return j

    def _file_module(self, parent: Module, name: str, child_dir: Path, path_attribute: str | None, line: int) -> None:
        if path_attribute is not None:
            candidates = [parent.file.parent / path_attribute]
        else:
            candidates = [child_dir / f"{name}.rs", child_dir / name / "mod.rs"]
        file = next((c for c in candidates if c.is_file()), None)
        if file is None:
            self.problems.append(f"{parent.file}:{line}: no file for `mod {name};` (looked for {candidates[0]})")
            return
        module = Module(parent.path + (name,), file, True, parent)
        parent.children[name] = module
        self.modules.append(module)
        grandchildren = file.parent if file.name == "mod.rs" or path_attribute else file.parent / file.stem
        self._load(module, file, grandchildren)

    # -- resolving ----------------------------------------------------------

    def resolve(self, module: Module, segments: list[str], seen: frozenset = frozenset()) -> Module | None:
        """The module of this crate a path used in `module` leads to (the
        module defining the item it names), or None for another crate."""
        if segments[0] == "crate":
            return self.walk(self.root, segments[1:], seen)
        if segments[0] in ("super", "self"):
            base: Module | None = module
            while segments and segments[0] in ("super", "self"):
                if segments[0] == "super":
                    base = base.parent
                    if base is None:
                        return None
                segments = segments[1:]
            return self.walk(base, segments, seen)
        first = self.lookup(module, segments[0], seen)
        return None if first is None else self.walk(first, segments[1:], seen)

    def walk(self, module: Module, rest: list[str], seen: frozenset) -> Module:
        """Follows `rest` down from `module` while it names modules (or names
        bound to them by `use`); the last module reached."""
        for name in rest:
            found = self.lookup(module, name, seen)
            if found is None:
                break
            module = found
        return module

    def lookup(self, module: Module, name: str, seen: frozenset) -> Module | None:
        """What `name` means in `module`: a child module, or a module of this
        crate a `use` of `module` binds it to (an item counts as the module
        defining it); None for anything else."""
        if name in module.children:
            return module.children[name]
        key = (id(module), name)
        if key in seen:
            return None
        seen = seen | {key}
        for use in module.uses:
            if use.name == name:
                return self.resolve(module, use.path, seen)
        for use in module.uses:
            if use.name is None and use.path:
                base = self.resolve(module, use.path, seen)
                if base is not None and base is not module:
                    found = self.lookup(base, name, seen)
                    if found is not None:
                        return found
        return None

    def references(self):
        """(from module, to module, file, line) for every reference inside the crate."""
        for module in self.modules:
            for use in module.uses:
                target = self.resolve(module, use.path)
                if target is not None:
                    yield module, target, module.file, use.line
            for segments, line in module.paths:
                target = self.resolve(module, segments)
                if target is not None:
                    yield module, target, module.file, line


def matching(tokens: list[Token], open_index: int) -> int:
    """Index just past the bracket closing the one at `open_index`."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    depth = 0
    for i in range(open_index, len(tokens)):
        kind = tokens[i].kind
        if kind in pairs:
            depth += 1
        elif kind in pairs.values():
            depth -= 1
            if depth == 0:
                return i + 1
    return len(tokens)


def attribute_path(tokens: list[Token]) -> str | None:
    """The file of a `#[path = "..."]` attribute."""
    kinds = [t.kind for t in tokens[:6]]
    if kinds == ["#", "[", "ident", "=", "str", "]"] and tokens[2].text == "path":
        return tokens[4].text
    return None


def parse_use_tree(tokens: list[Token], prefix: list[str]) -> list[Use]:
    """The leaves of a `use` tree (without `use` and `;`)."""
    uses: list[Use] = []
    for item in split_top_level(tokens):
        path = list(prefix)
        i = 0
        if item and item[0].kind == "::":
            i = 1
        while i < len(item):
            token = item[i]
            if token.kind == "ident" and token.text != "as":
                path.append(token.text)
                i += 1
                if i < len(item) and item[i].kind == "::":
                    i += 1
                    continue
                if i + 1 < len(item) and item[i].text == "as":
                    # `as _` binds no name (`_` is never looked up).
                    uses.append(Use(item[i + 1].text, path, token.line))
                elif path[-1] == "self" and len(path) > 1:
                    uses.append(Use(path[-2], path[:-1], token.line))
                else:
                    uses.append(Use(path[-1], path, token.line))
                break
            if token.kind == "*":
                uses.append(Use(None, path, token.line))
                break
            if token.kind == "{":
                end = matching(item, i)
                uses.extend(parse_use_tree(item[i + 1 : end - 1], path))
                break
            i += 1
    return uses


def split_top_level(tokens: list[Token]) -> list[list[Token]]:
    items: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.kind == "{":
            depth += 1
        elif token.kind == "}":
            depth -= 1
        if token.kind == "," and depth == 0:
            items.append([])
        else:
            items[-1].append(token)
    return [item for item in items if item]


# ---------------------------------------------------------------------------
# Graphs and cycles


@dataclass
class Level:
    """The graph inside one folder module: its own file and its children."""

    folder: Module
    edges: dict[str, dict[str, tuple[Path, int]]] = field(default_factory=dict)

    def own(self) -> str:
        if not self.folder.path:
            return f"crate ({self.folder.file.name})"
        return f"{self.folder.path[-1]} ({self.folder.file.name})"

    def node(self, module: Module) -> str | None:
        """The node `module` counts as at this level, None outside it."""
        path, base = module.file_module.path, self.folder.path
        if path[: len(base)] != base:
            return None
        if len(path) == len(base):
            return self.own()
        return path[len(base)]


def folders(crate: Crate) -> list[Module]:
    found = [crate.root]
    for module in crate.modules:
        if module is not crate.root and module.is_file and any(c.is_file for c in module.children.values()):
            found.append(module)
    return found


def build_levels(crate: Crate) -> list[Level]:
    levels = [Level(folder) for folder in folders(crate)]
    for source, target, file, line in crate.references():
        for level in levels:
            a, b = level.node(source), level.node(target)
            if a is None or b is None or a == b:
                continue
            # The first place, by file and line, stands for the edge.
            targets = level.edges.setdefault(a, {})
            if b not in targets or (str(file), line) < (str(targets[b][0]), targets[b][1]):
                targets[b] = (file, line)
    return levels


def strongly_connected(edges: dict[str, dict[str, tuple[Path, int]]]) -> list[list[str]]:
    """Tarjan's algorithm; only the components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    nodes = sorted(set(edges) | {b for targets in edges.values() for b in targets})

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, {})):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(1000, 10 * len(nodes)))
    for node in nodes:
        if node not in index:
            visit(node)
    return components


# Cycles listed per strongly connected component at the most: a tangle of
# n modules can hold far more than anyone reads.
CYCLES_LISTED = 50


def cycles_in(component: list[str], edges: dict[str, dict[str, tuple[Path, int]]], limit: int) -> list[list[str]]:
    """The elementary cycles of a strongly connected component (each once,
    starting at its smallest node), at most `limit`."""
    members = set(component)
    found: list[list[str]] = []
    for start in sorted(component):
        path = [start]

        def extend(node: str) -> None:
            for target in sorted(edges.get(node, {})):
                if len(found) >= limit or target not in members or target < start:
                    continue
                if target == start:
                    found.append(path + [start])
                elif target not in path:
                    path.append(target)
                    extend(target)
                    path.pop()

        extend(start)
    return found


def layers(edges: dict[str, dict[str, tuple[Path, int]]], nodes: set[str]) -> list[list[str]]:
    """Nodes from the top (nothing uses them) down to the bottom (they use
    nothing), for the report of a graph without cycles."""
    remaining = set(nodes)
    result: list[list[str]] = []
    while remaining:
        used = {b for a in remaining for b in edges.get(a, {}) if b in remaining}
        top = sorted(remaining - used)
        if not top:
            break
        result.append(top)
        remaining -= set(top)
    return result


# ---------------------------------------------------------------------------
# Main


def crate_roots(crate_dir: Path) -> list[Path]:
    roots = [crate_dir / "src" / "lib.rs", crate_dir / "src" / "main.rs"]
    for folder in ("src/bin", "tests", "benches", "examples"):
        directory = crate_dir / folder
        if directory.is_dir():
            roots.extend(sorted(directory.glob("*.rs")))
            roots.extend(sorted(directory.glob("*/main.rs")))
    return [root for root in roots if root.is_file()]


def relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def check(crate_dir: Path, out) -> int:
    roots = crate_roots(crate_dir)
    if not roots:
        print(f"{crate_dir}: no crate root (src/lib.rs, src/main.rs, ...)", file=out)
        return 1
    cycles = 0
    for root in roots:
        crate = Crate(root, crate_dir)
        for problem in crate.problems:
            print(f"{crate_dir}: warning: {problem}", file=out)
        name = relative(root, crate_dir)
        for level in build_levels(crate):
            where = f"{crate_dir}/{name}" + ("" if not level.folder.path else f" [{level.folder.name()}]")
            nodes = {level.own()} | set(level.edges) | {b for t in level.edges.values() for b in t}
            nodes |= {n for n, child in level.folder.children.items() if child.is_file}
            components = strongly_connected(level.edges)
            if not components:
                if len(nodes) > 1:
                    order = " > ".join(", ".join(layer) for layer in layers(level.edges, nodes))
                    print(f"{where}: no cycles; top to bottom: {order}", file=out)
                continue
            for component in components:
                listed = cycles_in(component, level.edges, CYCLES_LISTED)
                for cycle in listed:
                    cycles += 1
                    print(f"{where}: cycle: {' -> '.join(cycle)}", file=out)
                    for a, b in zip(cycle, cycle[1:]):
                        file, line = level.edges[a][b]
                        print(f"    {a} -> {b}: {relative(file, crate_dir)}:{line}", file=out)
                if len(listed) == CYCLES_LISTED:
                    print(
                        f"{where}: only the first {CYCLES_LISTED} cycles through {', '.join(component)} are listed",
                        file=out,
                    )
    return cycles


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if len(argv) < 2 else sys.stdout)
        return 2 if len(argv) < 2 else 0
    total = 0
    for argument in argv[1:]:
        crate_dir = Path(argument.rstrip("/"))
        if not crate_dir.is_dir():
            print(f"{argument}: not a directory", file=sys.stderr)
            return 2
        total += check(crate_dir, sys.stdout)
    if total:
        print(f"{total} cycle(s) found", file=sys.stdout)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
