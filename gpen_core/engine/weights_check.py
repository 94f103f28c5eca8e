"""Whether a request's weights are here, before anything loads: ``auto`` passes over a mode whose
weights are missing (:func:`weights_present`), and a request that lacks several files names them all
at once (:func:`require`). Read off a :class:`~gpen_core.engine.network_loads.LoadSource` (the model
cache). Nothing heavy at import.
"""

from __future__ import annotations

from gpen_core.engine.network_loads import LoadSource
from gpen_core.modes import MemoryMode, generator_name
from gpen_core.options import DETECTOR_WEIGHTS, RestoreOptions


def weights_present(src: LoadSource, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> bool:
    """Whether ``mode`` can run without a download (for ``auto``)."""
    if src.synthetic_weights:
        return True
    if opts.model is None and not usable(src, generator_name(mode, opts.task)):
        return False
    if opts.aligned or boxes_given:
        return True
    return usable(src, DETECTOR_WEIGHTS[opts.detector or mode.detector])


def require(src: LoadSource, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> None:
    """Raise one WeightsError naming every registry file this request loads that is not
    here (generator, detector, upscaler), so a newcomer fixes them all in one go instead of
    meeting them one restore at a time. Nothing to check when downloads are allowed (each is
    fetched) or with synthetic weights; a single missing file is left to ``weights.resolve``."""
    from gpen_core.weights import lookup as weights
    from gpen_core.weights.missing import missing_error

    if src.allow_download or src.synthetic_weights:
        return
    names = [generator_name(mode, opts.task, opts.model)]
    if not (opts.aligned or boxes_given):
        names.append(DETECTOR_WEIGHTS[opts.detector or mode.detector])
    if opts.upscale > 1 and mode.paste:
        names.append(opts.upscaler or f"realesrnet_x{opts.upscale}")
    absent = [n for n in names if n in weights.REGISTRY and weights.locate(n, models_dir=src.models_dir) is None]
    if len(absent) > 1:
        folder = src.models_dir if src.models_dir is not None else weights.models_dir()
        raise missing_error(absent, folder, "downloads are off for this call")


def usable(src: LoadSource, name: str) -> bool:
    """Present and verified (size and sha256): a corrupt file counts as missing, as in
    gpen_core.presentation.readiness (the weights panel), so auto passes over it instead of failing on it."""
    from gpen_core.weights import lookup as weights
    from gpen_core.errors import WeightsError

    path = weights.locate(name, models_dir=src.models_dir)
    if path is None:
        return False
    spec = weights.REGISTRY.get(name)
    if spec is None:
        return True
    try:
        weights.verify(path, spec, src.models_dir)  # hashed once per process while unchanged
    except WeightsError:
        return False
    return True
