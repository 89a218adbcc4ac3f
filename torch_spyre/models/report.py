"""sweep.json -> sweep.md (pass rates, failure causes, the full table) and a
bar chart of the pass rate per mode: sweep.png with matplotlib when it is
installed, else sweep.svg drawn here (matplotlib is no dependency of the
project)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

from .runner import MODES

STRICT_FALLBACK = re.compile(r"(aten::[\w.]+) has no spyre kernel")


def write_reports(results, out_dir):
    out_dir = Path(out_dir)
    (out_dir / "sweep.md").write_text(markdown(results))
    write_plot(pass_rates(results), out_dir)


def modes_present(results):
    seen = {mode for entry in results["architectures"].values() for mode in entry["modes"]}
    return [mode for mode in MODES if mode in seen]


def pass_rates(results):
    """{mode: (passed, failed, skipped)}; the rate is passed / (passed + failed):
    a skip (mode not applicable, or the CPU cannot run the model) counts in
    neither."""
    rates = {}
    for mode in modes_present(results):
        statuses = Counter(entry["modes"][mode]["status"]
                           for entry in results["architectures"].values()
                           if mode in entry["modes"])
        rates[mode] = (statuses["pass"], statuses["fail"], statuses["skip"])
    return rates


def rate_text(passed, failed):
    run = passed + failed
    return f"{100 * passed / run:.1f}%" if run else "n/a"


def markdown(results):
    settings = results.get("settings", {})
    lines = ["# Hugging Face model sweep on spyre", ""]
    if settings:
        sizes = ", ".join(f"{k} {v}" for k, v in settings.get("tiny_sizes", {}).items())
        lines += [f"transformers {settings.get('transformers')}, torch {settings.get('torch')}, "
                  f"updated {settings.get('updated')}. Tiny seeded configs ({sizes}); "
                  f"float32 on both devices; pass: {settings.get('tolerance')} "
                  "(generate: tokens equal). Host ratio: median host time spyre / CPU "
                  f"over {settings.get('timed_runs')} runs after a warm-up; device: "
                  "modelled device time of one run.", ""]
    lines += _pass_rate_table(results) + [""]
    lines += _adapters_table(results)
    lines += _failure_causes(results)
    lines += _results_table(results)
    return "\n".join(lines) + "\n"


def _pass_rate_table(results):
    lines = ["## Pass rates", "", "| mode | pass | fail | skip | pass rate |",
             "|---|---:|---:|---:|---:|"]
    for mode, (passed, failed, skipped) in pass_rates(results).items():
        lines.append(f"| {mode} | {passed} | {failed} | {skipped} | "
                     f"{rate_text(passed, failed)} |")
    return lines


def adapters_applied(results):
    """{adapter: {architecture: places rewritten}} over every mode."""
    applied = defaultdict(dict)
    for name, entry in results["architectures"].items():
        for result in entry["modes"].values():
            for adapter, count in (result.get("adapters") or {}).items():
                applied[adapter][name] = max(count, applied[adapter].get(name, 0))
    return dict(sorted(applied.items()))


def _adapters_table(results):
    """torch_spyre.adapters applied (compiled mode): exact rewrites of the
    models' code that make it lowerable."""
    applied = adapters_applied(results)
    if not applied:
        return []
    lines = ["## Adapters applied", "",
             "Exact rewrites of the models' code (`torch_spyre.adapters`) applied in "
             "compiled mode; places: modules or graph nodes rewritten.", "",
             "| adapter | architectures | places | which |", "|---|---:|---:|---|"]
    for adapter, where in applied.items():
        lines.append(f"| `{adapter}` | {len(where)} | {sum(where.values())} | "
                     f"{_names(sorted(where))} |")
    return lines + [""]


def strict_blockers(results):
    """{aten op: [architectures]} of the CPU fallback that failed strict mode."""
    blockers = defaultdict(list)
    for name, entry in results["architectures"].items():
        strict = entry["modes"].get("strict")
        if strict and strict["status"] == "fail":
            match = STRICT_FALLBACK.search(strict["error"] or "")
            if match:
                blockers[match.group(1)].append(name)
    return dict(sorted(blockers.items(), key=lambda item: -len(item[1])))


def eager_fallback_ops(results):
    """{aten op: [architectures]} of every CPU fallback seen in eager mode."""
    ops = defaultdict(list)
    for name, entry in results["architectures"].items():
        for op in (entry["modes"].get("eager") or {}).get("fallbacks") or {}:
            ops[op].append(name)
    return dict(sorted(ops.items(), key=lambda item: -len(item[1])))


def grouped_errors(results, mode, status="fail"):
    """{error pattern: [architectures]}, numbers folded so that one cause is
    one group."""
    groups = defaultdict(list)
    for name, entry in results["architectures"].items():
        result = entry["modes"].get(mode)
        if result and result["status"] == status:
            pattern = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", result["error"] or "")
            groups[pattern[:150]].append(name)
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def cpu_reference_failures(results):
    """{reason: [architectures]} the CPU could not build or run (any mode)."""
    reasons = {}
    for name, entry in results["architectures"].items():
        for result in entry["modes"].values():
            if result["status"] == "skip" and (result["error"] or "").startswith("cpu reference"):
                reasons.setdefault(name, result["error"])
                break
    groups = defaultdict(list)
    for name, reason in reasons.items():
        groups[reason[:150]].append(name)
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def _failure_causes(results):
    lines = ["## Failure causes", ""]
    blockers = strict_blockers(results)
    if blockers:
        lines += ["### Strict mode: the CPU fallback that stopped each architecture", "",
                  "| op | architectures | which |", "|---|---:|---|"]
        lines += [f"| `{op}` | {len(names)} | {_names(names)} |" for op, names in blockers.items()]
        lines.append("")
    fallbacks = eager_fallback_ops(results)
    if fallbacks:
        lines += ["### Eager mode: every op that fell back to the CPU (before a failure, if any)", "",
                  "| op | architectures | which |", "|---|---:|---|"]
        lines += [f"| `{op}` | {len(names)} | {_names(names)} |" for op, names in fallbacks.items()]
        lines.append("")
    for mode in modes_present(results):
        groups = {pattern: names for pattern, names in grouped_errors(results, mode).items()
                  if not (mode == "strict" and STRICT_FALLBACK.search(pattern))}
        if groups:
            lines += [f"### {mode}: failures", "", "| count | error (first line) | architectures |",
                      "|---:|---|---|"]
            lines += [f"| {len(names)} | {_cell(pattern)} | {_names(names)} |"
                      for pattern, names in groups.items()]
            lines.append("")
    skipped = cpu_reference_failures(results)
    if skipped:
        lines += ["### Not compared: the CPU cannot build or run the tiny model", "",
                  "| count | reason | architectures |", "|---:|---|---|"]
        lines += [f"| {len(names)} | {_cell(pattern)} | {_names(names)} |"
                  for pattern, names in skipped.items()]
        lines.append("")
    return lines


def _results_table(results):
    modes = modes_present(results)
    lines = ["## Results", "",
             "Cell: status, max abs error, CPU fallbacks (`fb`), views copied through "
             "the host (`hc`), runs of compiled host kernels (`hk`), adapters applied "
             "(`ad`), host time ratio spyre/CPU, modelled device time.", "",
             "| architecture | kind | " + " | ".join(modes) + " |",
             "|---|---|" + "---|" * len(modes)]
    for name in sorted(results["architectures"]):
        entry = results["architectures"][name]
        cells = [_result_cell(entry["modes"].get(mode)) for mode in modes]
        lines.append(f"| {name} | {entry['kind']} | " + " | ".join(cells) + " |")
    return lines + [""]


def _result_cell(result):
    if result is None:
        return ""
    if result["status"] == "skip":
        return "skip"
    parts = ["**pass**" if result["status"] == "pass" else "FAIL"]
    if result["max_error"] is not None:
        parts.append(f"{result['max_error']:.1e}")
    if result["host_copies"] is not None or result["fallbacks"]:
        parts.append(f"fb {sum(result['fallbacks'].values())}")
    if result["host_copies"] is not None:
        parts.append(f"hc {result['host_copies']}")
    if result.get("host_kernels"):
        parts.append(f"hk {result['host_kernels']}")
    if result.get("adapters"):
        parts.append(f"ad {sum(result['adapters'].values())}")
    if result["host_ratio"] is not None:
        parts.append(f"x{result['host_ratio']:.1f}")
    if result["device_ns"] is not None:
        parts.append(f"{result['device_ns'] / 1e3:.0f} us")
    text = " · ".join(parts)
    if result["status"] == "fail" and result["error"]:
        text += ": " + _short_error(result["error"])
    return text


def _short_error(error):
    fallback = STRICT_FALLBACK.search(error)
    return f"CPU fallback `{fallback.group(1)}`" if fallback else _cell(error[:90])


def _names(names):
    return ", ".join(names) if len(names) <= 12 else ", ".join(names[:12]) + ", ..."


def _cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def write_plot(rates, out_dir):
    """sweep.png with matplotlib when installed, else sweep.svg."""
    try:
        import matplotlib
    except ImportError:
        (Path(out_dir) / "sweep.svg").write_text(svg_bar_chart(rates))
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot
    figure, axes = pyplot.subplots(figsize=(6, 3.5))
    modes = list(rates)
    values = [_rate(*rates[mode][:2]) for mode in modes]
    bars = axes.bar(modes, values, color="#3b6ea8")
    for bar, mode in zip(bars, modes):
        passed, failed, _ = rates[mode]
        axes.annotate(f"{passed}/{passed + failed}", (bar.get_x() + bar.get_width() / 2,
                      bar.get_height()), ha="center", va="bottom")
    axes.set_ylim(0, 105)
    axes.set_ylabel("pass rate (%)")
    axes.set_title("Hugging Face architectures on spyre")
    figure.tight_layout()
    figure.savefig(Path(out_dir) / "sweep.png", dpi=120)
    pyplot.close(figure)


def _rate(passed, failed):
    return 100.0 * passed / (passed + failed) if passed + failed else 0.0


def svg_bar_chart(rates, width=480, height=300):
    """A bar per mode: its pass rate, labelled passed/run."""
    left, right, top, bottom = 50, 20, 40, 40
    plot_width, plot_height = width - left - right, height - top - bottom
    slot = plot_width / max(len(rates), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
             'Hugging Face architectures on spyre: pass rate per mode</text>']
    for percent in (0, 25, 50, 75, 100):
        y = top + plot_height * (1 - percent / 100)
        parts += [f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" '
                  'stroke="#ddd"/>',
                  f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{percent}%</text>']
    for index, (mode, (passed, failed, _)) in enumerate(rates.items()):
        bar_height = plot_height * _rate(passed, failed) / 100
        x = left + index * slot + slot * 0.2
        y = top + plot_height - bar_height
        centre = x + slot * 0.3
        parts += [f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.6:.1f}" '
                  f'height="{bar_height:.1f}" fill="#3b6ea8"/>',
                  f'<text x="{centre:.1f}" y="{y - 5:.1f}" text-anchor="middle">'
                  f'{passed}/{passed + failed}</text>',
                  f'<text x="{centre:.1f}" y="{height - bottom + 16}" '
                  f'text-anchor="middle">{mode}</text>']
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
