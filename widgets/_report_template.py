"""The Jinja2 template of the HTML report (kept in a module so it ships with the package).

Rendered with autoescape on: every user string (model names, notes, the command) is escaped. Only the
bokeh resources, script and divs are marked safe; they come from ``bokeh.embed``.
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
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
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
pre { background: #f4f4f4; padding: 0.6rem; overflow-x: auto; white-space: pre-wrap; }
.note { color: #555; font-size: 0.9rem; } .figure { margin: 0.8rem 0 1.4rem; }
</style>
{{ bokeh_css | safe }}
{{ bokeh_js | safe }}
</head>
<body>
<h1>{{ title }}</h1>
{% if stack %}<p class="stack">Plans for the stack <strong>{{ stack }}</strong>: only what it runs is offered.</p>
{% endif %}
<p class="note">Written by the parallelism planning workbench{% if version %} {{ version }}{% endif %}.
Times in ms, memory in GiB (2<sup>30</sup> bytes), throughput in tokens/s over the whole cluster.
Open offline: everything is inside this file.</p>

<section class="answer" id="summary">
<h2>Answer: {{ summary.plan }}</h2>
<p class="note">The best plan (priced by {{ summary.backend }}) and what it gives.</p>
<table>
{% for key, value in summary.rows %}<tr><th>{{ key }}</th><td class="num">{{ value }}</td></tr>
{% endfor %}</table>
{% if summary.why %}
<h3>Why it wins: against the best plan of each other layout</h3>
<ul class="why">{% for line in summary.why %}<li>{{ line }}</li>{% endfor %}</ul>
{% endif %}
{% if summary.tie_band %}<p class="note">{{ summary.tie_band }}</p>{% endif %}
</section>

<h2>Inputs</h2>
<div class="inputs">
{% for block in inputs %}
<table><caption><strong>{{ block.caption }}</strong></caption>
{% for key, value in block.rows %}<tr><th>{{ key }}</th><td>{{ value }}</td></tr>
{% endfor %}</table>
{% endfor %}
</div>

<h2>Ranked plans</h2>
{{ folded(plans, "plans") }}
{% if search_totals %}
<h2 id="search">Search</h2>
<p class="note">Every plan of the space is screened in closed form; a plan is rejected under the first rule it
breaks; the best feasible plans are refined with the full backend.</p>
{{ table(search_totals.table) }}
{% if search_totals.rejections.rows %}
<h3>Rejected plans by reason</h3>
{{ table(search_totals.rejections) }}
{% endif %}
{% endif %}
{% if search_table %}
{% if search_totals %}
<h3>Plans kept by the search: the first {{ search_table.rows | length }} of {{ search_total }}
(ranked plans, then the rest of the Pareto frontier, then the closest memory misses)</h3>
{% else %}
<h3>Search results: the first {{ search_table.rows | length }} of {{ search_total }} listed plans</h3>
{% endif %}
{{ folded(search_table, "search") }}
{% endif %}

{% if validation %}
<h2>Backend accuracy</h2>
<table><tr><th>backend</th><th>validation error (mean absolute percentage error)</th></tr>
{% for name, text in validation %}<tr><td>{{ name }}</td><td>{{ text }}</td></tr>{% endfor %}
</table>
{% endif %}

{% if comparison %}
<h2 id="predicted-vs-measured">Predicted vs measured</h2>
<p class="note">The same plan priced by a backend (predicted) and run for real (measured). Error = predicted / measured - 1.
In the timeline each lane has two rows: predicted (light, outlined) above measured (solid); the dashed line is the
predicted makespan, the solid one the measured makespan.</p>
{{ table(comparison) }}
<div class="figure">{{ divs["comparison"] | safe }}</div>
{% endif %}

{% if goodput %}
<h2 id="goodput">Goodput: failures, checkpoints and restarts</h2>
<p class="note">The best plan's run when devices fail: the job's mean time between interruptions from the failure
rates, checkpoints written at the interval that maximises the useful share of the wall time (Daly 2006), each
failure costing a restart, a restore and the work since the last checkpoint.</p>
{{ table(goodput) }}
{% endif %}

{% for section in sections %}
<h2>{{ section.heading }}</h2>
{% for fig in section.figures %}<div class="figure">{{ divs[fig] | safe }}</div>
{% endfor %}
{% endfor %}

{% if notes %}
<h2>Notes</h2>
<ul>{% for note in notes %}<li>{{ note }}</li>{% endfor %}</ul>
{% endif %}

<h2>Reproduce</h2>
{% if app_url %}<p>Open this view in the app (while it runs): <a href="{{ app_url }}">{{ app_url }}</a></p>
{% endif %}
<p>Run this command to write this report again:</p>
<pre>{{ command }}</pre>
{{ bokeh_script | safe }}
</body>
</html>
"""
