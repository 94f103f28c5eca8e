"""The page's fixed parts: its style sheet and the texts that do not depend on a result."""

from __future__ import annotations

import json

from gpen_app.messages import INTERNAL, TITLES

TITLE = "GPEN face restoration"
INTRO = ("# GPEN face restoration\n"
         "Restores the faces in old, blurry or compressed photos with GPEN (Yang et al., CVPR 2021). "
         "Every result comes with what it cost: peak RAM, VRAM and time, measured for that request.")
PLACEHOLDER = "*The measured figures of each restore appear here.*"

# The before/after's height: at the page's top the slider and the measured panel's first rows fit 1366x768.
SLIDER_MAX_HEIGHT = 420


def scroll_js(elem_id: str) -> str:
    """JS statements that scroll the element ``elem_id`` to the top of the window unless it is all in view."""
    return (f"const e = document.getElementById('{elem_id}'); if (e) {{ const r = e.getBoundingClientRect(); "
            "if (r.top < 0 || r.bottom > window.innerHeight) e.scrollIntoView({block: 'start'}); }")


_SCROLL = scroll_js("slider")
SHOW_RESULT = "() => { " + _SCROLL + " }"
SHOW_VIDEO_RESULT = "() => { " + scroll_js("video-out") + " }"
# The press that starts a new restore also closes the pop-ups of earlier ones (a refusal stayed over the next result).
CLOSE_TOASTS = "document.querySelectorAll('[data-testid=toast-close]').forEach(b => b.click());"
# Its input is the last record: whether a result was on screen goes to a hidden box, for a failure's panel to say.
CLEAR_AND_SHOW_RESULT = ("(record) => { " + CLOSE_TOASTS + " " + _SCROLL + " return [null, null, "
                         "'*Restoring… the measured figures of this request will appear here.*', [], null, "
                         "!!record && typeof record === 'object' && Object.keys(record).length > 0]; }")

# Gradio's Markdown breaks words anywhere, shrinking a table column to one letter: in tables a word breaks only when
# wider than the column. ``pre-line`` keeps an error's line breaks in the pop-up. On a phone the controls column
# dissolves into the row (display: contents): the photo and the Restore button first, then the result.
CSS = """
#mode-radio .wrap { flex-direction: column; align-items: stretch; }
#mode-radio label { width: 100%; }
#metrics table { font-size: 0.92em; }
#metrics td:first-child { white-space: nowrap; }
#weights-box { padding: 12px 14px; gap: 4px; }
#weights-box .prose, #weights-box .md { overflow-wrap: anywhere; }
#weights-box button { margin-top: 6px; }
#profile-report { min-height: 3em; }
.toast-message-text { white-space: pre-line; }
.prose table, .md table { overflow-wrap: break-word; word-break: normal; }
@media (max-width: 760px) {
  #restore-row, #video-row { flex-direction: column; flex-wrap: nowrap; }
  #controls, #video-controls { display: contents; }
  #controls > *, #video-controls > * { order: 3; }
  #controls > #photo, #controls > #restore-button, #controls > #restore-stop { order: 1; }
  #video-controls > #video-in, #video-controls > :has(> #video-mode-radio), #video-controls > #video-options,
  #video-controls > #video-buttons { order: 1; }  /* the radio sits in Gradio's .form wrapper */
  #results, #video-results { order: 2; }
  #download-col { order: -1; }
}
"""

# A video dropped or chosen on the photo tab (Gradio's "Invalid file type" does not say where videos go): run at
# page load, capture listeners stop the file before Gradio's upload and say where it belongs.
# The titles our pop-ups' texts start with (messages.shown_error; a clip's Stop, an Info, says "Stopped: ..."), which
# the page shows as the pop-up's heading (PAGE_JS).
POPUP_TITLES = (*dict.fromkeys(t for _, t in TITLES), INTERNAL)
VIDEO_ON_PHOTO_TAB = "This is a video: use the Video tab (at the top of the page) to restore it."
PAGE_JS = """() => {
  const video = f => !!f && (/^video\\//.test(f.type || '') || /\\.(mp4|m4v|mov|mkv|webm|avi|mpe?g|ts|flv|ogv|wmv|3gp)$/i.test(f.name || ''));
  const show = () => {
    let box = document.getElementById('video-on-photo');
    if (!box) {
      box = document.createElement('div');
      box.id = 'video-on-photo';
      box.setAttribute('role', 'alert');
      box.style.cssText = 'position:fixed;top:16px;right:16px;z-index:1000;max-width:420px;padding:12px 16px;font-family:var(--font);' +
        'background:var(--background-fill-primary,#fff);border:1px solid var(--border-color-primary,#ccc);' +
        'border-left:4px solid var(--color-accent,#f97316);border-radius:8px;box-shadow:0 4px 12px rgba(0,0,0,.15)';
      const text = document.createElement('p');
      text.textContent = %s;
      text.style.margin = '0 0 8px 0';
      const go = document.createElement('button');
      go.textContent = 'Open the Video tab';
      go.className = 'lg secondary';
      go.style.cssText = 'padding:4px 10px;border:1px solid var(--border-color-primary,#ccc);border-radius:6px;cursor:pointer';
      go.onclick = () => { const tab = [...document.querySelectorAll('[role=tab]')].find(t => t.innerText.trim() === 'Video');
                           if (tab) tab.click(); box.remove(); };
      box.append(text, go);
      document.body.append(box);
    }
    clearTimeout(box.timer);
    box.timer = setTimeout(() => box.remove(), 12000);
  };
  const guard = (event, files) => {
    const photo = event.target && event.target.closest && event.target.closest('#photo');
    if (!photo || ![...(files || [])].some(video)) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    if (event.type === 'change') event.target.value = '';
    show();
  };
  document.addEventListener('drop', e => guard(e, e.dataTransfer && e.dataTransfer.files), true);
  document.addEventListener('change', e => guard(e, e.target.files), true);
  // A refused upload (a visitor's share on a shared server) pops up as "HTTP 429: <our words>" (Gradio's client
  // puts the status first): the words alone are the message.
  const bare = () => document.querySelectorAll('[data-testid=toast-text]').forEach(el => {
    const t = el.firstChild;
    if (t && t.nodeType === 3 && /^HTTP \\d{3}: /.test(t.data)) t.data = t.data.replace(/^HTTP \\d{3}: /, ''); });
  // Gradio heads a pop-up with its level ("Error", "Info"), never the title the server sent. Ours start with it
  // ("Cannot use this input. Upload a photo first."): where every message of a pop-up has the same, it moves up
  // into the heading; where they differ (Gradio groups a level's messages), the heading is Gradio's and each
  // message keeps its own.
  const titles = %s;
  const titled = () => document.querySelectorAll('[data-testid=toast-body]').forEach(body => {
    const texts = [...body.querySelectorAll('[data-testid=toast-text]')];
    texts.forEach(el => {
      const t = el.firstChild;
      if (el.dataset.prefix !== undefined || !t || t.nodeType !== 3) return;
      const title = titles.find(x => t.data.startsWith(x + '. ') || t.data.startsWith(x + ': '));
      el.dataset.title = title || '';
      el.dataset.prefix = title ? t.data.slice(0, title.length + 2) : '';
    });
    const first = texts.length ? texts[0].dataset.title : '';
    const shared = first && texts.every(el => el.dataset.title === first) ? first : '';
    texts.forEach(el => {
      const t = el.firstChild, prefix = el.dataset.prefix;
      if (!prefix || !t || t.nodeType !== 3) return;
      if (shared && t.data.startsWith(prefix)) t.data = t.data.slice(prefix.length);
      else if (!shared && !t.data.startsWith(prefix)) t.data = prefix + t.data;
    });
    const heading = body.querySelector('.toast-title'), label = heading && heading.firstChild;
    if (!label || label.nodeType !== 3) return;
    if (heading.dataset.level === undefined) heading.dataset.level = label.data;
    const want = shared ? shared + ' ' : heading.dataset.level;
    if (label.data !== want) label.data = want;
  });
  new MutationObserver(() => { bare(); titled(); }).observe(document.body, {childList: true, subtree: true, characterData: true});
  // A pop-up speaks of its tab ("Upload a photo first", a clip's Stop): another tab chosen (click or keys), it closes.
  new MutationObserver(changes => {
    if (!changes.some(c => c.target.getAttribute('role') === 'tab' && c.target.getAttribute('aria-selected') === 'true')) return;
    %s
    const box = document.getElementById('video-on-photo');
    if (box) box.remove();
  }).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['aria-selected']});
}""" % (repr(VIDEO_ON_PHOTO_TAB), json.dumps(POPUP_TITLES), CLOSE_TOASTS)
