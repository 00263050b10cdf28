"""Tests of tools/check-pins.py: a tag, a branch, a short SHA or an image
without a digest fails the check, and so does a cache restored into a job
holding credentials; the committed workflow and compose file pass.
Run by `make workflow-lint`."""

import importlib.util
import io
import sys
import unittest
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("check_pins", Path(__file__).with_name("check-pins.py"))
check_pins = importlib.util.module_from_spec(SPEC)
sys.modules["check_pins"] = check_pins
SPEC.loader.exec_module(check_pins)

SHA = "de0fac2e4500dabe0009e67214ff5f5447ce83dd"
DIGEST = "sha256:" + "0123456789abcdef" * 4
ROOT = Path(__file__).resolve().parent.parent


def problems(text: str) -> list[str]:
    return [problem for _, problem in check_pins.unpinned(text)]


class Actions(unittest.TestCase):
    def test_a_full_sha_passes(self):
        self.assertEqual(problems(f"    steps:\n      - uses: actions/checkout@{SHA} # v6.0.2\n"), [])

    def test_tags_branches_and_short_shas_fail(self):
        for ref in ["actions/checkout@v6", "actions/checkout@main", f"actions/checkout@{SHA[:7]}",
                    "actions/checkout", f"actions/checkout@{SHA.upper()}"]:
            with self.subTest(ref=ref):
                self.assertEqual(len(problems(f"      - uses: {ref}\n")), 1)

    def test_local_actions_pass_and_docker_actions_need_a_digest(self):
        self.assertEqual(problems("      - uses: ./.github/actions/setup\n"), [])
        self.assertEqual(problems(f"      - uses: docker://alpine@{DIGEST}\n"), [])
        self.assertEqual(len(problems("      - uses: docker://alpine:3\n")), 1)

    def test_commented_lines_are_skipped(self):
        self.assertEqual(problems("      # - uses: actions/checkout@v6\n"), [])


class Images(unittest.TestCase):
    def test_a_digest_passes_with_or_without_a_tag(self):
        self.assertEqual(problems(f"    image: localstack/localstack:4.14.0@{DIGEST}\n"), [])
        self.assertEqual(problems(f"    image: localstack/localstack@{DIGEST}\n"), [])

    def test_a_floating_tag_fails(self):
        self.assertEqual(len(problems("    image: localstack/localstack:4\n")), 1)
        self.assertEqual(len(problems("    image: localstack/localstack:4@sha256:abc\n")), 1)


WORKFLOW = f"""name: w
on: push
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/cache@{SHA}
  deploy:
    runs-on: ubuntu-24.04
    permissions:
      id-token: write
    steps:
      - uses: actions/cache/restore@{SHA}
  token:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/cache@{SHA}
      - run: echo
        env:
          TOKEN: ${{{{ secrets.TOKEN }}}}
"""


class Caches(unittest.TestCase):
    def test_a_cache_in_a_job_with_credentials_fails_and_elsewhere_passes(self):
        found = problems(WORKFLOW)
        self.assertEqual(len(found), 2, found)
        self.assertTrue(any("job deploy" in p for p in found), found)
        self.assertTrue(any("job token" in p for p in found), found)
        self.assertFalse(any("job build" in p for p in found), found)


class Committed(unittest.TestCase):
    def test_the_kits_workflows_and_compose_file_pass(self):
        files = sorted((ROOT / "localstack/ci").glob("*.yml")) + [ROOT / "localstack/docker-compose.yml"]
        out = io.StringIO()
        self.assertEqual(check_pins.check(files, out), 0, out.getvalue())


if __name__ == "__main__":
    unittest.main()
