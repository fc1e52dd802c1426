"""report.html in a real browser: Debian's Chromium, headless, with a private profile.

`render(page)` opens a copy of the page whose last element is a probe script: on the
load event it measures what the browser made of every picture (decoded size, laid-out
size), every table (rows, empty cells) and every inline SVG, and writes that as JSON
into the DOM, which `--dump-dom` prints. `--screenshot` paints the page as a person
would see it. Everything the browser writes (profile, cache, crash dumps, HOME) stays
in a temporary directory. Without chromium the test skips, which CI turns into a
failure (conftest.py): `scripts/setup-system.sh` installs it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROBE_ID = "rocelab-browser-probe"
PROBE = """<script>
window.addEventListener('load', () => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  const out = {
    title: document.title,
    imgs: [...document.images].map(i => ({alt: i.alt, natural: [i.naturalWidth, i.naturalHeight],
                                          shown: box(i), complete: i.complete,
                                          figure: (i.closest('figure') || {}).id || ''})),
    tables: [...document.querySelectorAll('table')].map(t => ({
      id: t.id, cls: t.className, rows: t.rows.length, shown: box(t),
      heads: [...t.querySelectorAll('th')].map(c => c.textContent.trim()),
      empty: [...t.querySelectorAll('td')].filter(c => !c.textContent.trim()).length,
      cells: t.querySelectorAll('td').length})),
    svgs: [...document.querySelectorAll('svg')].map(s => ({id: s.id, shown: box(s),
                                                          children: s.querySelectorAll('*').length})),
    headings: [...document.querySelectorAll('h1, h2')].map(h => h.textContent.trim()),
    missing: [...document.querySelectorAll('p.bad')].map(e => e.textContent.trim()),
  };
  const pre = document.createElement('pre');
  pre.id = 'PROBE_ID';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>""".replace("PROBE_ID", PROBE_ID)


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    pytest.skip("chromium is not installed (scripts/setup-system.sh installs it)")


@dataclass
class Page:
    """What the browser laid out: the probe's JSON, and the screenshot's path."""

    probe: dict[str, Any]
    screenshot: Path

    @property
    def imgs(self) -> list[dict[str, Any]]:
        return self.probe["imgs"]

    @property
    def tables(self) -> list[dict[str, Any]]:
        return self.probe["tables"]


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
           "TMPDIR": str(home)}
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--disable-extensions", "--disable-background-networking",
             "--disable-crash-reporter", f"--user-data-dir={home / 'profile'}",
             f"--crash-dumps-dir={home / 'crashes'}", "--virtual-time-budget=10000",
             "--window-size=1280,2000"]
    res = subprocess.run([chromium(), *flags, *args], capture_output=True, text=True,
                         timeout=180, env=env, cwd=home, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"chromium exited {res.returncode}: {res.stderr[-2000:]}"
    return res


def render(page: Path) -> Page:
    """Open `page` in headless Chromium; what it laid out, and a screenshot (written beside
    the page as NAME.browser.png)."""
    with tempfile.TemporaryDirectory(prefix="rocelab-browser-") as tmp:
        home = Path(tmp)
        probed = home / "page.html"
        text = page.read_text()
        assert "</body>" in text, f"{page}: no </body>"
        probed.write_text(text.replace("</body>", PROBE + "</body>", 1))
        dom = _run(["--dump-dom", probed.as_uri()], home).stdout
        m = re.search(rf"<pre id=\"{PROBE_ID}\">(.*?)</pre>", dom, re.S)
        assert m, f"the probe did not run (no #{PROBE_ID} in the DOM): {dom[-1000:]}"
        shot = page.with_name(page.stem + ".browser.png")  # beside the page: the test's dir
        _run([f"--screenshot={shot}", page.resolve().as_uri()], home)
    return Page(json.loads(html.unescape(m.group(1))), shot)


def check_report(page: Path, min_imgs: int, min_tables: int) -> Page:
    """Every picture decoded and laid out at a readable size, every table with a header and
    rows of content, nothing marked missing, and a screenshot with ink on it."""
    import matplotlib.image as mpimg
    import numpy as np

    seen = render(page)
    imgs, tables = seen.imgs, seen.tables
    source = page.read_text()
    assert len(imgs) == source.count("<img ") >= min_imgs, (len(imgs), min_imgs)
    for img in imgs:
        assert img["complete"] and min(img["natural"]) >= 100, img  # decoded
        assert img["shown"][0] >= 300 and img["shown"][1] >= 100, img  # laid out, readable
    assert len(tables) == source.count("<table") >= min_tables, (len(tables), min_tables)
    for t in tables:
        assert any(t["heads"]) and t["rows"] >= 2, t
        assert t["cells"] > 0 and t["empty"] < t["cells"] and min(t["shown"]) > 0, t
    for s in seen.probe["svgs"]:
        assert min(s["shown"]) > 0 and s["children"] > 0, s
    assert not seen.probe["missing"], seen.probe["missing"]
    shot = mpimg.imread(seen.screenshot)[..., :3]
    assert np.mean(np.any(shot < 0.9, axis=-1)) > 0.02, "the screenshot is blank"
    return seen
