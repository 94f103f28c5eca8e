"""Which checkpoint a user of a server may name (:func:`checked_model`): a registry name or a file inside the models
folder; any other path gets one message that reveals nothing about it, unless ``--allow-any-model-path``."""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpen_core.errors import InputError
from gpen_core.weights.registry import REGISTRY, models_dir, models_folder, modelscope_cache_root, registry_name

CHECKPOINT_SUFFIXES = (".pth", ".pt")


def generator_names() -> list[str]:
    return [n for n, s in REGISTRY.items() if s.kind == "generator"]


def checked_model(name: str | None, *, any_path: bool = False, folder: Path | None = None) -> str | None:
    """``name`` as the engine takes it: None (the mode's choice), a registry name (in the registry's spelling), or
    an existing ``.pth``/``.pt`` file inside ``folder`` (default: the models folder), named bare or by path;
    anything else raises :class:`InputError` without echoing the value."""
    if name is None:
        return None
    known = registry_name(name)
    if known is not None or any_path:
        return known or name
    folder = Path(os.path.abspath(folder or models_dir()))
    given = Path(name)
    candidate = Path(os.path.normpath(given if given.is_absolute() else folder / given))
    if folder not in candidate.parents or candidate.suffix.lower() not in CHECKPOINT_SUFFIXES:
        raise InputError(f"The Generator field takes a registry name ({', '.join(generator_names())}) or the file name "
                         "of a .pth/.pt checkpoint in the models folder; other paths on the server are not accepted "
                         "(on your own machine, start the app with --allow-any-model-path).")
    if not candidate.is_file():
        raise InputError(f"There is no checkpoint {candidate.relative_to(folder)} in the models folder; "
                         "put the file there or pick a registry name.")
    # A link in the models folder may point anywhere on the server (evil.pth -> /etc/passwd):
    # only what really lies inside the folder may be named.
    if Path(os.path.realpath(folder)) not in Path(os.path.realpath(candidate)).parents:
        raise InputError(f"{candidate.relative_to(folder)} in the models folder is a link to a file outside it, and "
                         "links out of the models folder are not followed for users of a server. Copy the checkpoint "
                         "into the models folder, or pick a registry name.")
    return str(candidate)


MODELS_ROLE = "<models folder>"  # what a shared server's visitors read for its models folder
# An absolute path not under a folder we can name by its role: shown as "…/<last part>".
# Not after ":", "/", "." or a word character, so URLs (https://host/path) stay whole; nor a slash with no name
# after it, so "x2.pth / x4.pth" (either) keeps its word.
_ABS_PATH = re.compile(r"(?<![\w:/.~>])/(?![\s;,()'\"<>]|$)(?:[^\s/;,()'\"<>]+/)*([^\s/;,()'\"<>]*)")


def models_folder_shown(public: bool, models_dir: str | os.PathLike[str] | None = None) -> str:
    """The models folder as a page shows it: by its role on a shared server (``public``), as :func:`public_message`
    names it, else its path."""
    return MODELS_ROLE if public else str(models_folder(models_dir))


def public_message(message: str, *, models_dir: str | os.PathLike[str] | None = None) -> str:
    """``message`` as anonymous users of a server may see it: the models folder and the ModelScope cache named by
    their role (``<models folder>``, ``<ModelScope cache>``), the home folder ``~``, any other absolute path cut
    to its last part; registry names, file names, URLs and the fix as they are."""
    roles = []
    for path, role in ((models_folder(models_dir), MODELS_ROLE), (modelscope_cache_root(), "<ModelScope cache>")):
        for form in {os.path.abspath(path), os.path.realpath(path)}:
            roles.append((form.rstrip("/"), role))
    home = os.path.expanduser("~").rstrip("/")
    out = message
    for form, role in sorted(roles, key=lambda r: -len(r[0])):  # the deepest folder first
        if form and form != "/":
            out = re.sub(re.escape(form) + r"(?=/|\b|$)", role, out)
    if home and home != "/":
        out = re.sub(re.escape(home) + r"(?=/|\b|$)", "~", out)
    return _ABS_PATH.sub(lambda m: "…/" + m.group(1) if m.group(1) else "…", out)
