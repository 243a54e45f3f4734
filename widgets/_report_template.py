"""The one Jinja2 template of every HTML report (training, serving, mixed, compare; kept in a module so it ships
with the package).

A page is a title, an introduction and a list of sections (``workbench_widgets.report.Section``): each section is
a heading and its blocks, in order. A block is a dict with a ``kind``:

- ``p`` (``text``, ``strong``: bold, ``css``: its class), ``note`` (``text``: a grey paragraph), ``h3`` (``text``), ``pre``
  (``text``), ``link`` (``before``, ``url``: a paragraph ending in a link), ``list`` (``items``, ``css``);
- ``table`` (``table``: ``{header, rows, numeric, classes}``; ``folded``: the id of a fold toggle for its
  ``variant`` rows), ``tables`` (``tables``: several tables side by side), ``pairs`` (``rows`` of (key, value),
  ``numeric``: right-aligned values), ``captioned`` (``blocks`` of ``{caption, rows}``, side by side);
- ``figures`` (``names`` of the page's figures; ``pair``: side by side).

Rendered with autoescape on: every user string (model names, notes, the command) is escaped. Only the bokeh
resources, script and divs are marked safe; they come from ``bokeh.embed``.
"""

REPORT_TEMPLATE = """{% macro table(t) %}
<div class="scroll"><table>
<tr>{% for h in t.header %}<th{% if t.numeric[loop.index0] %} class="num"{% endif %}>{{ h }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr class="{{ t.classes[loop.index0] }}">{% for cell in row %}<td{% if t.numeric[loop.index0] %} class="num"{% endif %}>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}
</table></div>
{% endmacro %}
{% macro folded(t, id) %}
{% set num = t.get("num_variants", 0) %}
{% if num %}
<div class="folds"><input type="checkbox" class="fold-toggle" id="variants-{{ id }}">
<label for="variants-{{ id }}">show the {{ num }} variant(s) folded under their layout (└: same degrees and
schedule as the plan above, other vpp, micro-batch, ZeRO, recompute or rank order)</label>
{{ table(t) }}
</div>
{% else %}
{{ table(t) }}
{% endif %}
{% endmacro %}
{% macro block(b) %}
{% if b.kind == "p" %}<p{% if b.get("css") %} class="{{ b.css }}"{% endif %}>{% if b.get("strong") %}<strong>{{ b.text }}</strong>{% else %}{{ b.text }}{% endif %}</p>
{% elif b.kind == "note" %}<p class="note">{{ b.text }}</p>
{% elif b.kind == "h3" %}<h3>{{ b.text }}</h3>
{% elif b.kind == "pre" %}<pre>{{ b.text }}</pre>
{% elif b.kind == "link" %}<p>{{ b.before }}<a href="{{ b.url }}">{{ b.url }}</a></p>
{% elif b.kind == "list" %}<ul{% if b.get("css") %} class="{{ b.css }}"{% endif %}>{% for item in b["items"] %}<li>{{ item }}</li>{% endfor %}</ul>
{% elif b.kind == "table" %}{% if b.get("folded") %}{{ folded(b.table, b.folded) }}{% else %}{{ table(b.table) }}{% endif %}
{% elif b.kind == "tables" %}
<div class="inputs">
{% for t in b.tables %}{{ table(t) }}{% endfor %}
</div>
{% elif b.kind == "pairs" %}
<table>
{% for key, value in b.rows %}<tr><th>{{ key }}</th><td{% if b.get("numeric") %} class="num"{% endif %}>{{ value }}</td></tr>
{% endfor %}</table>
{% elif b.kind == "captioned" %}
<div class="inputs">
{% for c in b.blocks %}
<table><caption><strong>{{ c.caption }}</strong></caption>
{% for key, value in c.rows %}<tr><th>{{ key }}</th><td>{{ value }}</td></tr>
{% endfor %}</table>
{% endfor %}
</div>
{% elif b.kind == "figures" %}
{% if b.get("pair") %}<div class="pair">{% endif %}
{% for fig in b.names %}<div class="figure">{{ divs[fig] | safe }}</div>
{% endfor %}
{% if b.get("pair") %}</div>{% endif %}
{% endif %}
{% endmacro %}
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ page_title }}</title>
<link rel="icon" href="data:,">
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.2rem auto; max-width: 1260px;
       color: #1a1a1a; padding: 0 0.8rem; }
h1 { font-size: 1.45rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05rem; }
table { border-collapse: collapse; font-size: 0.86rem; margin: 0.4rem 0 1rem; }
th, td { border: 1px solid #d0d0d0; padding: 0.2rem 0.5rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th.num { white-space: nowrap; }
tr.chosen { background: #fff3d6; } tr.nofit td { color: #a33; }
.folds > .fold-toggle:not(:checked) ~ .scroll tr.variant { display: none; }
.scroll { overflow-x: auto; max-width: 100%; } /* a wide table scrolls inside the page, never widens it */
.folds > label { font-size: 0.86rem; color: #444; cursor: pointer; }
.answer { background: #f3f8fc; border: 1px solid #bcd6ea; border-radius: 6px; padding: 0.4rem 1rem 0.8rem; }
.answer h2 { border: none; margin-top: 0.6rem; } .answer table { background: #fff; }
.why li { margin: 0.25rem 0; }
.inputs { display: flex; flex-wrap: wrap; gap: 1.2rem; }
.pair { display: flex; flex-wrap: wrap; gap: 1rem; }
pre { background: #f4f4f4; padding: 0.6rem; overflow-x: auto; white-space: pre-wrap; }
.note { color: #555; font-size: 0.9rem; } .figure { margin: 0.8rem 0 1.4rem; }
</style>
{{ bokeh_css | safe }}
{{ bokeh_js | safe }}
</head>
<body>
<h1>{{ title }}</h1>
{% for b in intro %}{{ block(b) }}{% endfor %}
{% for section in sections %}

{% if section.css %}<section class="{{ section.css }}"{% if section.id %} id="{{ section.id }}"{% endif %}>
{% endif %}
{% if section.heading %}<h2{% if section.id and not section.css %} id="{{ section.id }}"{% endif %}>{{ section.heading }}</h2>
{% endif %}
{% for b in section.blocks %}{{ block(b) }}{% endfor %}
{% if section.css %}</section>
{% endif %}
{% endfor %}
{{ bokeh_script | safe }}
</body>
</html>
"""
