"""Showing a decode: which tokens the drafter got right, with token boundaries you can see.

One renderer for the demo (terminal), and the notebooks (HTML). Spaces are shown as ``␣``,
newlines as ``↵`` (followed by a real line break), tabs as ``⇥``, other control characters as
their Unicode control pictures (form feed ``␌``, ...), so a reader sees exactly where one
token ends and the next begins. Tokens that were drafted and accepted are marked;
the others are the target's own tokens (the first token, and the bonus token that ends each
verify step).
"""

from __future__ import annotations

import html

ACCEPTED = ("#a8e6a1", "#cdf2c8")          # two greens, alternating, so boundaries show
ANSI_ACCEPTED = ("\033[42;30m", "\033[102;30m")
ANSI_RESET = "\033[0m"
OPEN, SEP, CLOSE = "\u27e6", "\u2502", "\u27e7"   # ⟦ │ ⟧ : never confused with code brackets


def visible(text: str) -> str:
    """Text with its whitespace and control characters made visible: ␣ space, ⇥ tab, ↵ newline
    (kept as a line break after it), and U+2400 + code for the other control characters."""
    text = text.replace(" ", "\u2423").replace("\t", "\u21e5").replace("\n", "\u21b5\n")
    return "".join(chr(0x2400 + ord(c)) if ord(c) < 32 and c != "\n" else
                   "\u2421" if c == "\x7f" else c for c in text)


def token_text(tokenizer, token_id: int) -> str:
    """One token's text with its whitespace made visible."""
    return visible(tokenizer.decode([int(token_id)]))


def render(tokenizer, ids: list[int], drafted: list[bool], mode: str = "plain") -> str:
    """The answer with drafted-and-accepted tokens marked.

    mode "plain": each run of accepted tokens in ⟦ ⟧, tokens inside a run split by │;
    "ansi": accepted tokens on alternating green backgrounds (a terminal);
    "html": the same as spans, the target's own tokens ending in a thin grey bar.
    """
    if mode not in ("plain", "ansi", "html"):
        raise ValueError(f"mode {mode!r} is not 'plain', 'ansi' or 'html'")
    out, in_run, k = [], False, 0
    for t, good in zip(ids, list(drafted) + [False] * (len(ids) - len(drafted))):
        text = token_text(tokenizer, t)
        if mode == "html":
            style = (f"background:{ACCEPTED[k % 2]}" if good else "border-right:2px solid #888")
            out.append(f'<span style="{style}">{html.escape(text)}</span>')
        elif mode == "ansi":
            out.append(f"{ANSI_ACCEPTED[k % 2]}{text}{ANSI_RESET}" if good else text)
        else:
            if good:
                out.append((SEP if in_run else OPEN) + text)
            else:
                out.append((CLOSE if in_run else "") + text)
        k += good
        in_run = good
    if in_run and mode == "plain":
        out.append(CLOSE)
    return "".join(out)


def legend(mode: str = "plain") -> str:
    """What the marks of :func:`render` mean, in the same mode."""
    if mode == "html":
        return (f'<span style="background:{ACCEPTED[0]}">drafted</span><span style="background:'
                f'{ACCEPTED[1]}">and</span><span style="background:{ACCEPTED[0]}">accepted</span>'
                ' &nbsp; <span style="border-right:2px solid #888">the target\'s own token</span> '
                '(the first token, and the bonus token that ends each verify step); '
                '\u2423 space, \u21b5 newline')
    marked = (f"{ANSI_ACCEPTED[0]}drafted{ANSI_RESET}{ANSI_ACCEPTED[1]}and{ANSI_RESET}"
              f"{ANSI_ACCEPTED[0]}accepted{ANSI_RESET} (greens alternate per token)"
              if mode == "ansi" else f"{OPEN}drafted{SEP}and{SEP}accepted{CLOSE} (│ between tokens)")
    return (f"{marked}; unmarked: the target's own token\n(the first one, and the bonus token "
            f"that ends each verify step); \u2423 space, \u21b5 newline")
