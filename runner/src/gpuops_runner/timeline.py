"""The timeline picture of a run: one row per node, one bar per step (coloured by its lane: drain, install,
reboot, verify, soak or other), failures red with a cross, gates as diamonds, batches as bands. Plain SVG."""

from __future__ import annotations

import html

LANE_COLOURS = {"drain": "#4e79a7", "install": "#f28e2b", "reboot": "#76b7b2", "verify": "#59a14f",
                "soak": "#edc948", "other": "#9aa5b1"}
FAILED_COLOUR = "#d62728"
ROW_PX, LABEL_PX, PLOT_PX, TOP_PX, BAR_PX = 24, 170, 760, 40, 14


def lane(step):
    return step.get("step") if step.get("step") in LANE_COLOURS else "other"


def _ticks(span_s):
    for candidate in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200):
        if span_s / candidate <= 10:
            return candidate
    return span_s / 10


def svg(steps, inline=False):
    """The picture for the step records (as report.steps returns them)."""
    batch_of = {}
    for step in steps:
        batch_of.setdefault(step["host"], step.get("batch") or 0)
    hosts = sorted(batch_of, key=lambda host: (batch_of[host], host))
    span_s = max([step["end_s"] for step in steps] + [1.0])
    scale = PLOT_PX / span_s
    height = TOP_PX + ROW_PX * max(len(hosts), 1) + 60
    width = LABEL_PX + PLOT_PX + 30
    row_of = {host: index for index, host in enumerate(hosts)}
    parts = []
    xmlns = "" if inline else ' xmlns="http://www.w3.org/2000/svg"'
    parts.append('<svg%s id="timeline" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" '
                 'font-size="11">' % (xmlns, width, height, width, height))
    parts.append('<rect width="%d" height="%d" fill="#ffffff"/>' % (width, height))
    # batches: alternating bands behind their rows, labelled
    batches = []
    for host in hosts:
        if not batches or batches[-1][0] != batch_of[host]:
            batches.append([batch_of[host], row_of[host], row_of[host]])
        batches[-1][2] = row_of[host]
    for index, (batch, first, last) in enumerate(batches):
        y = TOP_PX + first * ROW_PX
        parts.append('<rect class="batch" x="0" y="%d" width="%d" height="%d" fill="%s"/>'
                     % (y, width, (last - first + 1) * ROW_PX, "#eef2f7" if index % 2 == 0 else "#f8f9fb"))
        parts.append('<text x="4" y="%d" fill="#555">batch %s</text>' % (y + 11, html.escape(str(batch))))
    tick = _ticks(span_s)
    value = 0.0
    while value <= span_s + 1e-9:
        x = LABEL_PX + value * scale
        parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, TOP_PX - 6, x, height - 50))
        parts.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%gs</text>' % (x, TOP_PX - 10, value))
        value += tick
    for host in hosts:
        y = TOP_PX + row_of[host] * ROW_PX
        parts.append('<text class="node" x="%d" y="%d" text-anchor="end">%s</text>'
                     % (LABEL_PX - 6, y + ROW_PX / 2 + 4, html.escape(host)))
    for step in steps:
        y = TOP_PX + row_of[step["host"]] * ROW_PX + (ROW_PX - BAR_PX) / 2
        x = LABEL_PX + step["start_s"] * scale
        bar_width = max((step["end_s"] - step["start_s"]) * scale, 2.0)
        failed = step["status"] in ("failed", "unreachable") and not step.get("ignored")
        tooltip = "%s on %s: %s in %.2fs%s" % (step["task"], step["host"], step["status"],
                                               step.get("duration_s") or 0.0,
                                               " - " + step["msg"] if step.get("msg") else "")
        if step["event"] == "gate":
            cx, cy = x + bar_width, y + BAR_PX / 2
            parts.append('<path class="gate %s" d="M%.1f %.1f l6 6 l-6 6 l-6 -6 z" fill="%s" stroke="#333">'
                         '<title>gate %s: %s</title></path>'
                         % ("failed" if failed else "passed", cx, cy - 6, FAILED_COLOUR if failed else "#2ca02c",
                            html.escape(step.get("gate", "")), html.escape(tooltip)))
            continue
        parts.append('<rect class="step %s%s" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"%s>'
                     '<title>%s</title></rect>'
                     % (lane(step), " failed" if failed else "", x, y, bar_width, BAR_PX,
                        FAILED_COLOUR if failed else LANE_COLOURS[lane(step)],
                        ' stroke="#600" stroke-width="1.5"' if failed else "", html.escape(tooltip)))
        if failed:
            parts.append('<text class="failure-mark" x="%.1f" y="%.1f" fill="%s" font-weight="bold">\u2715</text>'
                         % (x + bar_width + 3, y + BAR_PX - 2, FAILED_COLOUR))
    if not hosts:
        parts.append('<text x="%d" y="%d" fill="#555">no node was touched in this run</text>'
                     % (LABEL_PX, TOP_PX + 16))
    legend_y, legend_x = height - 28, LABEL_PX
    for name, colour in list(LANE_COLOURS.items()) + [("failed", FAILED_COLOUR)]:
        parts.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>'
                     % (legend_x, legend_y, colour, legend_x + 16, legend_y + 10, name))
        legend_x += 80
    parts.append('<path d="M%d %d l6 6 l-6 6 l-6 -6 z" fill="#2ca02c" stroke="#333"/><text x="%d" y="%d">gate</text>'
                 % (legend_x + 6, legend_y, legend_x + 16, legend_y + 10))
    parts.append("</svg>")
    return "\n".join(parts)


def svg_document(steps):
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + svg(steps)
