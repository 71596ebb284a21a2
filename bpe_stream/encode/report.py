"""``bpe-stream report``: one self-contained HTML page of what tokenizers do on held-out text.

:func:`build` gathers the figures -- with :mod:`bpe_stream.encode.evaluate`'s own functions,
so every number on the page is the one ``eval --json`` prints for the same files and
merge-prefixes -- and :func:`render` draws them: bytes per token against vocabulary size
(the nested vocabularies of one run: its merge-prefixes), per input file and per script
(the Unicode script of each pretoken's first letter), the token length distribution, the
most frequent and the longest tokens, for an extension (``--baseline``) its new tokens and
the tokens saved per document, and a store's totals.  The page needs nothing but itself:
inline CSS and SVG, no script runs, nothing is fetched; the figures ride along as JSON in a
``<script type="application/json">`` block for other tools (and the tests) to read.
"""

from __future__ import annotations

import html
import json
import math
import os
import unicodedata
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

import regex

from ..inputs.reader import Source
from .evaluate import compare, evaluate, evaluate_one
from .tokenizer import Tokenizer

TOP = 25  # rows in the token tables
SCRIPTS = ("Latin", "Cyrillic", "Greek", "Han", "Hiragana", "Katakana", "Hangul", "Arabic", "Hebrew", "Devanagari",
           "Bengali", "Tamil", "Thai", "Georgian", "Armenian", "Ethiopic")
_SCRIPT_RES = [(name, regex.compile(rf"\p{{Script={name}}}")) for name in SCRIPTS]


def default_prefixes(tok: Tokenizer, steps: int = 8) -> List[int]:
    """``steps`` merge counts from 0 to all of them, evenly spread (the curve's points)."""
    n = len(tok.merges)
    return sorted({round(n * i / steps) for i in range(steps + 1)})


def script_of(piece: str) -> str:
    """The Unicode script of the first letter of ``piece``; ``no letter`` for digits,
    punctuation and space only; ``Other`` for a script outside :data:`SCRIPTS`."""
    for ch in piece:
        if unicodedata.category(ch).startswith("L"):
            for name, pattern in _SCRIPT_RES:
                if pattern.match(ch):
                    return name
            return "Other"
    return "no letter"


def printable(data: bytes) -> str:
    """A token's bytes as readable text: UTF-8 shown as itself, a space as ``␣``, newlines,
    tabs and other control characters and bytes that are not UTF-8 escaped (``\\n``, ``\\x9f``)."""
    out = []
    for ch in data.decode("utf-8", "backslashreplace"):
        if ch == " ":
            out.append("␣")
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif unicodedata.category(ch)[0] in "CZ" and ch != "\\":
            out.append(f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _read_text(source: Source) -> str:
    with source.reading() as stream:
        return stream.read().decode("utf-8", "replace")


def _per_script(tok: Tokenizer, texts: Sequence[str]) -> List[dict]:
    """Bytes and tokens by script over the pretokens of ``texts`` (special tokens left out):
    each distinct pretoken encoded once, counted as often as it occurs."""
    pieces: Counter = Counter()
    specials = sorted(tok.special_tokens, key=len, reverse=True)
    splitter = regex.compile("|".join(regex.escape(s) for s in specials)) if specials else None
    for text in texts:
        for part in (splitter.split(text) if splitter else [text]):
            pieces.update(tok.pretokenizer.split(part))
    rows: Dict[str, List[int]] = {}
    for piece, n in pieces.items():
        row = rows.setdefault(script_of(piece), [0, 0, 0])
        row[0] += n * len(piece.encode("utf-8"))
        row[1] += n * len(tok.encode(piece))
        row[2] += n
    out = [{"script": name, "bytes": b, "tokens": t, "pretokens": p, "bytes_per_token": b / t if t else None}
           for name, (b, t, p) in rows.items()]
    return sorted(out, key=lambda r: -r["bytes"])


def _token_counts(tok: Tokenizer, sources: Sequence[Source]) -> Counter:
    counts: Counter = Counter()
    for source in sources:
        with source.reading() as stream:
            for ids in tok.encode_stream(stream):
                counts.update(ids)
    return counts


def _token_row(tok: Tokenizer, tid: int, **extra) -> dict:
    data = tok.vocab[tid]
    return {"id": tid, "text": printable(data), "bytes": len(data), **extra}


def tokenizer_figures(tok: Tokenizer, label: str, sources: Sequence[Source], prefixes: Optional[Sequence[int]],
                      baseline: Optional[Tuple[Tokenizer, dict, List[dict]]] = None, scripts: bool = True) -> dict:
    """The figures of one tokenizer on ``sources``; ``baseline``: the tokenizer it extends,
    its ``evaluate`` row over all sources and its rows per source."""
    total = evaluate(tok, sources)[0]
    curve = evaluate(tok, sources, list(prefixes) if prefixes is not None else default_prefixes(tok))
    per_file = [{"file": s.name, **evaluate_one(tok, [s])} for s in sources]
    counts = _token_counts(tok, sources)
    occurrences = Counter()
    for tid, n in counts.items():
        occurrences[len(tok.vocab[tid])] += n
    in_vocab = Counter(len(tok.vocab[tid]) for tid in tok.vocab)
    symbol_ids = {sid for sid, _, _ in tok.symbols}
    longest = sorted((tid for tid in tok.vocab if tid not in symbol_ids), key=lambda t: (-len(tok.vocab[t]), t))
    fig = {
        "label": label,
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merges),
        "pretokenizer": tok.pretokenizer.name,
        "special_tokens": list(tok.special_tokens),
        "tie_break": tok.tie_break,
        "total": total,
        "curve": curve,
        "per_file": per_file,
        "per_script": _per_script(tok, [_read_text(s) for s in sources]) if scripts else [],
        "length_by_occurrence": {str(k): v for k, v in sorted(occurrences.items())},
        "length_in_vocab": {str(k): v for k, v in sorted(in_vocab.items())},
        "top_tokens": [_token_row(tok, tid, count=n) for tid, n in counts.most_common(TOP)],
        "longest_tokens": [_token_row(tok, tid, count=counts.get(tid, 0)) for tid in longest[:TOP]],
    }
    if baseline is not None:
        base_tok, base_total, base_files = baseline
        new = sorted(set(tok.vocab) - set(base_tok.vocab))
        fig["against_baseline"] = compare(total, base_total)
        fig["new_tokens_count"] = len(new)
        fig["new_tokens_used"] = sum(1 for tid in new if counts.get(tid))
        fig["new_tokens"] = [_token_row(tok, tid, count=counts.get(tid, 0))
                             for tid in sorted(new, key=lambda t: (-counts.get(t, 0), t))[:TOP]]
        fig["saved_per_document"] = [
            {"file": mine["file"], "tokens_before": theirs["tokens"], "tokens_after": mine["tokens"],
             "tokens_saved": theirs["tokens"] - mine["tokens"],
             "tokens_saved_share": (theirs["tokens"] - mine["tokens"]) / theirs["tokens"] if theirs["tokens"] else None}
            for mine, theirs in zip(per_file, base_files)]
    return fig


def build(tokenizers: Sequence[Tuple[str, Tokenizer]], sources: Sequence[Source],
          prefixes: Optional[Sequence[int]] = None, baseline: Optional[Tuple[str, Tokenizer]] = None,
          store_stats: Optional[dict] = None, scripts: bool = True) -> dict:
    """The report's figures: ``tokenizers`` (label, tokenizer) on ``sources``; ``baseline``
    (label, tokenizer), drawn too and compared with; ``store_stats``: ``Store.stats()``, with
    ``training``: its training record (``bpe_stream.store.training_record.read_record``), shown when there."""
    base = None
    out = {"files": [{"name": s.name, "bytes": s.size} for s in sources], "tokenizers": []}
    if baseline is not None:
        label, base_tok = baseline
        base_fig = tokenizer_figures(base_tok, label, sources, None, scripts=scripts)
        base = (base_tok, base_fig["total"], base_fig["per_file"])
        out["baseline"] = label
        out["tokenizers"].append(base_fig)
    for label, tok in tokenizers:
        mine = prefixes
        if mine is None and base is not None and base[0].merges == tok.merges[:len(base[0].merges)]:
            # an extension: a point where the original ends and the new merges begin
            mine = sorted(set(default_prefixes(tok)) | {len(base[0].merges)})
        out["tokenizers"].append(tokenizer_figures(tok, label, sources, mine, base, scripts))
    if store_stats is not None:
        out["store"] = store_stats
    return out


# -- drawing ---------------------------------------------------------------------------------
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_E = html.escape


def _num(x, spec=",.3f") -> str:
    return "–" if x is None else format(x, spec)


def _ticks(lo: float, hi: float, n: int = 5) -> List[float]:
    if hi <= lo:
        return [lo]
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def line_chart(series: Sequence[Tuple[str, List[Tuple[float, float]]]], xlabel: str, ylabel: str) -> str:
    """An SVG line chart; a log x axis when the x values span more than 20 times."""
    w, h, left, right, top, bottom = 760, 340, 64, 170, 16, 48
    xs = [x for _, pts in series for x, _ in pts if x > 0]
    ys = [y for _, pts in series for _, y in pts if y is not None]
    if not xs or not ys:
        return "<p>(no data)</p>"
    log = max(xs) / min(xs) > 20
    fx = (lambda v: math.log10(v)) if log else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    x1 = x1 if x1 > x0 else x0 + 1
    y0, y1 = 0.0, max(ys) * 1.1

    def px(v):
        return left + (fx(v) - x0) / (x1 - x0) * (w - left - right)

    def py(v):
        return top + (1 - (v - y0) / (y1 - y0)) * (h - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">',
             f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="#fafafa" '
             'stroke="#ccc"/>']
    for t in _ticks(y0, y1):
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#e4e4e4"/>'
                     f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    if log:
        xt = [10 ** e for e in range(math.floor(x0), math.ceil(x1) + 1) if x0 <= e <= x1] or [min(xs), max(xs)]
    else:
        xt = _ticks(min(xs), max(xs))
    for t in xt:
        parts.append(f'<text x="{px(t):.1f}" y="{h - bottom + 18}" text-anchor="middle">{t:,.0f}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">{_E(xlabel)}'
                 f'{" (log scale)" if log else ""}</text>'
                 f'<text x="14" y="{(top + h - bottom) / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(top + h - bottom) / 2})">{_E(ylabel)}</text>')
    for i, (name, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        pts = [(x, y) for x, y in pts if x > 0 and y is not None]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}">'
                         f'<title>{_E(name)}: {x:,} tokens, {y:.3f} bytes/token</title></circle>')
        ly = top + 14 + 18 * i
        parts.append(f'<rect x="{w - right + 12}" y="{ly - 9}" width="12" height="12" fill="{color}"/>'
                     f'<text x="{w - right + 30}" y="{ly + 1}">{_E(_short(name, 20))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(rows: Sequence[str], series: Sequence[str], values: Sequence[Sequence[Optional[float]]],
              spec: str = ".2f") -> str:
    """Horizontal grouped bars: one group a row, one bar a series (``values[row][series]``)."""
    bar, gap, left, w = 14, 10, 190, 760
    n = max(1, len(series))
    h = 20 + len(rows) * (n * bar + gap)
    top_v = max([v for vs in values for v in vs if v is not None] or [1])
    scale = (w - left - 80) / top_v
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">']
    y = 10
    for label, vs in zip(rows, values):
        parts.append(f'<text x="{left - 8}" y="{y + n * bar / 2 + 4:.1f}" text-anchor="end">{_E(_short(label, 28))}'
                     f'<title>{_E(label)}</title></text>')
        for i, v in enumerate(vs):
            if v is None:
                continue
            color = COLORS[i % len(COLORS)]
            parts.append(f'<rect x="{left}" y="{y + i * bar}" width="{max(v * scale, 1):.1f}" height="{bar - 2}" '
                         f'fill="{color}"><title>{_E(series[i])}: {format(v, spec)}</title></rect>'
                         f'<text x="{left + v * scale + 5:.1f}" y="{y + i * bar + bar - 4}">{format(v, spec)}</text>')
        y += n * bar + gap
    parts.append("</svg>")
    return "".join(parts)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1):]


def _legend(names: Sequence[str]) -> str:
    return '<p class="legend">' + " ".join(
        f'<span><i style="background:{COLORS[i % len(COLORS)]}"></i>{_E(name)}</span>' for i, name in enumerate(names)
    ) + "</p>"


def _table(head: Sequence[str], rows: Sequence[Sequence], numeric_from: int = 1) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_E(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(
            f'<td class="{"num" if i >= numeric_from else "tok"}">{_E(str(c))}</td>' for i, c in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _token_table(rows: Sequence[dict], tokens: int) -> str:
    return _table(["token", "id", "bytes", "count", "share of tokens"],
                  [(f"{r['text']}", f"{r['id']:,}", r["bytes"], f"{r['count']:,}",
                    _num(r["count"] / tokens if tokens else None, ".2%")) for r in rows], numeric_from=1)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1140px;color:#222;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 14px;font-size:13px}th,td{border:1px solid #ddd;padding:3px 8px}
th{background:#f2f2f2;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.tok{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre}
svg{font:12px system-ui,sans-serif;display:block;margin:6px 0 12px}svg text{fill:#333}
.legend span{margin-right:16px}.legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px}
.cols{display:flex;flex-wrap:wrap;gap:28px}.cols>div{flex:1 1 480px}.note{color:#666;font-size:12.5px}
"""


def _summary_section(toks, names, files, fig) -> list:
    """The summary table: one row a tokenizer."""
    body = []
    body.append("<h2>Summary</h2>")
    body.append(_table(
        ["tokenizer", "vocab size", "merges", "bytes", "tokens", "bytes/token", "compression ratio", "tokens/word",
         "vocab used", "round trip"],
        [(t["label"], f"{t['vocab_size']:,}", f"{t['merges']:,}", f"{t['total']['bytes']:,}", f"{t['total']['tokens']:,}",
          _num(t["total"]["bytes_per_token"]), _num(t["total"]["compression_ratio"]),
          _num(t["total"]["tokens_per_word"]), _num(t["total"]["vocab_used_share"], ".1%"),
          "ok" if t["total"]["round_trip"] else ("lossy by design" if t["total"]["lossy_by_design"] else "FAILED"))
         for t in toks]))
    return body


def _curve_section(toks, names, files, fig) -> list:
    """Bytes per token against the vocabulary size of the nested vocabularies."""
    body = []
    body.append("<h2>Bytes per token as the vocabulary grows</h2>")
    body.append('<p class="note">Each point is one of the nested vocabularies of a run: its first merges only '
                "(<code>eval --merges</code>).</p>")
    body.append(line_chart([(t["label"], [(r["vocab_size"], r["bytes_per_token"]) for r in t["curve"]]) for t in toks],
                           "vocabulary size", "bytes per token"))
    for t in toks:
        body.append(f"<h3>{_E(t['label'])}</h3>")
        body.append(_table(["merges", "vocab size", "tokens", "bytes/token", "compression ratio", "vocab used"],
                           [(f"{r['merges']:,}", f"{r['vocab_size']:,}", f"{r['tokens']:,}", _num(r["bytes_per_token"]),
                             _num(r["compression_ratio"]), _num(r["vocab_used_share"], ".1%")) for r in t["curve"]],
                           numeric_from=0))
    return body


def _files_section(toks, names, files, fig) -> list:
    """Bytes per token per input file."""
    body = []
    body.append("<h2>Per input file</h2>" + _legend(names))
    body.append(bar_chart([f["name"] for f in files], names,
                          [[t["per_file"][i]["bytes_per_token"] for t in toks] for i in range(len(files))], ".3f"))
    body.append(_table(["file", "bytes"] + [f"{n}: tokens" for n in names] + [f"{n}: bytes/token" for n in names],
                       [[f["name"], f"{toks[0]['per_file'][i]['bytes']:,}"]
                        + [f"{t['per_file'][i]['tokens']:,}" for t in toks]
                        + [_num(t["per_file"][i]["bytes_per_token"]) for t in toks] for i, f in enumerate(files)]))
    return body


def _script_section(toks, names, files, fig) -> list:
    """Bytes per token per script of the pretokens' first letters (when known)."""
    body = []
    if any(t["per_script"] for t in toks):
        scripts = []
        for t in toks:
            for r in t["per_script"]:
                if r["script"] not in scripts:
                    scripts.append(r["script"])
        by = [{r["script"]: r for r in t["per_script"]} for t in toks]
        body.append("<h2>Per script</h2>")
        body.append('<p class="note">The Unicode script of each pretoken\'s first letter; the lower the bytes per '
                    "token, the weaker the tokenizer on that script.</p>" + _legend(names))
        body.append(bar_chart(scripts, names, [[b[s]["bytes_per_token"] if s in b else None for b in by]
                                               for s in scripts], ".3f"))
        body.append(_table(["script", "bytes", "pretokens"] + [f"{n}: bytes/token" for n in names],
                           [[s, f"{by[0][s]['bytes']:,}" if s in by[0] else "–",
                             f"{by[0][s]['pretokens']:,}" if s in by[0] else "–"]
                            + [_num(b[s]["bytes_per_token"]) if s in b else "–" for b in by] for s in scripts]))
    return body


def _length_section(toks, names, files, fig) -> list:
    """Token lengths on the text and in the vocabulary."""
    body = []
    body.append("<h2>Token length</h2>" + _legend(names))
    lengths = sorted({int(k) for t in toks for k in t["length_by_occurrence"]})
    body.append('<div class="cols"><div><h3>Tokens of the text, by length in bytes (share)</h3>')
    body.append(bar_chart([f"{n} byte{'s' if n != 1 else ''}" for n in lengths], names,
                          [[t["length_by_occurrence"].get(str(n), 0) / t["total"]["tokens"] if t["total"]["tokens"]
                            else None for t in toks] for n in lengths], ".1%"))
    vlengths = sorted({int(k) for t in toks for k in t["length_in_vocab"]})
    body.append("</div><div><h3>Tokens of the vocabulary, by length in bytes</h3>")
    body.append(bar_chart([f"{n} byte{'s' if n != 1 else ''}" for n in vlengths], names,
                          [[t["length_in_vocab"].get(str(n), 0) for t in toks] for n in vlengths], ",d"))
    body.append("</div></div>")
    return body


def _tokens_section(toks, names, files, fig) -> list:
    """The most frequent and longest tokens; for an extension, what it adds."""
    body = []
    for t in toks:
        body.append(f"<h2>Tokens of {_E(t['label'])}</h2>")
        body.append('<p class="note">␣ is a space; \\n, \\t and \\xNN are a newline, a tab and bytes that are not '
                    "text on their own.</p>")
        body.append('<div class="cols"><div><h3>Most frequent on the held-out text</h3>'
                    + _token_table(t["top_tokens"], t["total"]["tokens"]) + "</div>")
        body.append("<div><h3>Longest in the vocabulary</h3>" + _token_table(t["longest_tokens"], t["total"]["tokens"])
                    + "</div></div>")
        if "against_baseline" in t:
            c = t["against_baseline"]
            body.append(f"<h3>Against {_E(fig['baseline'])}</h3>")
            body.append(f"<p>{t['new_tokens_count']:,} new tokens, {t['new_tokens_used']:,} of them used on this text; "
                        f"{c['tokens_after']:,} tokens for {c['tokens_before']:,}: {c['tokens_saved']:,} saved "
                        f"({_num(c['tokens_saved_share'], '.1%')}); bytes/token {_num(c['bytes_per_token_before'])} → "
                        f"{_num(c['bytes_per_token_after'])}.</p>")
            saved = t["saved_per_document"]
            body.append(bar_chart([s["file"] for s in saved], ["tokens saved"],
                                  [[s["tokens_saved_share"]] for s in saved], ".1%"))
            body.append(_table(["file", "tokens before", "tokens after", "saved", "saved share"],
                               [(s["file"], f"{s['tokens_before']:,}", f"{s['tokens_after']:,}", f"{s['tokens_saved']:,}",
                                 _num(s["tokens_saved_share"], ".1%")) for s in saved]))
            body.append("<h3>New tokens, most used first</h3>" + _token_table(t["new_tokens"], t["total"]["tokens"]))
    return body


def _store_section(toks, names, files, fig) -> list:
    """The training store's totals and the training record."""
    body = []
    if "store" in fig:
        st = fig["store"]
        body.append("<h2>Training store</h2>")
        body.append(_table(["", ""], [
            ("store", st["store"]), ("documents", f"{st['documents']:,}"), ("bytes", f"{st['bytes']:,}"),
            ("pretokens", f"{st['pretokens']:,}"), ("distinct pretokens", f"{st['unique_pretokens']:,}"),
            ("files", f"{st['files']:,}"), ("pretokenizer", st["settings"].get("pretokenizer")),
            ("special tokens", ", ".join(st["settings"].get("special_tokens") or []) or "none"),
            ("size on disk", f"{st['disk_bytes'] / 1e6:,.1f} MB"),
            ("estimated in-memory training", f"{st['estimated_train_memory_bytes'] / 1e6:,.1f} MB"),
        ], numeric_from=1))
        if st.get("training"):  # the last train's record (bpe_stream.store.training_record); shown escaped
            from ..store.training_record import describe

            body.append("<h3>Training record</h3>" + _table(["", ""], describe(st["training"])))
    return body


def render(fig: dict, title: str = "bpe-stream report") -> str:
    """The HTML page of :func:`build`'s figures."""
    toks = fig["tokenizers"]
    names = [t["label"] for t in toks]
    files = fig["files"]
    body = [f"<h1>{_E(title)}</h1>",
            f'<p class="note">{len(files)} held-out file{"s" if len(files) != 1 else ""}, '
            f'{sum(t["bytes"] for t in files if t["bytes"] is not None):,} bytes; {len(toks)} tokenizer'
            f'{"s" if len(toks) != 1 else ""}. Figures as <code>bpe-stream eval --json</code> gives them.</p>']
    for section in (_summary_section, _curve_section, _files_section, _script_section, _length_section,
                    _tokens_section, _store_section):
        body += section(toks, names, files, fig)
    data = json.dumps(fig, ensure_ascii=False).replace("</", "<\\/")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_E(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body)
            + f'\n<script type="application/json" id="report-data">{data}</script>\n</body></html>\n')


def write(fig: dict, path, title: str = "bpe-stream report") -> None:
    from ..atomic import atomic_write

    with atomic_write(os.fspath(path), "w") as f:
        f.write(render(fig, title))
