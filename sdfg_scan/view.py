"""``sdfg-scan view``: a standalone HTML page that shows an SDFG with DaCe's SDFG viewer (SDFV).

The page inlines the viewer's JavaScript from the installed dace (``dace/viewer/webclient/dist/
sdfv.js``) and the SDFG's JSON, so it opens from anywhere, also after being moved or sent. Every
``Scan`` body is a section of its own, drawn as a graph: the links at the top switch between the
program (``#program``) and the bodies (``#body-0``, ...); in the program the ``body`` property of a
scan names the section that draws it instead of holding ~400 KB of JSON text.

Labels and properties come from the nodes themselves (:mod:`sdfg_scan.nodes.labels`,
``ColumnNode.to_json``): name, kind, semantics, implementation and reproducibility class, with
``implementation``, ``reproducibility`` and ``selection_reason`` first in the sidebar.

After drawing a section the page lists the labels the viewer laid out in
``<pre id="sdfg-scan-drawn">`` (one per line): a headless browser can check what was drawn.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import dace

#: where dace ships its web client and page templates
VIEWER_DIR = Path(dace.__file__).resolve().parent / "viewer"

_PAGE = """{% extends "sdfv_base.html" %}
{% block title %}{{ title }} - sdfg-scan view{% endblock %}
{% block scripts_head %}
<!-- sdfv.js (webpack) takes its chunk path from a script's src and throws if no script has one -->
<script src="data:text/javascript,"></script>
<style>
#sdfg-scan-nav { font: 13px sans-serif; padding: 4px 8px; background: #eef; }
#sdfg-scan-nav a { margin-right: 12px; }
#sdfg-scan-nav a.current { font-weight: bold; text-decoration: none; color: black; }
#sdfg-scan-drawn { display: none; }
</style>{% endblock %}
{% block content %}
<div id="sdfg-scan-nav">{{ title }}: {% for s in sections %}<a href="#{{ s.anchor }}" id="link-{{ s.anchor }}"
 title="{{ s.tooltip }}">{{ s.title }}</a>{% endfor %}</div>
{{ super() }}
<pre id="sdfg-scan-drawn"></pre>
{% for s in sections %}<script type="application/json" id="sdfg-{{ s.anchor }}">{{ s.json }}</script>
{% endfor %}
{% for chunk in chunks_js %}<script>{{ chunk }}</script>
{% endfor %}<script>{{ sdfv_js }}</script>
<script>{{ loader_js }}</script>
{% endblock %}
"""

_LOADER = """
(function () {
  const first = "program";
  function labels(g, out) {
    if (!g || typeof g.nodes !== "function") return out;
    for (const id of g.nodes()) {
      const el = g.node(id);
      if (!el) continue;
      try { out.push(el.label()); } catch (e) { /* an element without a label */ }
      if (el.data && el.data.graph) labels(el.data.graph, out);
    }
    return out;
  }
  function report(sdfv, anchor) {
    const r = sdfv.get_renderer();
    if (!r || !r.graph) { setTimeout(() => report(sdfv, anchor), 50); return; }
    const pre = document.getElementById("sdfg-scan-drawn");
    pre.textContent = labels(r.graph, []).join("\\n");
    pre.dataset.section = anchor;
  }
  function show(sdfv) {
    let anchor = window.location.hash.slice(1) || first;
    let data = document.getElementById("sdfg-" + anchor);
    if (!data) { anchor = first; data = document.getElementById("sdfg-" + first); }
    document.querySelectorAll("#sdfg-scan-nav a").forEach(a => a.classList.remove("current"));
    document.getElementById("link-" + anchor).classList.add("current");
    document.getElementById("sdfg-scan-drawn").textContent = "";
    sdfv.setSDFG(checkCompatLoad(parse_sdfg(data.textContent)), null, false);
    report(sdfv, anchor);
  }
  function start() {
    const sdfv = WebSDFV.getInstance();
    const go = () => { show(sdfv); window.addEventListener("hashchange", () => show(sdfv)); };
    if (sdfv._initialized) go(); else sdfv.on("initialized", go);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
"""


@dataclass
class Section:
    """One graph of the page: the program or a scan body."""

    anchor: str
    title: str
    tooltip: str
    sdfg: dict


def _is_body(node: dict) -> bool:
    body = node.get("attributes", {}).get("body")
    return node.get("type") == "LibraryNode" and isinstance(body, dict) and body.get("type") == "SDFG"


def _extract_bodies(obj, sections: list[Section]) -> None:
    """Move every ``Scan`` body out of ``obj`` (SDFG JSON, walked in place) into a section of its own;
    the ``body`` attribute then names that section."""
    if isinstance(obj, list):
        for item in obj:
            _extract_bodies(item, sections)
        return
    if not isinstance(obj, dict):
        return
    if _is_body(obj):
        attrs = obj["attributes"]
        anchor = f"body-{len(sections) - 1}"
        name = attrs.get("name") or "scan"
        section = Section(anchor, f"{name} body", str(obj.get("label", name)), attrs["body"])
        sections.append(section)
        attrs["body"] = f"drawn as a graph in section '{section.title}' (link #{anchor} at the top)"
        _extract_bodies(section.sdfg, sections)
    for value in obj.values():
        _extract_bodies(value, sections)


def sections(sdfg: dace.SDFG) -> list[Section]:
    """The program and every scan body (also bodies nested in bodies), as JSON for the viewer."""
    program = sdfg.to_json()
    out = [Section("program", sdfg.name, "the whole program", program)]
    _extract_bodies(program, out)
    return out


def _json_in_script(obj) -> str:
    """JSON that can sit inside a ``<script>`` element: ``<`` (only in strings) becomes ``\\u003c``."""
    return json.dumps(obj).replace("<", "\\u003c")


def _js_in_script(text: str, origin: Path) -> str:
    """Check that ``text`` (a JavaScript file) cannot end its ``<script>`` element early.

    (sdfv.js holds ``<!--`` and ``<script`` in regular expressions, but never an HTML comment opener
    followed by ``<script`` and ``</script``, the only sequence that would confuse the HTML parser.)
    """
    if "</script" in text.lower():
        raise ValueError(f"sdfg_scan.view: {origin} contains '</script' and cannot be inlined")
    return text


def page(sdfg: dace.SDFG, title: str | None = None) -> str:
    """The standalone HTML page (viewer JavaScript and SDFG inlined)."""
    try:
        import jinja2
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise ImportError("sdfg_scan.view: the page needs jinja2 (pip install jinja2)") from e
    sdfv_js = VIEWER_DIR / "webclient" / "dist" / "sdfv.js"
    if not sdfv_js.is_file():
        raise FileNotFoundError(f"sdfg_scan.view: DaCe's viewer script is missing; expected {sdfv_js} "
                                f"(dace {dace.__version__} installed without its web client?)")
    env = jinja2.Environment(loader=jinja2.ChoiceLoader([
        jinja2.DictLoader({"sdfg_scan_view.html": _PAGE}),
        jinja2.FileSystemLoader(str(VIEWER_DIR / "templates"))]), autoescape=False)
    # the lazily loaded chunks (editor languages) register themselves before sdfv.js starts: no fetches
    chunks = sorted((p for p in sdfv_js.parent.glob("*.js") if p.stem.isdigit()), key=lambda p: int(p.stem))
    secs = sections(sdfg)
    rows = [{"anchor": s.anchor, "title": html.escape(s.title), "tooltip": html.escape(s.tooltip),
             "json": _json_in_script(s.sdfg)} for s in secs]
    return env.get_template("sdfg_scan_view.html").render(
        title=html.escape(title or sdfg.name), sections=rows, sdfv_js=_js_in_script(sdfv_js.read_text(), sdfv_js),
        chunks_js=[_js_in_script(c.read_text(), c) for c in chunks],
        loader_js=_LOADER)


def write_page(sdfg: dace.SDFG, path: str | Path, title: str | None = None) -> Path:
    """Write :func:`page` to ``path`` (missing folders are created, as ``SDFG.save`` does); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(sdfg, title), encoding="utf-8")
    return path


__all__ = ["Section", "VIEWER_DIR", "page", "sections", "write_page"]
