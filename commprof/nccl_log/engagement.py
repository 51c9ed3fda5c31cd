"""Whether NCCL engaged what a point asked of it: the algorithm, protocol and channels its log shows for the step's
own ops against the point's NCCL_ALGO, NCCL_PROTO and NCCL_MIN/MAX_NCHANNELS. A setting NCCL did not engage (asked
LL128, logged LL) measured NCCL's own choice, so the point's records at those T say "not_engaged" and never rank as
that setting. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from commprof.nccl_log.parse import choice_matches
from commprof.nccl_vocab import ALGORITHMS, PROTOCOLS, modelled_selection, named

# The variables a log can show acting: the choice field each is read from.
SELECTIONS = {"NCCL_ALGO": ("algo", ALGORITHMS), "NCCL_PROTO": ("proto", PROTOCOLS)}
# Each channel bound and whether a channel count keeps it.
CHANNEL_BOUNDS = {
    "NCCL_MIN_NCHANNELS": lambda channels, bound: channels >= bound,
    "NCCL_MAX_NCHANNELS": lambda channels, bound: channels <= bound,
}
JUDGED = (*SELECTIONS, *CHANNEL_BOUNDS)

# (collective, input bytes per rank, output bytes) of one op of a step plan (measure.plan_sizes).
OpSize = tuple[str, int, int]


@dataclass(frozen=True)
class Engagement:
    """One variable a point set, judged against NCCL's log at every T."""

    variable: str
    asked: str
    engaged: bool | None  # None: the log cannot tell (no choice logged for the step's ops, no channel count)
    why: str  # what the log shows, in one sentence
    tokens_not_engaged: tuple[int, ...] = field(default=())  # the T whose ops ran something else

    def to_dict(self) -> dict[str, Any]:
        return {
            "variable": self.variable,
            "asked": self.asked,
            "engaged": self.engaged,
            "why": self.why,
            "tokens_not_engaged": list(self.tokens_not_engaged),
        }


def _choice_text(choice: dict, field_name: str) -> str:
    coll = choice.get("coll") or "op"
    return f"{choice.get(field_name)} for the {coll} of {choice.get('bytes')} B"


def _selection(variable: str, value: str, choices: list[dict], sizes: dict[int, list[OpSize]]) -> Engagement:
    """NCCL_ALGO / NCCL_PROTO: every logged choice for a step op of a restricted collective is one it allows."""
    field_name, names = SELECTIONS[variable]
    try:
        enabled = modelled_selection(variable, value)
    except ValueError as exc:
        return Engagement(variable, value, None, f"not judged: {exc}")
    restricted = {coll: allowed for coll, allowed in enabled.items() if allowed is not None}
    if not restricted:
        return Engagement(variable, value, None, "not judged: it restricts no collective the step issues")
    seen, wrong, wrong_tokens = 0, [], []
    for tokens, ops in sorted(sizes.items()):
        for collective, in_bytes, out_bytes in ops:
            if collective not in restricted:
                continue
            for choice in choices:
                if not choice_matches(choice, collective, in_bytes, out_bytes):
                    continue
                seen += 1
                ran = named(names, choice.get(field_name))
                if ran is None or ran.model not in restricted[collective]:
                    wrong.append(_choice_text(choice, field_name))
                    wrong_tokens.append(tokens)
    if wrong:
        shown = "; ".join(dict.fromkeys(wrong))
        return Engagement(variable, value, False, f"NCCL's log shows {shown}", tuple(sorted(set(wrong_tokens))))
    if not seen:
        return Engagement(variable, value, None, "not judged: NCCL logged no choice for the step's own ops")
    return Engagement(variable, value, True, f"NCCL's log shows it at all {seen} logged choice(s) of the step's ops")


def _channels(variable: str, value: str, nccl: dict, tokens: list[int]) -> Engagement:
    """NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS against the coll channels NCCL's init log reports."""
    try:
        bound = int(value)
    except ValueError:
        return Engagement(variable, value, None, f"not judged: {value!r} is not a number")
    channels = nccl.get("channels")
    if not isinstance(channels, int):
        return Engagement(variable, value, None, "not judged: NCCL's log gives no channel count")
    if CHANNEL_BOUNDS[variable](channels, bound):
        return Engagement(variable, value, True, f"NCCL's log shows {channels} coll channels")
    return Engagement(variable, value, False, f"NCCL's log shows {channels} coll channels", tuple(tokens))


def engagements(env: dict[str, str], nccl: dict | None, sizes: dict[int, list[OpSize]]) -> list[Engagement]:
    """Each variable of `env` a log can judge (JUDGED), against the point's summarised log `nccl` (its choices for
    the step's ops, its coll channels) at every T of `sizes` (T -> the plan's op sizes); [] without a log."""
    if not nccl:
        return []
    choices = list(nccl.get("choices") or [])
    found = []
    for variable in JUDGED:
        value = env.get(variable)
        if value is None:
            continue
        if variable in SELECTIONS:
            found.append(_selection(variable, str(value), choices, sizes))
        else:
            found.append(_channels(variable, str(value), nccl, sorted(sizes)))
    return found


def not_engaged_at(found: list[Engagement]) -> dict[int, str]:
    """T -> why the point's records there measured something other than what it asked (one sentence)."""
    at: dict[int, list[str]] = {}
    for item in found:
        if item.engaged is False:
            for tokens in item.tokens_not_engaged:
                at.setdefault(tokens, []).append(f"{item.variable}={item.asked} not engaged: {item.why}")
    return {tokens: "; ".join(reasons) for tokens, reasons in at.items()}
