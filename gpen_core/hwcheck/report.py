"""The hardware check, presented: machine line, Markdown tables, chart rows, and a recommendation by ``auto``'s
rule. Pure but for reading the free memory (when none is given) and the models folder."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpen_core.platform.cpuinfo import native_bf16
from gpen_core.platform.meter import format_bytes
from gpen_core.modes import MODES, TASKS
from gpen_core.engine.fit import PANEL_PHOTO, Ranking, fits, rank, usable_bytes
from gpen_core.engine.profile_records import SYNTHETIC_NOTE, BackendSpeed, ModeProfile, NetworkSpeed, Profile, TaskRow
from gpen_core.weights import lookup
from gpen_core.weights.missing import download_command, files_text, mode_files, unusable
from gpen_core.weights.registry import unpinned_note

if TYPE_CHECKING:
    from gpen_core.engine.budget import Free
    from gpen_core.runtimes.openvino.choice import BackendChoice


def _free_now(profile: Profile, free: "Free | None") -> "Free":
    from gpen_core.engine.budget import free_memory

    return free if free is not None else free_memory(profile.device)  # "cpu" or "cuda:N"


def needs(profile: Profile) -> dict[str, int]:
    """Each measured mode's need on a PANEL_PHOTO as ``auto`` weighs it: ``estimate_peak`` on this profile, not the
    raw peak (a GPU's float32 copy and a photo beyond the workloads count; a mode that stepped down: built-in)."""
    from gpen_core.engine.budget import estimate_peak

    return {name: estimate_peak(MODES[name], profile.device, PANEL_PHOTO, profile=profile)[0] for name in profile.modes}


def ranking(profile: Profile, free: "Free") -> Ranking:
    """The measured pasting modes ranked by what fits ``free`` (auto's rule) on :func:`needs`."""
    bound = free.binding(profile.device)
    return rank(needs(profile), bound.free_bytes, binding=bound.name)


def _fits(need: int, profile: Profile, free: "Free") -> tuple[bool, int]:
    """(fits, bytes short) for ``need`` against ``free`` of the memory that binds, with auto's safety margin."""
    have = free.binding(profile.device).free_bytes
    return fits(need, have), max(0, need - usable_bytes(have))


def _secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


@dataclass(frozen=True)
class FilesHere:
    """The registry files the models folder lacks now (missing or corrupt), per mode and per (task, mode)."""

    modes: Mapping[str, tuple[str, ...]]
    tasks: Mapping[tuple[str, str], tuple[str, ...]]


def files_here(profile: Profile, models_dir: str | os.PathLike[str] | None = None) -> FilesHere:
    """:class:`FilesHere` for ``profile`` (the measurement may have run random weights in their place)."""
    bad = unusable(lookup.status(models_dir))

    def lacking(names: Sequence[str]) -> tuple[str, ...]:
        return tuple(n for n in names if n in bad)

    modes = {name: lacking(mode_files(MODES[name])) for name in profile.modes}
    tasks = {(t.task, t.mode): lacking(mode_files(MODES[t.mode], TASKS[t.task].model, aligned=TASKS[t.task].aligned_only))
             for t in profile.tasks if t.refused is None}
    return FilesHere(modes, tasks)


def enable_text(names: Sequence[str]) -> str:
    """The missing files ``names`` and the one command that fetches them ('' for none)."""
    return f"missing {files_text(names)}: `{download_command(names)}`" if names else ""


def machine_line(profile: Profile) -> str:
    """One line of machine facts: CPU (flags), cores, RAM, GPU, torch."""
    m = profile.machine
    return f"{host_text(m)}, torch {m.get('torch')}, gpen_core {m.get('gpen_core')}; measured on {profile.device}"


def host_text(m: Mapping[str, Any]) -> str:
    """The CPU (its flags of interest, native bf16), cores, RAM and GPU of machine facts
    (:func:`gpen_core.hwcheck.info.machine_facts`): the check's and the tips'."""
    flags = ", ".join(m.get("cpu_flags") or []) or "no AVX-512/bf16"
    # What the plan decided when this was measured; older checks (and tips whose child failed) by the flags.
    bf16 = m.get("native_bf16", native_bf16(m.get("cpu_flags") or (), onednn_bf16=False))
    gpu = f"{m['gpu_name']} ({format_bytes(m.get('vram_total_bytes'))})" if m.get("gpu_name") else "no CUDA GPU"
    return (f"{m.get('cpu_model', '?')} [{flags}; native bf16: {'yes' if bf16 else 'no'}], "
            f"{m.get('cores_physical') or '?'} cores / {m.get('cores_logical') or '?'} threads, "
            f"RAM {format_bytes(m.get('ram_available_bytes'))} free of {format_bytes(m.get('ram_total_bytes'))}, {gpu}")


def format_table(profile: Profile, free: "Free | None" = None, *, fits: bool = True, files: FilesHere | None = None) -> str:
    """Markdown: mode × peak RAM × peak VRAM × s/face (peaks above the idle process, worst workload). ``fits``: a
    column against ``free`` (or now) less auto's margin; ``files`` (:func:`files_here`): each mode's missing files."""
    free = _free_now(profile, free) if fits else None
    head = ["mode", "model", "dtype", "peak RAM", "peak VRAM (alloc / reserved)", "s / face", "total s", "weights"]
    if fits:
        head.append("fits?")
    if files is not None:
        head.append("files here?")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    need = needs(profile) if free is not None else {}
    for name in (n for n in MODES if n in profile.modes):
        m = profile.modes[name]
        vram = "n/a" if m.peak_vram_bytes is None else f"{format_bytes(m.peak_vram_bytes)} / {format_bytes(m.peak_vram_reserved_bytes)}"
        row = [f"`{m.mode}`", m.model, m.dtype, format_bytes(m.peak_ram_bytes), vram, _secs(m.seconds_per_face),
               f"{m.total_s:.1f}", weights_cell(m)]
        if m.stepped_down_to:
            row[3] = row[4] = f"not measured (ran {m.stepped_down_to})"
        elif m.failed:
            row[4 if profile.device.startswith("cuda") else 3] = f"more than {format_bytes(m.peak_bytes)} (out of memory)"
        if free is not None:
            ok, short = _fits(need[name], profile, free)
            row.append("yes" if ok else f"no ({format_bytes(short)} short)")
        if files is not None:
            lacking = files.modes.get(name, ())
            row.append(f"no: {enable_text(lacking)}" if lacking else "yes")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _task_cell(t: TaskRow, profile: Profile, free: "Free | None", files: FilesHere | None) -> str:
    """One (task, mode) of :func:`tasks_table`: peak · s/face · dtype (· fits) (· what is missing), or why not."""
    if t.refused is not None:  # what the engine answered (runner.refusal); the modes it names are TASKS'
        return f"refused: use {', '.join(TASKS[t.task].modes)} or auto"
    if t.failed is not None:
        return f"more than {format_bytes(t.peak_bytes)} (out of memory)"
    if t.ran_mode != t.mode:
        return f"not measured (ran {t.ran_mode})"
    peak = format_bytes(t.peak_ram_bytes)
    if t.peak_vram_reserved_bytes is not None:
        peak = f"{format_bytes(t.peak_vram_reserved_bytes)} VRAM, {peak} RAM"
    cell = f"{peak} · {_secs(t.seconds_per_face)} s/face · {t.dtype}" + (" · OpenVINO" if t.backend == "openvino" else "")
    if free is not None:
        cell += " · fits" if fits(t.peak_bytes, free.binding(profile.device).free_bytes) else " · does not fit now"
    lacking = files.tasks.get((t.task, t.mode), ()) if files is not None else ()
    return cell + (f" · {enable_text(lacking)}" if lacking else "")


def tasks_table(profile: Profile, free: "Free | None" = None, *, fits: bool = True, files: FilesHere | None = None) -> str:
    """GPEN's other tasks, a row per task, a column per mode ("" for none); ``fits``, ``files``: as in format_table."""
    if not profile.tasks:
        return ""
    free = _free_now(profile, free) if fits else None
    modes = [m for m in MODES if any(t.mode == m for t in profile.tasks)]
    lines = ["| task (generator, workload) | " + " | ".join(f"`{m}`" for m in modes) + " |", "|---|" + "---|" * len(modes)]
    for task in dict.fromkeys(t.task for t in profile.tasks):
        rows = {t.mode: t for t in profile.tasks if t.task == task}
        first = next(iter(rows.values()))
        cells = [_task_cell(rows[m], profile, free, files) if m in rows else "not measured" for m in modes]
        lines.append(f"| `{task}` ({first.model}; {first.workload}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def weights_cell(m: ModeProfile) -> str:
    """What the mode's networks ran with: the generator, and the detector when it ran random. A generator
    file is "the file", not "real": without a published checksum random weights under that name load the same."""
    note = unpinned_note(m.model)
    gen = SYNTHETIC_NOTE if m.weights == "synthetic" else f"{m.model} file" + (f" ({note})" if note else "")
    if "synthetic weights" in m.detector:
        gen += "; detector: random weights, fixed boxes"
    elif "given boxes" in m.detector:
        gen += "; no detector: fixed boxes"
    return gen


def chart_rows(profile: Profile) -> list[dict[str, Any]]:
    """One dict per measured mode for a bar chart: ``mode``, ``peak RAM MB``, ``peak VRAM MB``
    (reserved; None without CUDA). Megabytes are decimal, as in the tables."""
    rows = []
    for name in (n for n in MODES if n in profile.modes):
        m = profile.modes[name]
        v = m.peak_vram_reserved_bytes if m.peak_vram_reserved_bytes is not None else m.peak_vram_bytes
        rows.append({"mode": name, "peak RAM MB": round(m.peak_ram_bytes / 1e6, 1),
                     "peak VRAM MB": None if v is None else round(v / 1e6, 1)})
    return rows


def recommendation(profile: Profile, free: "Free | None" = None, files: FilesHere | None = None) -> str:
    """Which mode to use here (``auto``'s rule on the measured peaks and ``free`` or now) and what the next better
    one lacks; with ``files`` (:func:`files_here`), the download a mode still needs and what ``auto`` runs meanwhile."""
    free = _free_now(profile, free)
    bound = free.binding(profile.device)
    where, have = bound.name, bound.free_bytes
    ranked = ranking(profile, free)
    if not ranked.modes:
        return "no pasting mode was measured: run the check with low, balanced or quality"
    synth = " (measured with synthetic weights: the memory figures hold, the output would not be restored)" if profile.synthetic else ""
    if ranked.best is None:
        low = ranked.modes[-1]
        short = low.short_bytes if low.runnable else low.need_bytes
        return (
            f"even `{low.mode}` needs {format_bytes(short)} more {where} than you have free ({format_bytes(have)}): "
            f"close other programs, use smaller photos, or use a machine with more memory{_files_clause(low.mode, ranked, files)}{synth}"
        )
    best = profile.modes[ranked.best.mode]
    s = f"use `{best.mode}` (needs {format_bytes(ranked.best.need_bytes)} {where}, {format_bytes(have)} free"
    s += f", ~{best.seconds_per_face:.{1 if best.seconds_per_face >= 1 else 2}f} s per face)" if best.seconds_per_face is not None else ")"
    better = ranked.above(best.mode)
    if better:
        nxt = better[0]  # the next one up
        short = nxt.short_bytes if nxt.runnable else nxt.need_bytes
        s += f"; `{nxt.mode}` needs {format_bytes(short)} more {where} than you have free"
    else:
        s += "; every mode fits"
    return s + _files_clause(best.mode, ranked, files) + synth


def _files_clause(mode: str, ranked: Ranking, files: FilesHere | None) -> str:
    """'; `quality` is missing …: `python -m gpen_core download …` enables it; until then `auto` runs `balanced`',
    or '' when ``mode``'s files are all here (or were not checked)."""
    lacking = files.modes.get(mode, ()) if files is not None else ()
    if files is None or not lacking:
        return ""
    text = f"; `{mode}` is {enable_text(lacking)} enables it"
    fallback = next((m.mode for m in ranked.modes if m.runnable and m.fits and not files.modes.get(m.mode)), None)
    if fallback is not None:
        text += f"; until then `auto` runs `{fallback}`"
    return text


_WEIGHTS = {"real": "real", "synthetic": "random, released architecture", "override": "model-config override"}


def _fine(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.{3 if x < 1 else 2}f}"


def _timing_cells(r: BackendSpeed | NetworkSpeed) -> list[str]:
    """torch s, OpenVINO s (precision), faster (by how much), conversion: the cells both tables share."""
    ov = _fine(r.openvino_s) + (f" ({r.precision})" if r.precision else "")
    if r.faster is None:
        faster = "n/a"
    else:
        lo, hi = sorted((r.torch_s or 0.0, r.openvino_s or 0.0))
        faster = f"{'OpenVINO' if r.faster == 'openvino' else 'torch'} {hi / lo:.2f}×" if lo > 0 else r.faster
    conv = "n/a" if r.error else "from the cache" if r.convert_s is None else f"{r.convert_s:.1f} s (first use; cached)"
    return [_fine(r.torch_s), ov, faster, conv]


def network_label(network: str) -> str:
    """"parsenet" → "ParseNet", "retinaface-resnet50" → "RetinaFace resnet50" (the speed file's names, for people)."""
    return "ParseNet" if network == "parsenet" else network.replace("retinaface-", "RetinaFace ")


def _timing_table(first: list[str], unit: str, rows: list[tuple[list[str], BackendSpeed | NetworkSpeed]]) -> list[str]:
    """A Markdown table: each row's ``first`` cells, then its timings (seconds per ``unit``), weights, recorded."""
    head = [*first, f"torch s / {unit}", f"OpenVINO s / {unit}", "faster", "OpenVINO conversion", "weights", "recorded"]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join([*cells, *_timing_cells(r), _WEIGHTS.get(r.weights, r.weights),
                                       "yes" if r.recorded else "no"]) + " |" for cells, r in rows]


def auto_backends(profile: Profile, models_dir: str | os.PathLike[str] | None = None) -> dict[str, "BackendChoice"]:
    """mode → the generator's runtime that ``--backend auto`` picks now for this profile's modes, from the
    speed file in the models folder (what a request reads; later records count too)."""
    from gpen_core.runtimes.openvino import generator as ov_backend
    from gpen_core.runtimes.openvino.choice import BackendChoice

    b = profile.backends
    if not profile.device.startswith("cpu"):
        return {m: BackendChoice("torch", "GPU: torch") for m in profile.modes}
    if b is None:
        return {}
    return {mode: ov_backend.choose_mode_backend(MODES[mode], "auto", size, dtype, models_dir=models_dir, device="cpu")
            for mode, (size, dtype) in b.uses.items()}


def auto_networks(
    profile: Profile, models_dir: str | os.PathLike[str] | None = None
) -> dict[tuple[str, int, str], tuple[str, str, tuple[str, ...]]]:
    """(network, input size, dtype) → (backend, why, modes) that ``--backend auto`` picks now for the parser
    and detector of this profile's modes (as :mod:`gpen_core.engine.model_cache` asks; empty on a GPU check)."""
    from gpen_core.hwcheck.backends import network_uses
    from gpen_core.runtimes.openvino import generator as ov_backend

    if profile.backends is None or not profile.device.startswith("cpu"):
        return {}
    out = {}
    for (net, size, dtype), ms in sorted(network_uses(MODES[name] for name in profile.modes).items()):
        choice = ov_backend.choose_backend("auto", size, dtype, network=net, models_dir=models_dir, device="cpu")
        # A mode the engine keeps to torch where this network is on OpenVINO: its generator line says why.
        ms = [m for m in ms if choice.runtime == ov_backend.choose_mode_backend(
            MODES[m], "auto", size, dtype, network=net, models_dir=models_dir, device="cpu").runtime]
        why = choice.why if net == "parsenet" else choice.why.replace(" per face", " per detection")
        if ms:
            out[(net, size, dtype)] = (choice.runtime, why, tuple(ms))
    return out


def backends_section(profile: Profile, models_dir: str | os.PathLike[str] | None = None) -> str:
    """Markdown: the torch-vs-OpenVINO tables (the generator per face; the parser and detectors per call),
    or why they did not run, and what ``auto`` uses per mode and for the parser and detector."""
    b = profile.backends
    if b is None:
        return ""
    lines = ["**CPU backends** (generator seconds per face; median of the timed calls after an untimed warm-up, "
             "torch and OpenVINO interleaved; the conversion is timed on its own)"]
    if b.skipped:
        lines.append(f"Not compared in this check: {b.skipped}.")
    if b.rows:
        if b.skipped:
            lines.append("Earlier measurements on this machine (" + ", ".join(sorted({r.measured_at for r in b.rows})) + "):")
        lines += _timing_table(["face", "dtype", "modes"], "face",
                               [([f"{r.size} px", r.dtype, ", ".join(f"`{m}`" for m in r.modes)], r) for r in b.rows])
        lines += [""] + [f"- {r.size} px {r.dtype}: {r.note}" for r in b.rows if r.note]
    if b.networks:
        lines += ["", "**Parser and detectors** (seconds per call: ParseNet one face's mask, RetinaFace one detection "
                  "on a photo of that longest side; timed the same way)"]
        rows = [([network_label(r.network), f"{r.size} px" + ("" if r.network == "parsenet" else " (longest side)"),
                  r.dtype], r) for r in b.networks]
        lines += _timing_table(["network", "input", "dtype"], "call", rows)
        lines += [""] + [f"- {network_label(r.network)} {r.size} px {r.dtype}: {r.note}" for r in b.networks if r.note]
    if b.speed_file and (b.rows or b.networks):
        lines.append(f"Recorded in {b.speed_file} (read by `--backend auto`).")
    on = {"openvino": "OpenVINO", "torch": "torch"}
    chosen = auto_backends(profile, models_dir)
    if chosen:
        lines += ["", "Backend `auto` (the default) now runs: " + "; ".join(
            f"`{m}` → {on[c.runtime]} ({c.why})" for m, c in chosen.items())]
    nets = auto_networks(profile, models_dir)
    if nets:
        lines += ["", "For the parser and detector `auto` now runs: " + "; ".join(
            f"{network_label(n)} {s} px {d} ({', '.join(f'`{m}`' for m in ms)}) → {on.get(be, be)} ({why})"
            for (n, s, d), (be, why, ms) in nets.items())]
    return "\n".join(lines)


def format_report(profile: Profile, free: "Free | None" = None, models_dir: str | os.PathLike[str] | None = None) -> str:
    """Machine facts, the table, notes, the backend comparison and the recommendation: what the CLI prints.
    Each mode and task it rates says which of its files the models folder (``models_dir``) lacks now."""
    files = files_here(profile, models_dir)
    lines = [f"Hardware check ({profile.created}): {machine_line(profile)}", "",
             format_table(profile, free, files=files), ""]
    lines += [f"note: {n}" for n in profile.notes]
    where: dict[str, list[str]] = {}  # each distinct note once, with the modes and task rows it concerns
    for row, notes in [*((m.mode, (*m.notes, *(n for r in m.runs for n in r.notes))) for m in profile.modes.values()),
                       *((f"{t.task} in {t.mode}", t.notes) for t in profile.tasks)]:
        for n in notes:
            if n not in profile.notes and row not in where.setdefault(n, []):
                where[n].append(row)
    lines += [f"note ({', '.join(ms)}): {n}" for n, ms in where.items()]
    if profile.tasks:
        lines += ["", "GPEN's other tasks (peak above idle · seconds per face · dtype · fits now?):", "",
                  tasks_table(profile, free, files=files)]
    section = backends_section(profile, models_dir)
    if section:
        lines += ["", section]
    lines += ["", "Recommendation: " + recommendation(profile, free, files)]
    return "\n".join(lines)
