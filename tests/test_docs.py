"""The README a newcomer reads in ten minutes, and the docs/ site that holds the rest: its length,
its links, and a strict MkDocs build (issue 31.5).  Each check is proven by breaking it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
#: A Markdown link or image whose target is not a URL: [text](target) / ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\((?!https?://|mailto:)([^)\s]+)\)")


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def broken_links(root: Path = ROOT) -> list[str]:
    """Every relative link of the README and docs/ pages whose file is not there, or whose
    `#anchor` names no heading of its page (MkDocs' rule: lower case, spaces to hyphens,
    punctuation dropped), as 'page: target'."""
    broken = []
    for page in pages(root):
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(root)}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return broken


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in headings}


def strict_build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=120)


def test_the_readme_is_read_in_ten_minutes():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_every_link_of_the_readme_and_the_docs_resolves():
    assert broken_links() == []


def test_a_broken_link_is_named(tmp_path):
    root = tmp_path / "copy"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("[here](docs/a.md) and [gone](docs/missing.md)\n")
    (root / "docs" / "a.md").write_text("# A page\n\n[back](../README.md) [to b](a.md#no-such)\n"
                                        "[fine](a.md#a-page)\n")
    assert broken_links(root) == ["README.md: docs/missing.md",
                                  "docs/a.md: a.md#no-such (no such heading)"]


def test_the_docs_build_without_a_warning(tmp_path):
    built = strict_build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    for page in (ROOT / "docs").glob("*.md"):  # every page is built, none left out
        built_page = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (tmp_path / "site" / built_page).exists(), page.name


def test_a_page_left_out_or_a_dead_link_fails_the_strict_build(tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("*.png", "figures"))
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    (root / "docs" / "orphan.md").write_text("# Not in the nav\n\n[dead](nowhere.md)\n")
    built = strict_build(root, tmp_path / "site")
    assert built.returncode != 0
    assert "orphan.md" in built.stderr and "nowhere.md" in built.stderr
