"""The error hierarchy. Every message says what happened and how to fix it.

Only the edges (the Gradio handlers, the CLI) translate these into ``gr.Error``
or exit codes; the library raises and never prints.
"""

from __future__ import annotations


class GPENError(Exception):
    """Base class: anything the user can act on."""

    exit_code = 1


class InputError(GPENError):
    """The input (image file, argument, option) cannot be used as given."""

    exit_code = 2


class WeightsError(GPENError):
    """A checkpoint is missing, corrupt, or not the network it should be."""

    exit_code = 3


class ResourceError(GPENError):
    """Not enough memory (RAM or VRAM) even in the lightest mode, or the server is busy."""

    exit_code = 4
