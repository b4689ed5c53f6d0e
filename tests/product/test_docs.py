"""The README a newcomer reads in ten minutes, and the docs/ site that holds the rest: its length,
its links, and a strict MkDocs build (issue 31.5).  Each check is proven by breaking it."""

from __future__ import annotations

import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The docs site, built once with --strict."""
    site = tmp_path_factory.mktemp("docs") / "site"
    built = strict_build(ROOT, site)
    assert built.returncode == 0, built.stderr
    return site


def search_tokens(text: str, separator: str) -> set[str]:
    """The words the site's search indexes `text` under: split on its `separator` (lunr's
    tokenizer splits on that regular expression, then lower-cases)."""
    return {token.lower() for token in re.split(separator, text) if token}


def mkdocs_config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def search_separator() -> str:
    (search,) = [p["search"] for p in mkdocs_config()["plugins"] if isinstance(p, dict) and "search" in p]
    return search["separator"]


#: How commands are spelled: the installed script for the product's five, `python -m` for the
#: maintainers' tools (docs/commands.md); these spellings are the other forms, not used (a
#: job's entry point, `"$PWD/.venv/bin/sweeper"`, is a path Ray runs, not a command typed).
OTHER_SPELLINGS = re.compile(r"(?<!\$PWD/)\.venv/bin/(?:python|sweeper)\b|python -m sweeper(?:\.cli\.(?:frontier|report|bounds|sync)_command)?(?![.\w])")
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


def test_the_api_page_documents_what_a_user_imports(site):
    """Issue 43.4: an API reference generated from the docstrings (mkdocstrings), one entry
    per name a user imports, each with its docstring's words."""
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("sweeper.frontier.load_frontier", "sweeper.frontier.summarize_frontier",
                 "sweeper.bounds.thudi.precision_bound", "sweeper.bounds.planning.epsilon_for_precision",
                 "sweeper.bounds.planning.max_sampling_rate", "sweeper.bounds.planning.deletion_capacity",
                 "sweeper.store.columns.Column", "sweeper.store.columns.CELL_COLUMNS"):
        assert f'id="{name}"' in page, name
    assert "A sweep&#39;s results as a DataFrame" in page or "A sweep's results as a DataFrame" in page
    assert "Largest ε whose bound" in page  # epsilon_for_precision's docstring, rendered


def test_search_finds_load_frontier_on_the_pages_that_document_it(site):
    """The default theme's search split on spaces and hyphens only: `sweeper.frontier.load_frontier(`
    was one word, so `load_frontier` found nothing on the page that documents it."""
    import json

    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    separator = index["config"]["separator"]
    assert separator == search_separator()
    found = {doc["location"].split("#")[0] for doc in index["docs"]
             if "load_frontier" in search_tokens(doc["title"] + " " + doc["text"], separator)}
    assert {"frontier/", "api/"} <= found
    # Break it: MkDocs' own separator would not find it on the frontier page.
    frontier = " ".join(doc["text"] for doc in index["docs"] if doc["location"].startswith("frontier/"))
    assert "load_frontier" in frontier
    assert "load_frontier" not in search_tokens(frontier, r"[\s\-]+")


def test_the_nav_is_short_titles_in_sections():
    nav = mkdocs_config()["nav"]
    titles = []
    for entry in nav:
        ((title, target),) = entry.items()
        titles.append(title)
        if isinstance(target, list):
            titles += [next(iter(item)) for item in target]
    assert all(1 <= len(title.split()) <= 3 for title in titles), titles
    assert sum(isinstance(next(iter(entry.values())), list) for entry in nav) >= 3


#: The most words of prose a page may run without a heading (tables and code not counted): the
#: site's table of contents is its headings, and how-it-works.md ran 3 764 words with none.
SECTION_WORDS = 750


def longest_section(text: str) -> int:
    """The words of prose in the longest stretch of `text` between two headings."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith("|"))
    return max(len(part.split()) for part in re.split(r"^#+ .*$", prose, flags=re.M))


def test_every_page_is_in_sections():
    long = {page.name: longest_section(page.read_text(encoding="utf-8"))
            for page in pages() if page.parent.name == "docs"}
    assert {name: words for name, words in long.items() if words > SECTION_WORDS} == {}
    # Break it: how-it-works.md without its headings is the wall of prose it was.
    text = (ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    assert longest_section(re.sub(r"^##+ .*$", "", text, flags=re.M)) > 3 * SECTION_WORDS


def test_every_command_is_spelled_one_way():
    """docs/commands.md says how each command is spelled; no page spells one another way."""
    found = []
    for page in pages():
        if page.name == "commands.md":
            continue
        text = page.read_text(encoding="utf-8")
        found += [f"{page.name}: {m.group(0)}" for m in OTHER_SPELLINGS.finditer(text)]
    assert found == []
    # Break it: the README's old first line is caught.
    assert OTHER_SPELLINGS.findall(".venv/bin/python -m sweeper  # the quickstart\n"
                                   "python -m sweeper.cli.frontier_command --json") == [
        ".venv/bin/python", "python -m sweeper.cli.frontier_command"]


def test_the_api_references_examples_are_what_the_code_returns():
    """The examples the API page shows (`>>>` in the docstrings) run as written; each gives the
    formula it evaluates beside it, and tests/test_sweeper/bounds/test_bounds.py checks the functions by hand."""
    import doctest

    import sweeper.bounds.planning
    import sweeper.bounds.thudi

    for module in (sweeper.bounds.thudi, sweeper.bounds.planning):
        result = doctest.testmod(module)
        assert result.attempted >= 2 and result.failed == 0, module.__name__
