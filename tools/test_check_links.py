"""Tests of tools/check-links.py: a missing file or anchor fails the check,
GitHub's anchor rules resolve, code and external links are not followed.
Run by `make lint`."""

import importlib.util
import io
import sys
import tempfile
import unittest
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("check_links", Path(__file__).with_name("check-links.py"))
check_links = importlib.util.module_from_spec(SPEC)
sys.modules["check_links"] = check_links
SPEC.loader.exec_module(check_links)


def check(files: dict[str, str]) -> tuple[int, str]:
    """Writes `files` into a fresh repository and checks the Markdown ones."""
    root = Path(tempfile.mkdtemp())
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out = io.StringIO()
    markdown = [root / name for name in files if name.endswith(".md")]
    return check_links.check(markdown, root, out), out.getvalue()


class Slugs(unittest.TestCase):
    def test_github_lowercases_drops_punctuation_and_turns_spaces_into_hyphens(self):
        self.assertEqual(check_links.slug("The API, locally"), "the-api-locally")
        self.assertEqual(check_links.slug("Does this stack count correctly? `counterctl verify`"),
                         "does-this-stack-count-correctly-counterctl-verify")
        self.assertEqual(check_links.slug("Failed batches (`FailedBatchRecords`)"), "failed-batches-failedbatchrecords")
        self.assertEqual(check_links.slug("snake_case and kebab-case"), "snake_case-and-kebab-case")
        self.assertEqual(check_links.slug("A [linked](x.md) heading"), "a-linked-heading")

    def test_repeated_headings_get_numbered_suffixes(self):
        found = check_links.anchors("# Notes\n## Notes\n### Notes\n")
        self.assertEqual(found, {"notes", "notes-1", "notes-2"})

    def test_headings_inside_code_blocks_are_not_anchors(self):
        self.assertEqual(check_links.anchors("```sh\n# not a heading\n```\n# Real\n"), {"real"})


class Links(unittest.TestCase):
    def test_links_to_existing_files_and_anchors_pass(self):
        broken, out = check({
            "README.md": "See [ops](docs/ops.md#the-runbook), [top](#kit), [dir](docs/) and [img](docs/a.png).\n"
                         "# Kit\n[ref]: docs/ops.md#notes-1\n",
            "docs/ops.md": "# The runbook\n## Notes\n## Notes\n<a id=\"custom\"></a>\n[back](../README.md#kit)\n"
                           "[html](ops.md#custom)\n",
            "docs/a.png": "",
        })
        self.assertEqual(broken, 0, out)
        self.assertIn("every relative link and anchor resolves", out)

    def test_a_missing_file_fails_with_its_line(self):
        broken, out = check({"README.md": "# Kit\n\nRead [the book](docs/gone.md).\n"})
        self.assertEqual(broken, 1, out)
        self.assertIn("README.md:3: docs/gone.md: no such file or directory", out)

    def test_a_missing_anchor_fails(self):
        broken, out = check({
            "README.md": "[ops](docs/ops.md#alarms) [self](#nowhere)\n",
            "docs/ops.md": "# Runbook\n",
        })
        self.assertEqual(broken, 2, out)
        self.assertIn("no heading or anchor #alarms in docs/ops.md", out)
        self.assertIn("no heading or anchor #nowhere in README.md", out)

    def test_a_link_whose_text_runs_over_two_lines_is_checked_at_its_line(self):
        broken, out = check({"README.md": "# Kit\nsee [Admission\nmodes](#admission-modes) here\n"})
        self.assertEqual(broken, 1, out)
        self.assertIn("README.md:2: #admission-modes: no heading or anchor #admission-modes", out)

    def test_a_link_out_of_the_repository_fails(self):
        broken, out = check({"README.md": "[design](../shared/DESIGN.md)\n"})
        self.assertEqual(broken, 1, out)
        self.assertIn("points outside the repository", out)

    def test_external_links_and_code_are_not_followed(self):
        broken, out = check({
            "README.md": "[aws](https://docs.aws.amazon.com/x.html#y) [mail](mailto:a@b.c)\n"
                         "`[not](a-link.md)`\n```md\n[also not](gone.md)\n```\n",
        })
        self.assertEqual(broken, 0, out)


if __name__ == "__main__":
    unittest.main()
