"""Server-side SVG: progress bars and the committed/errors-per-minute chart.

Built with format_html from numbers and fixed labels only, so nothing scraped reaches the
markup. SVG attributes (not inline styles) keep the pages inside a strict CSP.
"""

from __future__ import annotations

from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

# Drawing order and colours of task states in a progress bar.
STATE_COLOURS = {
    "committed": "#067647",
    "gone": "#98a2b3",
    "quarantined": "#b42318",
    "dead": "#7a271a",
    "retry_wait": "#b54708",
    "remote": "#6941c6",  # held by a provider job
    "leased": "#2456a6",
    "pending": "#d0d5dd",
}


def progress_bar(counts: dict[str, int], total: int, width: int = 240) -> SafeString:
    total = max(total, sum(counts.values()), 1)
    x = 0.0
    rects = []
    for state, colour in STATE_COLOURS.items():
        n = counts.get(state, 0)
        if n <= 0:
            continue
        w = width * n / total
        rects.append((f"{x:.2f}", f"{w:.2f}", colour, state, n))
        x += w
    body = format_html_join(
        "",
        '<rect x="{}" y="0" width="{}" height="14" fill="{}"><title>{}: {}</title></rect>',
        rects,
    )
    return format_html(
        '<svg class="bar" width="{}" height="14" role="img" aria-label="progress">'
        '<rect width="{}" height="14" fill="#f2f4f7"/>{}</svg>',
        width,
        width,
        body,
    )


def activity_chart(
    buckets: list[tuple[datetime, int, int]], width: int = 720, height: int = 160
) -> SafeString:
    """Bars per minute: committed (green) above the axis, errors (red) below."""
    if not buckets:
        return format_html('<p class="muted">{}</p>', "No attempts in this time range.")
    peak = max(max(c, e) for _, c, e in buckets) or 1
    half = (height - 30) / 2
    mid = 10 + half
    step = width / len(buckets)
    bar = max(step - 1, 1)
    parts = []
    for i, (minute, committed, errors) in enumerate(buckets):
        x = f"{i * step:.2f}"
        label = minute.strftime("%H:%M")
        if committed:
            h = half * committed / peak
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="#067647">'
                    "<title>{} committed {}</title></rect>",
                    x,
                    f"{mid - h:.2f}",
                    f"{bar:.2f}",
                    f"{h:.2f}",
                    label,
                    committed,
                )
            )
        if errors:
            h = half * errors / peak
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="#b42318">'
                    "<title>{} errors {}</title></rect>",
                    x,
                    f"{mid:.2f}",
                    f"{bar:.2f}",
                    f"{h:.2f}",
                    label,
                    errors,
                )
            )
    first, last = buckets[0][0].strftime("%H:%M"), buckets[-1][0].strftime("%H:%M")
    return format_html(
        '<svg class="chart" width="{w}" height="{h}" role="img" '
        'aria-label="committed pages and errors per minute">'
        '<line x1="0" y1="{mid}" x2="{w}" y2="{mid}" stroke="#98a2b3"/>{bars}'
        '<text x="0" y="{ty}" font-size="11">{first}</text>'
        '<text x="{w}" y="{ty}" font-size="11" text-anchor="end">{last}</text>'
        '<text x="2" y="10" font-size="11">{peak}/min</text></svg>',
        w=width,
        h=height,
        mid=f"{mid:.2f}",
        bars=SafeString("".join(parts)),
        ty=height - 4,
        first=first,
        last=last,
        peak=peak,
    )
