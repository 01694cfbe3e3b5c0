"""The documentation's links hold.

Every relative link and image in README.md, DESIGN.md, docs/*.md and lab/docs/*.md names a file or folder that
exists, and every #anchor a heading of its page, by GitHub's slug rules (lower case, punctuation
other than - and _ dropped, each space a hyphen, -1, -2, ... for repeats). Links inside code
(fenced blocks, `spans`) are not links on GitHub either, so they are not read.
"""
import glob
import os
import re

import pytest

from conftest import ROOT

PAGES = ["README.md", "DESIGN.md"] + sorted(
    os.path.relpath(p, ROOT) for folder in ("docs", "lab/docs") for p in glob.glob(os.path.join(ROOT, folder, "*.md")))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"#{1,6} +(.+?)[ #]*$")


def prose_lines(text: str) -> list:
    """The page's lines outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (github-slugger): a link keeps its text, code its content."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> set:
    """Every heading anchor of a Markdown file, repeats numbered as GitHub numbers them."""
    with open(path) as f:
        text = f.read()
    seen, out, fenced = {}, set(), False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: str, root: str = ROOT) -> list:
    """(target, why) for every relative link of `page` (relative to root) that does not resolve."""
    path = os.path.join(root, page)
    with open(path) as f:
        lines = prose_lines(f.read())
    broken = []
    for target in (m.group(1) for line in lines for m in LINK.finditer(line)):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...: not this repository's
            continue
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            broken.append((target, "no such file"))
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            broken.append((target, f"no heading with anchor #{anchor} in {os.path.relpath(dest, root)}"))
    return broken


def test_slugs_follow_github():
    assert slug("Fig. 1: training dynamics at N = 8 (`make demo`)") == \
        "fig-1-training-dynamics-at-n--8-make-demo"
    assert slug("Figs. 8 and 9: GGPO's beta and reference refresh") == \
        "figs-8-and-9-ggpos-beta-and-reference-refresh"
    assert slug("Watching a run, and sending a ladder to a cluster") == \
        "watching-a-run-and-sending-a-ladder-to-a-cluster"
    assert slug("The corrections: published off_policy methods") == \
        "the-corrections-published-off_policy-methods"


def test_a_broken_link_is_found(tmp_path):
    """The check itself: a missing file, a missing anchor, a link in code that is not read."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "a.md").write_text("# Title\n\n## A section: (x = 1)\n\n[ok](#a-section-x--1) "
                                   "[no](#a-section) [gone](docs/none.md) ![img](b.png)\n"
                                   "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n")
    assert broken_links("a.md", str(tmp_path)) == [
        ("#a-section", "no heading with anchor #a-section in a.md"),
        ("docs/none.md", "no such file"), ("b.png", "no such file")]


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_every_docs_page_is_linked_from_the_readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        linked = {m.group(1).partition("#")[0] for line in prose_lines(f.read())
                  for m in LINK.finditer(line)}
    assert [p for p in PAGES if p.startswith(("docs/", "lab/docs/")) and p not in linked] == []
