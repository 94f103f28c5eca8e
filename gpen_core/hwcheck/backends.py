"""The hardware check's CPU backend comparison, recorded for ``--backend auto``: each generator, parser and detector
the measured modes use, loaded on torch and on OpenVINO as a request loads it (a conversion timed on its own), warmed
up, then called ``runs`` times each, interleaved so a change in load hits both alike; the medians are recorded."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpen_core.modes import MODES, MemoryMode
from gpen_core.options import RestoreOptions
from gpen_core.weights.lookup import REGISTRY
from gpen_core.engine.profile_records import BackendCheck, BackendSpeed, NetworkSpeed
from gpen_core.progress import Progress

if TYPE_CHECKING:
    from gpen_core.networks.arch import GPENConfig

RUNS = 3  # timed calls per backend after the warm-up (the median is kept)


def mode_uses(modes: Sequence[MemoryMode], configs: dict[str, "GPENConfig"]) -> dict[str, tuple[int, str]]:
    """mode name → (face size, torch dtype) of its generator on this CPU (the engine's plan)."""
    from gpen_core.networks.plan import choose_plan

    return {m.name: (int((configs.get(m.model) or REGISTRY[m.model].arch).size),  # type: ignore[union-attr]
                     choose_plan("cpu", m.cpu_dtype)[0].dtype) for m in modes}


def network_uses(modes: Iterable[MemoryMode]) -> dict[tuple[str, int, str], list[str]]:
    """(network, input size, dtype) → the names of ``modes`` that run it on this CPU: their parser and detector
    (as :mod:`gpen_core.engine.model_cache` loads them), in the modes' order."""
    from gpen_core.faces.parse import choose_parse_dtype
    from gpen_core.runtimes.openvino.detector import DETECT_SIDE

    uses: dict[tuple[str, int, str], list[str]] = {}
    for m in modes:
        if m.paste and m.parsing:
            uses.setdefault(("parsenet", m.parse_input, choose_parse_dtype("cpu", m.cpu_dtype)), []).append(m.name)
        uses.setdefault((f"retinaface-{m.detector}", DETECT_SIDE, "float32"), []).append(m.name)
    return uses


def plan(
    modes: Sequence[MemoryMode],
    specs: Sequence[dict[str, Any]],
    configs: dict[str, "GPENConfig"],
    device: str,
    want: bool | None,
    models_dir: str | None,
) -> tuple[dict[str, Any] | None, BackendCheck]:
    """(the JSON-able spec :func:`measure` runs, or None when nothing is to run; the check so far).
    ``specs``: the runner's per-mode specs (which weights the engine loads). ``want``: False skips; None
    compares the released generators only (skips with a model-config override); True always."""
    from gpen_core.runtimes.openvino import generator as ov_backend

    if not device.startswith("cpu"):
        return None, BackendCheck(skipped=f"the OpenVINO backend runs on the CPU only; this check measured {device}")
    uses = mode_uses(modes, configs)
    check = BackendCheck(skipped=None, uses=uses, openvino=ov_backend.openvino_version())
    if want is False:
        return None, replace(check, skipped="asked not to (--no-backends)")
    if want is None and configs:
        return None, replace(check, skipped="model-config overrides are not the released generators (run_profile(backends=True) compares them)")
    if check.openvino is None:  # cheap: package metadata; the plugin itself is tried in the worker
        return None, replace(check, skipped=ov_backend.unavailable_reason() or "OpenVINO is not installed")
    released = {int(r.arch.size) for r in REGISTRY.values() if r.arch is not None}
    pairs: dict[tuple[int, str], dict[str, Any]] = {}
    for m, spec in zip(modes, specs):
        key = uses[m.name]
        if key in pairs:
            pairs[key]["modes"].append(m.name)
            continue
        size = key[0]
        pair: dict[str, Any] = {"size": size, "dtype": key[1], "modes": [m.name], "model": m.model}
        if m.model in configs:
            pair.update(path=spec["model_opt"], weights="override",
                        source=f"hardware check: model-config override {configs[m.model]} (not a released architecture)")
            if size in released:
                pair["no_record"] = f"a model-config override of {size} px would stand in for the released {size} px generator"
        elif spec["kind"] == "real":
            pair.update(path=spec["model_opt"], weights="real", source=f"hardware check: {m.model}, real weights")
        else:  # the engine's synthetic generator: random weights, same architecture, same time
            pair.update(path=f"synthetic:{m.model}", weights="synthetic",
                        source=f"hardware check: random weights of the released {m.model} architecture "
                        "(time does not depend on the values)")
        pairs[key] = pair
    for pair in pairs.values():  # a mode's thread cap holds when every mode sharing the generator has one (pipeline.py)
        caps = [m.threads for m in modes if m.name in pair["modes"]]
        pair["threads"] = None if None in caps else max(caps)
    spec = {"mode": "backends", "pairs": list(pairs.values()), "runs": RUNS,
            "models_dir": models_dir, "threads": specs[0].get("threads") if specs else None}
    if not configs:  # the parser and detectors too, for auto; overrides are experiments: generator only
        from gpen_core.engine.network_loads import PARSER_WEIGHTS
        from gpen_core.runtimes.openvino.parser import check_pairs

        nets = network_uses(modes)
        spec["parse"] = check_pairs([(s, d) for n, s, d in nets if n == "parsenet"], models_dir, PARSER_WEIGHTS)
        spec["detect"] = sorted({m.detector for m in modes})
    return spec, check


def _engine_generator(pair: dict[str, Any], backend: str, models_dir: Path, progress: Progress | None) -> tuple[Any, Any]:
    """(forward, the torch dtype it takes) of ``pair``'s generator on ``backend``, loaded as a request loads it
    (:meth:`gpen_core.engine.model_cache.ModelCache.generator`); a cache of its own, as both backends stay loaded."""
    from gpen_core.engine.model_cache import ModelCache

    synthetic = str(pair["path"]).startswith("synthetic:")  # the released architecture with random weights
    mode = MODES[pair["modes"][0]]
    opts = RestoreOptions(mode=mode.name, model=None if synthetic else str(pair["path"]), backend=backend)
    cache = ModelCache(models_dir, synthetic_weights=synthetic)
    g = cache.generator(mode, opts, "cpu", progress)
    if g.size != pair["size"] or g.runtime != backend:
        raise RuntimeError(f"the engine loaded a {g.size} px generator on {g.runtime} "
                           f"for the {pair['size']} px {backend} pair")
    return g.forward, g.dtype


def _engine_detector(network: str, runtime: str, models_dir: Path, threads: int | None) -> Any:
    """The ``network`` detector on ``runtime``, loaded as a request loads it (the real weights when in
    ``models_dir``, else random ones); a cache of its own; OpenVINO on ``threads``."""
    from gpen_core.engine.model_cache import ModelCache

    cache = ModelCache(models_dir, synthetic_weights=True, openvino_threads=threads)
    detector = cache.detector(network, "cpu", RestoreOptions(backend=runtime))
    if detector.backend != runtime:
        raise RuntimeError(f"the engine loaded the {network} detector on {detector.backend}, not {runtime}")
    return detector


def _engine_parser(pair: dict[str, Any], runtime: str, models_dir: Path, threads: int | None, say: Progress) -> Any:
    """``pair``'s parser (input size, dtype) on ``runtime``, as a mode parsing at that size and dtype loads it;
    OpenVINO on ``threads``, else this process's torch threads."""
    import torch

    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.faces.parse import choose_parse_dtype

    mode = next((m for m in MODES.values() if m.parsing and m.parse_input == pair["size"]
                 and choose_parse_dtype("cpu", m.cpu_dtype) == pair["dtype"]), None)
    if mode is None:
        raise RuntimeError(f"no mode parses at {pair['size']} px {pair['dtype']} on this CPU")
    cache = ModelCache(models_dir, synthetic_weights=True, openvino_threads=threads or torch.get_num_threads())
    masker = cache.parser(mode, "cpu", [], RestoreOptions(mode=mode.name, backend=runtime),
                          lambda f, m: say(0.05 + 0.6 * f, m))
    if masker is None or masker.backend != runtime:
        raise RuntimeError(f"the engine loaded the {pair['size']} px parser on {getattr(masker, 'backend', None)}, not {runtime}")
    return masker


def _measure_pair(pair: dict[str, Any], runs: int, models_dir: Path, base_threads: int | None, say: Progress) -> dict[str, Any]:
    """``pair``'s generator on torch and on OpenVINO, timed as the parser and detectors are
    (:func:`gpen_core.runtimes.openvino.choice.time_interleaved`); the precision and the conversion's seconds."""
    import torch

    from gpen_core.engine.threads import mode_threads
    from gpen_core.runtimes.openvino import generator as ov_backend
    from gpen_core.runtimes.openvino.choice import time_interleaved, torch_threads
    from gpen_core.networks.plan import choose_plan

    size, dtype = pair["size"], pair["dtype"]
    label = f"backends: {size} px {dtype}"
    precision, precision_note = ov_backend.choose_precision(choose_plan("cpu", dtype)[0].dtype)
    threads = mode_threads(base_threads or torch.get_num_threads(), pair.get("threads"))
    with torch_threads(threads):
        say(0.0, f"{label}: loading the torch generator")
        torch_fwd, torch_dtype = _engine_generator(pair, "torch", models_dir, None)
        say(0.05, f"{label}: OpenVINO {precision}")
        t = time.perf_counter()
        ov_fwd, ov_dtype = _engine_generator(pair, "openvino", models_dir, lambda f, m: say(0.05 + 0.6 * min(1.0, f), f"{label}: {m}"))
        ov_load_s = time.perf_counter() - t - (ov_fwd.convert_s or 0.0)
        x = torch.rand(1, 3, size, size) * 2 - 1  # the values do not change the time
        x_torch, x_ov = x.to(torch_dtype), x.to(ov_dtype)  # what the engine hands each backend
        say(0.7, f"{label}: warm-up calls")
        timed = time_interleaved({"torch": lambda: torch_fwd(x_torch), "openvino": lambda: ov_fwd(x_ov)}, runs,
                                 lambda r: say(0.7 + 0.3 * r / runs, f"{label}: timed call {r + 1} of {runs} "
                                               "(torch and OpenVINO, interleaved)"))
    convert_s = None if ov_fwd.convert_s is None else round(ov_fwd.convert_s, 2)
    return {**timed, "precision": precision, "convert_s": convert_s, "load_s": round(ov_load_s, 2), "threads": threads,
            "note": precision_note}


def measure(spec: dict[str, Any], report: Progress) -> dict[str, Any]:
    """Run the comparison ``spec`` describes in this process: {"skipped": why or None, "rows": [...], "parse":
    [...], "detect": [...]}. A pair that fails (a conversion refused, memory) is a row with its ``error``."""
    from gpen_core.runtimes.openvino import generator as ov_backend
    from gpen_core.runtimes.openvino.detector import check_row as detect_row
    from gpen_core.runtimes.openvino.parser import check_row as parse_row
    from gpen_core.weights.lookup import models_dir as default_models_dir

    why = ov_backend.unavailable_reason()
    if why:
        return {"skipped": why, "rows": []}
    folder = Path(spec["models_dir"]) if spec.get("models_dir") else default_models_dir()
    pairs, parse, detect = spec["pairs"], spec.get("parse", []), spec.get("detect", [])
    threads, runs = spec.get("threads"), int(spec["runs"])
    steps = len(pairs) + len(parse) + len(detect)  # one unit each: the check's time left counts them (.eta.Eta)

    def step(i: int) -> Progress:
        return lambda f, d: report(min(1.0, (i + f) / steps), d)

    rows = []
    for i, pair in enumerate(pairs):
        row: dict[str, Any] = {"size": pair["size"], "dtype": pair["dtype"], "modes": pair["modes"], "model": pair["model"],
                               "weights": pair["weights"], "runs": spec["runs"],
                               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        try:
            row.update(_measure_pair(pair, runs, folder, threads, step(i)))
        except Exception as exc:  # one pair failing must not cost the others (or the memory check)
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    # The parser's and detectors' rows are recorded by their runtimes' check_row, apart from finish()'s rows.
    first = len(pairs)
    parse_rows = [parse_row(pair, folder, threads, runs, step(first + j),
                            partial(_engine_parser, pair, models_dir=folder, threads=threads, say=step(first + j)))
                  for j, pair in enumerate(parse)]
    first += len(parse)
    detect_rows = [detect_row(n, partial(_engine_detector, n, models_dir=folder, threads=threads), folder, threads,
                              runs, step(first + j)) for j, n in enumerate(detect)]
    return {"skipped": None, "rows": rows, "parse": parse_rows, "detect": detect_rows}


def finish(
    check: BackendCheck, spec: dict[str, Any], result: dict[str, Any], models_dir: str | None
) -> BackendCheck:
    """The measured rows as BackendSpeed records, each recordable pair written to the speed file ``auto`` reads."""
    from gpen_core.runtimes.openvino import generator as ov_backend

    if result.get("skipped"):
        return replace(check, skipped=str(result["skipped"]))
    by_key = {(p["size"], p["dtype"]): p for p in spec["pairs"]}
    rows: list[BackendSpeed] = []
    speed_file = None
    for r in result["rows"]:
        pair = by_key[(r["size"], r["dtype"])]
        recorded, note = False, r.get("note")
        if r.get("error"):
            note = f"not measured: {r['error']}"
        elif pair.get("no_record"):
            note = "; ".join(n for n in (note, f"not recorded: {pair['no_record']}") if n)
        else:
            speed_file = str(ov_backend.record_speed(r["size"], r["dtype"], r["torch_s"], r["openvino_s"],
                                                     models_dir=models_dir, source=pair["source"]))
            recorded = True
        rows.append(BackendSpeed.from_dict({**r, "recorded": recorded, "note": note}))
    networks = network_rows(spec, result)
    speed_file = speed_file or next((f for f in (r.get("speed_file") for r in (*result.get("parse", ()), *result.get("detect", ())))
                                     if f), None)
    return replace(check, rows=tuple(rows), speed_file=speed_file, networks=networks)


def network_rows(spec: dict[str, Any], result: dict[str, Any]) -> tuple[NetworkSpeed, ...]:
    """The parser's and detectors' rows of :func:`measure` (already recorded by :mod:`gpen_core.runtimes.openvino.parser` /
    :mod:`gpen_core.runtimes.openvino.detector`: a row with ``speed_file`` was) as :class:`NetworkSpeed` records."""
    from gpen_core.runtimes.openvino.detector import DETECT_SIDE

    real = {(p["size"], p["dtype"]): p.get("weights") is not None for p in spec.get("parse", ())}
    out: list[NetworkSpeed] = []
    for r, network in [(r, "parsenet") for r in result.get("parse", ())] + [(r, str(r["network"])) for r in result.get("detect", ())]:
        size, dtype = int(r.get("size", DETECT_SIDE)), str(r.get("dtype", "float32"))
        weights = r.get("weights") if network != "parsenet" else ("real" if real.get((size, dtype)) else "synthetic")
        note = f"not measured: {r['error']}" if r.get("error") else r.get("note")
        out.append(NetworkSpeed(
            network=network, size=size, dtype=dtype, weights=str(weights or "synthetic"),
            runs=int(r.get("runs", spec["runs"])),
            torch_s=r.get("torch_s"), openvino_s=r.get("openvino_s"), torch_times=tuple(r.get("torch_times", ())),
            openvino_times=tuple(r.get("openvino_times", ())),
            precision=str(r.get("precision") or ("f32" if network != "parsenet" else "")),  # ov_detect compiles f32
            convert_s=r.get("convert_s"), recorded=bool(r.get("speed_file")), note=note, error=r.get("error")))
    return tuple(out)
