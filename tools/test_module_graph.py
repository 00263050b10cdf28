"""Tests of tools/module-graph.py: a cycle fails the check, test code and a
parent's re-exports of its children do not. Run by `make lint`."""

import importlib.util
import io
import sys
import tempfile
import unittest
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("module_graph", Path(__file__).with_name("module-graph.py"))
module_graph = importlib.util.module_from_spec(SPEC)
sys.modules["module_graph"] = module_graph
SPEC.loader.exec_module(module_graph)


def crate(files: dict[str, str]) -> Path:
    root = Path(tempfile.mkdtemp())
    (root / "Cargo.toml").write_text('[package]\nname = "t"\n')
    for name, text in files.items():
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def check(files: dict[str, str]) -> tuple[int, str]:
    out = io.StringIO()
    return module_graph.check(crate(files), out), out.getvalue()


class ModuleGraph(unittest.TestCase):
    def test_two_modules_that_use_each_other_are_a_cycle(self):
        cycles, out = check({
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::a::A;\npub struct B;\n",
        })
        self.assertEqual(cycles, 1, out)
        self.assertIn("a -> b", out)

    def test_a_module_that_uses_the_crate_root_it_is_declared_in_is_a_cycle(self):
        cycles, out = check({
            "lib.rs": "pub mod a;\npub use a::A;\npub type T = u8;\n",
            "a.rs": "pub struct A(crate::T);\n",
        })
        self.assertEqual(cycles, 1, out)

    def test_one_way_uses_and_test_modules_are_not_cycles(self):
        cycles, out = check({
            "lib.rs": "pub mod a;\npub mod b;\npub use a::A;\n",
            "a.rs": "use crate::b::B;\npub struct A(B);\n",
            "b.rs": "pub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
        })
        self.assertEqual(cycles, 0, out)
        self.assertIn("no cycles", out)


if __name__ == "__main__":
    unittest.main()
