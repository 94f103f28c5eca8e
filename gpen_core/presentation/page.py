"""The page's fixed parts: its style sheet and the texts that do not depend on a result."""

from __future__ import annotations

TITLE = "GPEN face restoration"
INTRO = ("# GPEN face restoration\n"
         "Restores the faces in old, blurry or compressed photos with GPEN (Yang et al., CVPR 2021). "
         "Every result comes with what it cost: peak RAM, VRAM and time, measured for that request.")
PLACEHOLDER = "*The measured figures of each restore appear here.*"

# Gradio's Markdown lets a word break anywhere, which shrinks a table column to one letter
# ("s e c o n d s" at 1366 px): in tables a word breaks only when it alone is wider than the
# column. Errors reach the page as plain text (API clients read the same text as is); ``pre-line``
# keeps their line breaks in the pop-up.
CSS = """
#mode-radio .wrap { flex-direction: column; align-items: stretch; }
#mode-radio label { width: 100%; }
#metrics table { font-size: 0.92em; }
#metrics td:first-child { white-space: nowrap; }
#weights-box { padding: 12px 14px; }
#weights-box .prose, #weights-box .md { overflow-wrap: anywhere; }
#weights-box button { margin-top: 6px; }
#profile-report { min-height: 3em; }
.toast-message-text { white-space: pre-line; }
.prose table, .md table { overflow-wrap: break-word; word-break: normal; }
"""
